#!/usr/bin/env bash
# The README's CPU-only install, checked in a fresh virtual environment: torch from torch's CPU index, then the
# package; it must end with a CPU torch and without any `nvidia-*` package (PyPI's torch would bring ~6.6 GB of
# them). Needs the CPU index (download.pytorch.org). Where it cannot be reached, the part that can run does: a
# stand-in CPU torch (an empty distribution named torch, at the lowest version pyproject.toml accepts, "+cpu") in a
# fresh venv, and `pip install --dry-run --report -e .` must keep it and add no nvidia-* package; then exit 3
# (the install itself NOT RUN), never 0. Exit 0: clean; 1: an nvidia-* package or a CUDA torch got in (or would);
# 2: an install failed.
#
#   bash benchmarks/check_cpu_install.sh            # or: FADE_CHECK_CPU_INSTALL=1 bash .ci/run (runs this first)
#
# The commands are the README's, word for word (the `pip install -e .` line of "Quick start").
set -uo pipefail
cd "$(dirname "$0")/.."
INDEX=https://download.pytorch.org/whl/cpu
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
VENV=$TMP/venv
python3 -m venv "$VENV"
# shellcheck disable=SC1091
source "$VENV/bin/activate"
if ! python3 -c "import urllib.request as u; u.urlopen('$INDEX/torch/', timeout=20)" 2>/dev/null; then
  echo "check_cpu_install: NOT RUN: torch's CPU index ($INDEX) cannot be reached from this machine"
  lowest=$(python - <<'PY'
import re, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
print(next(re.search(r">=\s*([\w.]+)", d).group(1) for d in deps if re.match(r"torch\b", d)))
PY
)
  mkdir -p "$TMP/standin/torch" && echo "__version__ = '$lowest+cpu'" > "$TMP/standin/torch/__init__.py"
  printf '[project]\nname = "torch"\nversion = "%s+cpu"\n[tool.setuptools]\npackages = ["torch"]\n' "$lowest" \
    > "$TMP/standin/pyproject.toml"
  pip install --quiet "$TMP/standin" || exit 2
  pip install --quiet --dry-run --report "$TMP/report.json" -e . 2>"$TMP/pip.log" || { cat "$TMP/pip.log"; exit 2; }
  python - "$TMP/report.json" "$lowest" <<'PY'
import json, sys
names = [i["metadata"]["name"].lower() for i in json.load(open(sys.argv[1]))["install"]]
bad = [n for n in names if n == "torch" or n.startswith("nvidia-")]
print(f"check_cpu_install: resolution with a stand-in torch {sys.argv[2]}+cpu installed: {len(names)} packages to "
      f"add, " + (f"FAILED: it would install {', '.join(bad)}" if bad else "torch kept, no nvidia-* package"))
sys.exit(1 if bad else 3)
PY
  exit $?
fi
if ! { pip install --quiet torch --index-url "$INDEX" && pip install --quiet -e .; }; then
  echo "check_cpu_install: FAILED: the README's CPU-only install did not finish"
  exit 2
fi
nvidia=$(pip list --format=freeze | grep -i '^nvidia-' || true)
torch_version=$(python -c 'import torch; print(torch.__version__, torch.version.cuda)')
size=$(du -sh "$VENV" | cut -f1)
echo "check_cpu_install: torch $torch_version; venv $size"
if [ -n "$nvidia" ] || [[ "$torch_version" != *"None" ]]; then
  echo "check_cpu_install: FAILED: the CPU-only install has a CUDA torch or nvidia-* packages:"
  echo "$nvidia"
  exit 1
fi
echo "check_cpu_install: OK: no nvidia-* package, torch is the CPU build"
