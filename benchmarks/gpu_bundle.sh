#!/usr/bin/env bash
# Build, on a CPU machine with PyPI access, what the GPU machine's image lacks for a sweep through
# Ray Tune, as ONE folder under the device tool's 64 MiB transfer cap (the Ray wheel alone is over it):
#
#   bash benchmarks/gpu_bundle.sh [BUNDLE_DIR]     # default .gpu_bundle (git-ignored here)
#
#   BUNDLE_DIR/site.tar.xz   Ray (without jars/, rllib/, serve/), polars and every package of
#                            ray[default,tune] the image does not hold, as a site-packages tree
#                            for the image's Python ($GPU_PYTHON, default 3.12)
#   BUNDLE_DIR/emnist/       a generated EMNIST-format bymerge test split (the real data does not travel)
#   BUNDLE_DIR/MANIFEST      versions and sizes
#
# benchmarks/gpu_check.sh unpacks site.tar.xz into a temporary folder and puts it on PYTHONPATH.
# Pass the folder with the device call's `carry` (e.g. carry: [".gpu_bundle"]).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
pyver=${GPU_PYTHON:-3.12}
bundle=${1:-.gpu_bundle}
limit=$((62 * 1024 * 1024))  # 64 MiB cap, less the repository itself

# The image's Python packages (device KINDS.md, read 2026-11-17): never carried, so nothing shadows them.
image="absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jaxlib jaxtyping jinja2 joblib
kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown
markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch
mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro onnx onnx-ir onnxruntime
onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas
pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11
py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest python-dateutil pytorch-lightning pyyaml
regex requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn
sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels sympy
tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz
torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer
typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp"

# What to carry: the closure of ray[default,tune] and polars as installed HERE (the versions the
# project's tests use), less the image's packages and py-spy (a profiler binary Ray runs on request only).
wanted=$(IMAGE="$image" $py - <<'EOF'
import importlib.metadata as md, os, re
from packaging.requirements import Requirement
norm = lambda n: re.sub(r"[-_.]+", "-", n.lower())
skip = {norm(n) for n in os.environ["IMAGE"].split()} | {"py-spy"}
env = {"python_version": os.environ.get("GPU_PYTHON", "3.12"), "sys_platform": "linux", "platform_system": "Linux",
       "platform_machine": "x86_64", "os_name": "posix", "implementation_name": "cpython",
       "platform_python_implementation": "CPython"}
found, todo = {}, [("ray", {"default", "tune"}), ("polars", set())]
while todo:
    name, extras = todo.pop()
    if norm(name) in skip or norm(name) in found:
        continue
    found[norm(name)] = md.version(name)
    for text in md.requires(name) or []:
        req = Requirement(text)
        if req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in {"", *extras}):
            todo.append((req.name, set(req.extras)))
print(" ".join(f"{n}=={v}" for n, v in sorted(found.items())))
EOF
)
echo "carrying: $wanted"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
# Binary wheels for the image's interpreter; --no-deps: the list above is already the closure.
# Only PyPI: a local find-links or extra index would hold wheels for THIS machine's Python.
$py -m pip download -q --isolated --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
  "${platforms[@]}" --index-url https://pypi.org/simple -d "$work/wheels" $wanted
$py -m pip install -q --isolated --no-deps --no-index --no-compile --only-binary=:all: --python-version "$pyver" \
  --implementation cp "${platforms[@]}" --target "$work/site" "$work"/wheels/*.whl
# Ray's Java jars, RLlib and Serve are not used by a sweep (the wheel is ~70 MB compressed with them).
rm -rf "$work/site/ray/jars" "$work/site/ray/rllib" "$work/site/ray/serve" "$work/site/bin"
find "$work/site" -name __pycache__ -prune -exec rm -rf {} +
# Debug symbols are a third of Ray's and polars' binaries (about 75 MB); the dynamic ones stay.
find "$work/site" -type f \( -name '*.so*' -o -perm -u+x \) -print0 | while IFS= read -r -d '' f; do
  if [[ $(head -c4 "$f" | od -An -c | tr -d ' ') == 177ELF ]]; then strip --strip-unneeded "$f"; fi
done

rm -rf "$bundle"
mkdir -p "$bundle"
tar -C "$work/site" -cf - . | xz -T2 -9 >"$bundle/site.tar.xz"
$py -c "
import sys; sys.path.insert(0, '.')
from pathlib import Path
from tests.emnist_fixture import write_idx_dataset
write_idx_dataset(Path('$bundle/emnist'), images=4000, split='bymerge', train=False)"

git_dir=$(git rev-parse --git-common-dir 2>/dev/null || true)
if [[ -n $git_dir && $bundle == .gpu_bundle ]] && ! grep -qx '/.gpu_bundle/' "$git_dir/info/exclude" 2>/dev/null; then
  echo '/.gpu_bundle/' >>"$git_dir/info/exclude"
fi

{
  echo "python $pyver x86_64; built $(date -u +%FT%TZ) on $(uname -n)"
  echo "$wanted" | tr ' ' '\n'
  echo "unpacked site: $(du -sm "$work/site" | cut -f1) MB"
  (cd "$bundle" && du -ab . | sort -k2)
} >"$bundle/MANIFEST"
total=$(du -sb "$bundle" | cut -f1)
echo "bundle $bundle: $((total / 1024)) KiB (site.tar.xz $(( $(stat -c %s "$bundle/site.tar.xz") / 1024 )) KiB)"
if ((total > limit)); then
  echo "gpu_bundle.sh: $bundle is $total bytes, over the $limit-byte budget of one device transfer" >&2
  exit 2
fi
