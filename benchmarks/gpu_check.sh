#!/usr/bin/env bash
# The prepared GPU check, in one device call (under 9 minutes on one H100/H200): the CUDA and
# Triton tests, the GPU benchmarks in steady state (torch ops vs fused Triton kernels, and
# the JAX peer), and the same mixed sweep through Ray Tune on CPUs only, with
# --gpus-per-pack 1 and with 0.5 (neural packs on the GPU, linear packs on CPU slots), compared
# store against store. Every part runs even when an earlier one fails; a summary ends the output.
#
#   bash benchmarks/gpu_check.sh                       # everything
#   bash benchmarks/gpu_check.sh tests bench           # some of: tests bench peer sweep
#
# The GPU image lacks Ray and polars: benchmarks/gpu_bundle.sh builds them (and a generated EMNIST
# split) into .gpu_bundle/, which the device call carries (carry: [".gpu_bundle"]); this script
# unpacks it into a temporary site folder on PYTHONPATH. EMNIST: $FADE_EMNIST_DIR, else the bundle's.
# Output: $OUT/summary.txt and $OUT/gpu_check_logs.tar.gz (every log; the device returns 8 files at
# most). Each step's time limit is cut to what is left of GPU_CHECK_BUDGET (seconds, default 540).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
py=${PYTHON:-python3}
out=${OUT:-/tmp/gpu_check_out}
logs=$(mktemp -d /tmp/gpu_check_logs.XXXX)
work=$(mktemp -d /tmp/gpu_check_work.XXXX)
mkdir -p "$out"
parts=" ${*:-tests bench peer sweep} "
start=$(date +%s)
deadline=$((start + ${GPU_CHECK_BUDGET:-540}))
summary=()

note() { summary+=("$(printf '%-13s| %s' "$1" "$2")"); echo "-- $1: $2"; }

# step NAME LIMIT CMD...: run CMD with LIMIT seconds (less if the budget is nearly spent), output in
# $logs/NAME.log; its exit status (124: timed out, 125: no time left).
step() {
  local name=$1 limit=$2 left=$((deadline - $(date +%s) - 15))
  shift 2
  ((left < limit)) && limit=$left
  if ((limit < 10)); then
    echo "skipped: the ${GPU_CHECK_BUDGET:-540} s budget is spent" >"$logs/$name.log"
    return 125
  fi
  timeout "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  ((rc == 124)) && echo "timed out after ${limit}s" >>"$logs/$name.log"
  return $rc
}

finish() {
  {
    echo "== GPU check summary ($(($(date +%s) - start)) s; logs in gpu_check_logs.tar.gz)"
    printf '%s\n' "${summary[@]}"
  } | tee "$out/summary.txt"
  tar -C "$logs" -czf "$out/gpu_check_logs.tar.gz" .
  rm -rf "$work"
}
trap finish EXIT

# -- the machine, and what the image lacks ------------------------------------------------
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$logs/gpu.log" 2>&1
note gpu "$(head -1 "$logs/gpu.log")"
bundle=${FADE_GPU_BUNDLE:-.gpu_bundle}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if [[ -f $bundle/site.tar.xz ]]; then
  mkdir -p "$work/site"
  if tar -xJf "$bundle/site.tar.xz" -C "$work/site" 2>"$logs/bundle.log"; then
    export PYTHONPATH=$work/site:$PYTHONPATH
    note bundle "unpacked $(du -sm "$work/site" | cut -f1) MB from $bundle/site.tar.xz"
  else
    note bundle "FAILED to unpack $bundle/site.tar.xz: $(tail -1 "$logs/bundle.log")"
  fi
else
  note bundle "none at $bundle (bash benchmarks/gpu_bundle.sh builds it): Ray and polars only if the image has them"
fi
[[ -z ${FADE_EMNIST_DIR:-} && -d $bundle/emnist ]] && export FADE_EMNIST_DIR=$PWD/$bundle/emnist
export FADE_EMNIST_DIR=${FADE_EMNIST_DIR:-$(cd .. && pwd)/shared/data/emnist}
$py -c "
import sys, torch
try:
    import triton; tv = triton.__version__
except ImportError as err:
    tv = f'missing ({err})'
mods = []
for name in ('ray', 'polars', 'jax'):
    try:
        mods.append(f'{name} {__import__(name).__version__}')
    except Exception as err:
        mods.append(f'{name} missing ({type(err).__name__})')
gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else 'NO CUDA'
print(f'python {sys.version.split()[0]}, torch {torch.__version__}, triton {tv}, {\", \".join(mods)}; {gpu}')
" >"$logs/versions.log" 2>&1
note versions "$(tail -1 "$logs/versions.log")"

# -- tests: the CUDA path against the CPU kernel (torch ops and fused kernels), the fused kernels
#    against the torch ops, the neural tasks on CUDA ----------------------------------------
if [[ $parts == *" tests "* ]]; then
  step tests 240 $py -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_triton.py tests/test_neural_tasks.py \
    -k "cuda or triton or fused"
  note tests "exit $? $(grep -E '[0-9]+ (passed|failed|error)' "$logs/tests.log" | tail -1)"
  while read -r line; do note "  failed" "$line"; done < <(grep -E '^(FAILED|ERROR)' "$logs/tests.log" | head -8)
fi

# -- benchmarks: one full pack per line, steady state (bench_neural.py) ----------------------
# BENCH_CASES: "task:optimizer:runs:engine ...", engine triton (fused kernels) or torch (the torch ops).
if [[ $parts == *" bench "* ]]; then
  cases=${BENCH_CASES:-emnist:fade_sgd:2000:triton emnist:fade_sgd:2000:torch emnist:adam:2000:triton \
emnist:adam:2000:torch emnist:fade_adam:2000:triton emnist:fade_adam:2000:torch \
emnist:adamw:2000:triton nonlinear:fade_sgd:4000:triton nonlinear:fade_sgd:4000:torch nonlinear:fade_adam:4000:triton}
  for spec in $cases; do
    IFS=: read -r task optimizer runs mode <<<"$spec"
    step "bench-$task-$optimizer-$mode" 90 $py benchmarks/bench_neural.py --device cuda --engine "$mode" --task "$task" \
      --optimizer "$optimizer" --runs "$runs" --steps "${BENCH_STEPS:-400}" --no-naive
    note "bench $mode" "$task $optimizer: $(tail -1 "$logs/bench-$task-$optimizer-$mode.log" | cut -c1-140)"
  done
fi

# -- the JAX peer (vmap + scan) on whatever device JAX finds -------------------------------
if [[ $parts == *" peer "* ]]; then
  if [[ -f benchmarks/peer_jax.py ]]; then
    step peer 120 $py benchmarks/peer_jax.py --workloads nonlinear,emnist
    note peer "exit $? $(grep -v '^\s*$' "$logs/peer.log" | tail -1 | cut -c1-150)"
  else
    note peer "skipped: no benchmarks/peer_jax.py in this checkout"
  fi
fi

# -- sweeps through Ray Tune: CPUs only, then neural packs on the GPU (whole and half) --------
if [[ $parts == *" sweep "* ]]; then
  if ! $py -c "import ray, polars" >"$logs/sweep-imports.log" 2>&1; then
    note sweep "skipped: $(tail -1 "$logs/sweep-imports.log")"
  else
    for gpus in cpu 1 0.5; do
      extra=()
      [[ $gpus != cpu ]] && extra=(--gpus-per-pack "$gpus")
      # Sample the GPU's processes meanwhile: the neural packs must show up there.
      nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader -l 1 >"$logs/sweep-$gpus-gpu-apps.log" 2>&1 &
      sampler=$!
      step "sweep-$gpus" 150 $py -m sweeps.cli run benchmarks/gpu_sweep.yaml --storage "$work/store-$gpus" --no-report \
        --table-format csv "${extra[@]}"
      rc=$?
      kill "$sampler" 2>/dev/null
      wait "$sampler" 2>/dev/null
      seen=$(cut -d, -f1 "$logs/sweep-$gpus-gpu-apps.log" | grep -cE '^[0-9]+$')
      note "sweep $gpus" "exit $rc, GPU-process samples $seen; $(grep -E '^Done' "$logs/sweep-$gpus.log" | tail -1 | cut -c1-90)"
    done
    step sweep-compare 60 $py benchmarks/compare_stores.py "$work/store-cpu/gpu-check" "$work/store-1/gpu-check" \
      "$work/store-0.5/gpu-check"
    note "sweep check" "exit $? $(tail -1 "$logs/sweep-compare.log")"
  fi
fi
