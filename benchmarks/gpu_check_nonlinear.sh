#!/usr/bin/env bash
# The persistent engine's GPU check (issue 29), in one device call within NONLINEAR_CHECK_BUDGET seconds
# (default 240): its tests compiled on CUDA, the engine beside the JAX peer at 240/1000/4000 runs, a
# nonlinear sweep through Ray Tune on CPUs and with --gpus-per-pack 1 --engine persistent compared store
# against store, then the kernel's knobs (num_warps, stream) at 4,000 runs if time is left. Every part
# runs even when an earlier one fails; the summary ends the output and goes to $NONLINEAR_SUMMARY.
#
#   bash benchmarks/gpu_check_nonlinear.sh               # on a GPU machine (device call, carry .gpu_bundle)
#   bash benchmarks/gpu_check_nonlinear.sh --dry-run     # on a CPU: Triton's interpreter, toy sizes, same paths
#   bash benchmarks/gpu_check_nonlinear.sh tests bench   # some of: tests bench sweep knobs
#
# Ray and polars: importable, or unpacked here from $FADE_GPU_BUNDLE/site.tar.xz (benchmarks/gpu_bundle.sh).
# JAX: the device image has it; elsewhere the peer parts need `pip install "jax[cpu]"`.
# Output: $NONLINEAR_SUMMARY (default $OUT/summary.txt) and $OUT/nonlinear_logs.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
dry=0
if [[ ${1:-} == --dry-run ]]; then dry=1; shift; fi
py=${PYTHON:-python3}
out=${OUT:-/tmp/gpu_check_out}
summary_file=${NONLINEAR_SUMMARY:-$out/summary.txt}
logs=$(mktemp -d /tmp/nonlinear_logs.XXXX)
work=$(mktemp -d /tmp/nonlinear_work.XXXX)
mkdir -p "$out"
parts=" ${*:-tests bench sweep knobs} "
start=$(date +%s)
budget=${NONLINEAR_CHECK_BUDGET:-240}
((dry)) && budget=${NONLINEAR_CHECK_BUDGET:-1500}
deadline=$((start + budget))
slow=1
((dry)) && slow=4  # the interpreter and a small shared CPU: every step's limit times four
summary=()

source benchmarks/check_lib.sh  # note, step

finish() {
  {
    echo "== nonlinear persistent-engine check ($(($(date +%s) - start)) s of $budget; logs in nonlinear_logs.tar.gz)"
    printf '%s\n' "${summary[@]}"
  } | tee "$summary_file"
  tar -C "$logs" -czf "$out/nonlinear_logs.tar.gz" .
  rm -rf "$work"
}
trap finish EXIT

if ((dry)); then
  export TRITON_INTERPRET=1
  note mode "dry run on the CPU (Triton's interpreter, toy sizes): paths and syntax only, no figure means anything"
else
  export TRITON_INTERPRET=0
  note gpu "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
fi
if ! $py -c "import ray, polars" 2>/dev/null && [[ -f ${FADE_GPU_BUNDLE:-.gpu_bundle}/site.tar.xz ]]; then
  mkdir -p "$work/site" && tar -xJf "${FADE_GPU_BUNDLE:-.gpu_bundle}/site.tar.xz" -C "$work/site" && export PYTHONPATH=$work/site:$PYTHONPATH
fi
$py -c "
import torch, triton
mods = []
for name in ('jax', 'ray', 'polars'):
    try:
        mods.append(f'{name} {__import__(name).__version__}')
    except Exception as err:
        mods.append(f'{name} missing ({type(err).__name__})')
print(f'torch {torch.__version__}, triton {triton.__version__}, ' + ', '.join(mods))
" >"$logs/versions.log" 2>&1
note versions "$(tail -1 "$logs/versions.log")"

# -- tests: the engine against the torch ops (and, in the interpreter, the CPU kernel); invariance;
#    divergence; packs through the runner against the CPU kernel ---------------------------------
if [[ $parts == *" tests "* ]]; then
  select=()
  ((dry)) && select=(-k "diverging or refuses or picks or position and adamw")
  step tests $((90 * slow)) $py -m pytest -q -p no:cacheprovider tests/test_persistent.py "${select[@]}"
  note tests "exit $? $(grep -E '[0-9]+ (passed|failed|error)' "$logs/tests.log" | tail -1)"
  while read -r line; do note "  failed" "$line"; done < <(grep -E '^(FAILED|ERROR)' "$logs/tests.log" | head -8)
fi

# -- the engine beside the JAX peer on the same GPU (peer_gpu.py through peer_jax.py) -----------------
if [[ $parts == *" bench "* ]]; then
  if ((dry)); then
    step bench 900 $py benchmarks/peer_jax.py --dry-run --summary "$logs/bench-table.txt"
  else
    step bench $((70 * slow)) $py benchmarks/peer_jax.py --device cuda --runs 240,1000,4000 --steps "${BENCH_STEPS:-1000}" \
      --learners fade_sgd,adam,adamw,fade_adam --repeats 2 --summary "$logs/bench-table.txt"
  fi
  note bench "exit $? (engine/s, JAX/s: run-steps per second; ratio engine/JAX)"
  [[ -f $logs/bench-table.txt ]] && while read -r line; do note "  " "$line"; done <"$logs/bench-table.txt"
fi

# -- a nonlinear sweep through Ray Tune: CPU packs, then GPU packs on the persistent engine ----------
if [[ $parts == *" sweep "* ]]; then
  if ! $py -c "import ray, polars" >"$logs/sweep-imports.log" 2>&1; then
    note sweep "skipped: $(tail -1 "$logs/sweep-imports.log")"
  else
    sweep=benchmarks/gpu_sweep_nonlinear.yaml
    if ((dry)); then  # the same sweep, short enough for the interpreter
      sed -e 's/steps: 4000, score_window: 1000, bin: 500, period: 250/steps: 40, score_window: 20, bin: 20, period: 10/' \
        -e '/adam:/d' "$sweep" >"$work/sweep.yaml"
      sweep=$work/sweep.yaml
    fi
    extra=(--gpus-per-pack 1 --engine persistent)
    ((dry)) && extra=()  # (the dry run's "GPU" packs run on the CPU's default engine: the paths, not the kernel)
    step sweep-cpu $((40 * slow)) $py -m sweeps.cli run "$sweep" --storage "$work/store-cpu" --no-report --table-format csv
    note "sweep cpu" "exit $? $(grep -E '^Done' "$logs/sweep-cpu.log" | tail -1 | cut -c1-90)"
    step sweep-gpu $((40 * slow)) $py -m sweeps.cli run "$sweep" --storage "$work/store-gpu" --no-report \
      --table-format csv "${extra[@]}"
    note "sweep gpu" "exit $? (${extra[*]}) $(grep -E '^Done' "$logs/sweep-gpu.log" | tail -1 | cut -c1-80)"
    step sweep-compare $((15 * slow)) $py benchmarks/compare_stores.py "$work/store-cpu/nonlinear-check" "$work/store-gpu/nonlinear-check"
    note "sweep check" "exit $? $(tail -1 "$logs/sweep-compare.log")"
  fi
fi

# -- the knobs at 4,000 runs: warps for fade_sgd, where Adam's moments live for adam ----------------
if [[ $parts == *" knobs "* ]] && ((!dry)); then
  # (most telling first: the budget cuts the list's end)
  for knob in "fade_sgd --warps 8" "adam --stream 0 --maxnreg 128" "adam --approx" "adam --stream 1" "fade_sgd --warps 4" \
    "fade_adam --stream 1" "fade_adam --maxnreg 128" "sgd --warps 16"; do
    read -r learner flags <<<"$knob"
    name="knob-$learner${flags// /}"
    # shellcheck disable=SC2086  # the knob's flags split into words on purpose
    step "$name" 40 $py benchmarks/peer_jax.py --device cuda --runs 4000 --steps "${BENCH_STEPS:-1000}" \
      --learners "$learner" $flags --repeats 2 --no-peer
    note "knob" "exit $? $(grep -E "^$learner " "$logs/$name.log" | tail -1)"
  done
fi
