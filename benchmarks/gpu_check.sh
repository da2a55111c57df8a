#!/usr/bin/env bash
# The prepared GPU check: the CUDA tests, the GPU benchmarks and sweeps through Ray Tune on
# the GPU, in one call (about 6 minutes on one H100/H200), ending with one summary table.
#
#   bash benchmarks/gpu_check.sh                 # everything
#   bash benchmarks/gpu_check.sh tests bench     # some of: tests bench sweep
#
# EMNIST comes from $FADE_EMNIST_DIR (default ../shared/data/emnist, the bymerge test split).
# Logs go to $OUT/gpu_check (or /tmp/gpu_check). Needs a CUDA GPU; `sweep` also needs Ray and
# polars (the project's own dependencies).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
export FADE_EMNIST_DIR=${FADE_EMNIST_DIR:-$(cd .. && pwd)/shared/data/emnist}
py=${PYTHON:-python3}
logs=${OUT:-/tmp}/gpu_check
mkdir -p "$logs"
parts=${*:-tests bench sweep}
summary=()
start=$(date +%s)

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || exit 1
$py -c "import torch, numba; print('torch', torch.__version__, 'numba', numba.__version__, torch.cuda.get_device_name())" || exit 1

if [[ " $parts " == *" tests "* ]]; then
  echo "== CUDA tests"
  timeout 300 $py -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_neural_tasks.py -k "cuda" 2>&1 \
    | tee "$logs/tests.log" | grep -E "passed|failed|Error|error|assert" | tail -25
  summary+=("tests       | $(grep -E '^[0-9]+ (passed|failed)|passed|failed' "$logs/tests.log" | tail -1)")
fi

if [[ " $parts " == *" bench "* ]]; then
  echo "== benchmarks (pack run-steps/s on the GPU, share of HBM bandwidth)"
  # BENCH_CASES: "task:optimizer:runs ..." to time fewer packs
  cases=${BENCH_CASES:-emnist:fade_sgd:2000 emnist:adam:2000 emnist:adamw:2000 emnist:fade_adam:2000 nonlinear:fade_sgd:4000 nonlinear:fade_adam:4000}
  for spec in $cases; do
    IFS=: read -r task optimizer runs <<<"$spec"
    line=$(timeout 150 $py benchmarks/bench_neural.py --device cuda --task "$task" --optimizer "$optimizer" \
             --runs "$runs" --steps "${BENCH_STEPS:-500}" --no-naive 2>"$logs/bench-$task-$optimizer.err" | tail -1)
    echo "$line"
    summary+=("bench       | ${line:-failed: $(tail -1 "$logs/bench-$task-$optimizer.err")}")
  done
  # The same Adam-family packs with the update compiled by torch.compile (FADE_TORCH_COMPILE=1).
  for optimizer in ${COMPILED_CASES-adam fade_adam}; do
    line=$(FADE_TORCH_COMPILE=1 timeout 200 $py benchmarks/bench_neural.py --device cuda --task emnist \
             --optimizer "$optimizer" --runs 2000 --steps "${BENCH_STEPS:-500}" --no-naive \
             2>"$logs/bench-compiled-$optimizer.err" | tail -1)
    echo "compiled: $line"
    summary+=("compiled    | ${line:-failed: $(tail -1 "$logs/bench-compiled-$optimizer.err")}")
  done
fi

if [[ " $parts " == *" sweep "* ]]; then
  echo "== sweeps through Ray Tune on the GPU"
  if ! $py -c "import ray, polars" 2>/dev/null; then
    summary+=("sweep       | skipped: ray or polars not importable here")
  else
    for gpus in cpu 1 0.5; do
      extra=(); [[ $gpus != cpu ]] && extra=(--gpus-per-pack "$gpus")
      timeout 240 $py -m sweeps.cli run benchmarks/gpu_sweep.yaml --storage "$logs/store-$gpus" --no-report \
        --table-format csv "${extra[@]}" >"$logs/sweep-$gpus.log" 2>&1
      summary+=("sweep $gpus   | exit $? $(grep -E '^Done' "$logs/sweep-$gpus.log" | cut -c1-110)")
    done
    summary+=("sweep check | $($py benchmarks/compare_stores.py "$logs/store-cpu/gpu-check" "$logs/store-1/gpu-check" \
                 "$logs/store-0.5/gpu-check" 2>&1 | tail -1)")
  fi
fi

echo
echo "== GPU check summary ($(( $(date +%s) - start )) s)"
printf '%s\n' "${summary[@]}"
