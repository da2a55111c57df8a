#!/usr/bin/env bash
# Build, on a CPU machine with PyPI access, what the GPU machine's image lacks for the GPU check,
# as ONE folder that fits the device tool's 64 MiB transfer together with the repository:
#
#   bash benchmarks/gpu_bundle.sh [BUNDLE_DIR]     # default .gpu_bundle (git-ignored)
#
#   BUNDLE_DIR/site.tar.xz   every distribution of pyproject.toml's dependencies (their closure, at the
#                            versions installed here) that the image does not hold, as a site-packages
#                            tree for the image's Python ($GPU_PYTHON, default 3.12); the list is
#                            benchmarks/gpu_bundle.py's (`pins`), the image's packages
#                            benchmarks/gpu_image_packages.txt
#   BUNDLE_DIR/emnist/       the first 12,000 images of the EMNIST bymerge test split (~3 MiB; emnist_cut.py),
#                            which gpu_check_emnist.sh's sweep reads; from $FADE_EMNIST_DIR or the shared
#                            data folder beside the checkout, left out (with a note) where neither holds it
#   BUNDLE_DIR/MANIFEST      the pins, sizes per distribution unpacked, and the transfer's breakdown
#
# benchmarks/gpu_check.sh unpacks site.tar.xz into a temporary folder and puts it on PYTHONPATH.
# Device call: carry [".gpu_bundle"], command `bash benchmarks/gpu_check.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
pyver=${GPU_PYTHON:-3.12}
bundle=${1:-.gpu_bundle}
cap=$((64 * 1024 * 1024))
# What travels besides the bundle: tracked and untracked-not-ignored files (as the device tool sends them).
repo=$(git ls-files -z -co --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
limit=$((cap - repo - 256 * 1024))  # and a margin for files added before the call

wanted=$(GPU_PYTHON=$pyver $py benchmarks/gpu_bundle.py pins)
echo "carrying: $(echo "$wanted" | tr '\n' ' ')"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
# Binary wheels for the image's interpreter; --no-deps: the list above is already the closure.
# Only PyPI: a local find-links or extra index would hold wheels for THIS machine's Python.
# (Pure-Python packages without a wheel would need --no-binary; every current pin has one.)
# shellcheck disable=SC2086
$py -m pip download -q --isolated --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
  "${platforms[@]}" --index-url https://pypi.org/simple -d "$work/wheels" $wanted
$py -m pip install -q --isolated --no-deps --no-index --no-compile --only-binary=:all: --python-version "$pyver" \
  --implementation cp "${platforms[@]}" --target "$work/site" "$work"/wheels/*.whl
# What a sweep never loads (gpu_bundle.py's PRUNED: Ray's Java jars, RLlib, Serve, LLM; console scripts; Jupyter files).
prune=$($py -c "import sys; sys.path.insert(0, 'benchmarks'); import gpu_bundle; print(' '.join(gpu_bundle.PRUNED))")
for p in $prune; do rm -rf "${work:?}/site/$p"; done
find "$work/site" -name __pycache__ -prune -exec rm -rf {} +
# The dashboard's JavaScript source maps (6.7 MB, for debugging its page) and the packages' own tests.
find "$work/site" -name '*.js.map' -delete
find "$work/site" -type d -name tests -prune -exec rm -rf {} +
# Debug symbols are a third of Ray's and polars' binaries (about 75 MB); the dynamic ones stay.
find "$work/site" -type f \( -name '*.so*' -o -perm -u+x \) -print0 | while IFS= read -r -d '' f; do
  if [[ $(head -c4 "$f" | od -An -c | tr -d ' ') == 177ELF ]]; then strip --strip-unneeded "$f"; fi
done

rm -rf "$bundle"
mkdir -p "$bundle"
tar -C "$work/site" -cf - . | xz -T2 -9e >"$bundle/site.tar.xz"
emnist_note="no EMNIST cut: no bymerge test split in \$FADE_EMNIST_DIR, ../shared/data/emnist or ../../shared/data/emnist"
for src in ${FADE_EMNIST_DIR:+"$FADE_EMNIST_DIR"} ../shared/data/emnist ../../shared/data/emnist; do
  if [[ -f $src/emnist-bymerge-test-images-idx3-ubyte.gz ]]; then
    emnist_note=$($py benchmarks/emnist_cut.py "$src" "$bundle/emnist" --images 12000)
    break
  fi
done
echo "$emnist_note"
kib() { echo "$(($1 / 1024)) KiB"; }
site=$(stat -c %s "$bundle/site.tar.xz")
{
  echo "python $pyver x86_64; built $(date -u +%FT%TZ) on $(uname -n)"
  echo "== pins (pyproject.toml's closure less the image's packages)"
  echo "$wanted"
  echo "== unpacked site, MB per top-level entry (after pruning and stripping)"
  (cd "$work/site" && du -sm -- * | sort -rn)
  echo "== EMNIST: $emnist_note"
  echo "== transfer: repository $(kib "$repo"), site.tar.xz $(kib "$site")"
} >"$bundle/MANIFEST"
total=$(du -sb "$bundle" | cut -f1)
echo "bundle $bundle: $(kib "$total") (site.tar.xz $(kib "$site")); repository $(kib "$repo");" \
  "together $(kib $((total + repo))) of the $(kib "$cap") a device call carries"
if ((total > limit)); then
  echo "gpu_bundle.sh: $bundle is $total bytes; with the repository ($repo bytes) it is over one device transfer" \
    "($cap bytes, less a 256 KiB margin)" >&2
  exit 2
fi
