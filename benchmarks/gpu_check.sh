#!/usr/bin/env bash
# The prepared GPU check, in one device call, under a seconds budget (GPU_CHECK_BUDGET, default 480):
#
#   bash benchmarks/gpu_bundle.sh                     # here, once: .gpu_bundle/ (what the image lacks)
#   device run, carry [".gpu_bundle"]: bash benchmarks/gpu_check.sh
#   bash benchmarks/gpu_check.sh tests packs           # some of: tests bench packs sweep nonlinear
#   bash benchmarks/gpu_check.sh --dry-run             # what would run, and why a part would be skipped
#
# Parts, in order, each with its own budget in seconds (env GPU_CHECK_<PART>_S), cut to what is left of
# the total; a part that overruns is killed and reported as cut:
#   tests      (70)  the fused Triton step and update kernels compiled, against the torch ops; the Triton
#                    engine's packs against the CPU kernel (test_cuda.py -k triton)
#   bench      (60)  bench_neural.py, EMNIST packs of 2,000 runs: the engines triton_step (the fused step)
#                    and triton (the per-parameter kernels), fade_sgd and adam
#   packs      (60)  bench_gpu_packs.py: one large pack vs small L2-resident packs on streams, and the JAX
#                    peer (peer_jax.py's EMNIST program) at 100 and 2,000 runs
#   sweep      (120) gpu_sweep.yaml through Ray Tune (--no-report): CPUs only, then --gpus-per-pack 1 and
#                    0.5, compared store against store (compare_stores.py)
#   nonlinear  (150) benchmarks/gpu_check_nonlinear.sh if present (the persistent engine's own check; another
#                    path: GPU_CHECK_NONLINEAR), with OUT set; it runs without a GPU too (it decides)
# Without a CUDA GPU (or with --dry-run) the CUDA parts are skipped with the reason. The summary comes
# LAST in the output and in $OUT/summary.txt; every log is in $OUT/gpu_check_logs.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
py=${PYTHON:-python3}
all="tests bench packs sweep nonlinear"
dry=0
wanted=()
for arg in "$@"; do
  case $arg in
    --dry-run) dry=1 ;;
    tests | bench | packs | sweep | nonlinear) wanted+=("$arg") ;;
    *) echo "gpu_check.sh: unknown part '$arg'; choose from: $all (and --dry-run)" >&2; exit 2 ;;
  esac
done
parts=" ${wanted[*]:-$all} "
out=${OUT:-/tmp/gpu_check_out}
logs=$(mktemp -d /tmp/gpu_check_logs.XXXX)
work=$(mktemp -d /tmp/gpu_check_work.XXXX)
mkdir -p "$out"
budget=${GPU_CHECK_BUDGET:-480}
start=$(date +%s)
deadline=$((start + budget))
summary=()

note() { summary+=("$(printf '%-13s| %s' "$1" "$2")"); echo "-- $1: $2"; }

# part_budget NAME DEFAULT: the part's seconds (env GPU_CHECK_<NAME>_S), cut to what is left (less 10 s
# for the summary); 0 when under 3 s are left.
part_budget() {
  local var="GPU_CHECK_${1^^}_S" left=$((deadline - $(date +%s) - 10))
  local want=${!var:-$2}
  ((left < want)) && want=$left
  ((want < 3)) && want=0
  echo "$want"
}

# step NAME SECONDS CMD...: CMD with a hard limit, output in $logs/NAME.log; its status (124: cut).
step() {
  local name=$1 limit=$2
  shift 2
  if ((dry)); then
    echo "would run (${limit} s): $*" >"$logs/$name.log"
    return 0
  fi
  timeout --kill-after=5 "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  ((rc == 124 || rc == 137)) && { echo "cut after ${limit}s (its budget)" >>"$logs/$name.log"; rc=124; }
  return $rc
}

# verdict NAME RC DETAIL: a step's line of the summary (a dry run: the command it would run).
verdict() {
  if ((dry)); then
    echo "dry run, $(head -1 "$logs/$1.log" | cut -c1-260)"
    return
  fi
  case $2 in
    0) echo "ok $3" ;;
    124) echo "CUT after its budget; $3" ;;
    *) echo "FAILED (exit $2) $3" ;;
  esac
}

finish() {
  tar -C "$logs" -czf "$out/gpu_check_logs.tar.gz" . 2>/dev/null
  rm -rf "$work"
  {
    echo "== GPU check summary ($(($(date +%s) - start)) s of a ${budget} s budget$( ((dry)) && echo ', dry run'); logs in gpu_check_logs.tar.gz)"
    printf '%s\n' "${summary[@]}"
  } | tee "$out/summary.txt"
}
trap finish EXIT

# -- the machine, what the image lacks, the data -----------------------------------------
gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
note gpu "${gpu:-none (no nvidia-smi answer)}"
bundle=${FADE_GPU_BUNDLE:-.gpu_bundle}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if [[ -f $bundle/site.tar.xz ]]; then
  if ((dry)); then
    note bundle "$bundle/site.tar.xz present ($(($(stat -c %s "$bundle/site.tar.xz") / 1048576)) MiB); not unpacked (dry run)"
  elif mkdir -p "$work/site" && tar -xJf "$bundle/site.tar.xz" -C "$work/site" 2>"$logs/bundle.log"; then
    export PYTHONPATH=$work/site:$PYTHONPATH
    note bundle "unpacked $(du -sm "$work/site" | cut -f1) MB from $bundle/site.tar.xz"
  else
    note bundle "FAILED to unpack $bundle/site.tar.xz: $(tail -1 "$logs/bundle.log")"
  fi
else
  note bundle "none at $bundle (bash benchmarks/gpu_bundle.sh builds it): Ray, polars, plotly only if the image has them"
fi
if [[ -z ${FADE_EMNIST_DIR:-} ]]; then  # a generated EMNIST-format split: the real data does not travel
  export FADE_EMNIST_DIR=$work/emnist
  ((dry)) || $py -c "
import sys; from pathlib import Path; from tests.emnist_fixture import write_idx_dataset
write_idx_dataset(Path(sys.argv[1]), images=4000, split='bymerge', train=False)" "$FADE_EMNIST_DIR" >"$logs/emnist.log" 2>&1
fi
((dry)) && echo "not probed (dry run)" >"$logs/versions.log" || $py -c "
import sys
mods = []
for name in ('torch', 'triton', 'ray', 'polars', 'plotly', 'pydantic', 'jax'):
    try:
        mods.append(f'{name} {__import__(name).__version__}')
    except Exception as err:
        mods.append(f'{name} missing ({type(err).__name__})')
import torch
gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else 'NO CUDA'
print(f'python {sys.version.split()[0]}, {\", \".join(mods)}; {gpu}')
" >"$logs/versions.log" 2>&1
note versions "$(tail -1 "$logs/versions.log")"
cuda_reason=""
if ((dry)); then
  cuda_reason="dry run"
elif ! $py -c "import sys, torch; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
  cuda_reason="no CUDA GPU here (torch.cuda.is_available() is False)"
fi

# run_part NAME DEFAULT_S: whether the part runs; a note if it is skipped. Sets $limit.
run_part() {
  [[ $parts == *" $1 "* ]] || return 1
  limit=$(part_budget "$1" "$2")
  if [[ -n $cuda_reason && $1 != nonlinear ]] && ((!dry)); then
    note "$1" "skipped: $cuda_reason"
    return 1
  fi
  if ((limit == 0)); then
    note "$1" "skipped: the ${budget} s budget is spent"
    return 1
  fi
  return 0
}

# -- tests: compiled kernels against the torch ops; the Triton engine's packs against the CPU kernel
if run_part tests 70; then
  step tests "$limit" $py -m pytest -q -p no:cacheprovider tests/test_triton_step.py tests/test_triton.py \
    tests/test_cuda.py -k "triton or graphs or fused or pack_size"
  rc=$?
  note tests "$(verdict tests $rc "$(grep -E '[0-9]+ (passed|failed|error)' "$logs/tests.log" | tail -1)")"
  while read -r line; do note "  failed" "$line"; done < <(grep -E '^(FAILED|ERROR)' "$logs/tests.log" | head -6)
fi

# -- bench: full EMNIST packs through the engine a sweep uses, the fused step against the per-parameter kernels
if run_part bench 60; then
  each=$((limit / 4))
  for spec in ${BENCH_CASES:-fade_sgd:triton_step fade_sgd:triton adam:triton_step adam:triton}; do
    IFS=: read -r optimizer engine <<<"$spec"
    step "bench-$optimizer-$engine" "$each" $py benchmarks/bench_neural.py --engine "$engine" \
      --device cuda --task emnist --optimizer "$optimizer" --runs 2000 --steps "${BENCH_STEPS:-200}" --no-naive
    rc=$?
    note "bench" "$optimizer $engine: $(verdict "bench-$optimizer-$engine" $rc "$(tail -1 "$logs/bench-$optimizer-$engine.log" | cut -c1-120)")"
  done
fi

# -- packs: one large pack vs small L2-resident packs on streams, beside the JAX peer --------------
if run_part packs 60; then
  step packs "$limit" $py benchmarks/bench_gpu_packs.py --learners fade_sgd,adam --steps 100 \
    --layouts "${PACK_LAYOUTS:-2000x1,100x1,40x1,20x2,10x4}"
  rc=$?
  note packs "$(verdict packs $rc "(rates below)")"
  table=$(sed -n '/^learner /,$p' "$logs/packs.log")  # the whole table, else the layouts done before a cut
  while read -r line; do [[ -n $line ]] && note "  packs" "$line"; done <<<"${table:-$(grep -E '^  |^peer' "$logs/packs.log")}"
fi

# -- sweep: through Ray Tune on CPUs only, then the neural packs on the GPU (whole and half) -------
if run_part sweep 120; then
  if ((!dry)) && ! $py -c "import ray, polars, pydantic" >"$logs/sweep-imports.log" 2>&1; then
    note sweep "skipped: $(tail -1 "$logs/sweep-imports.log")"
  else
    each=$(((limit - 10) / 3))
    for gpus in cpu 1 0.5; do
      extra=()
      [[ $gpus != cpu ]] && extra=(--gpus-per-pack "$gpus")
      step "sweep-$gpus" "$each" $py -m sweeps.cli run benchmarks/gpu_sweep.yaml --storage "$work/store-$gpus" \
        --no-report --table-format csv "${extra[@]}"
      rc=$?
      note "sweep $gpus" "$(verdict "sweep-$gpus" $rc "$(grep -E '^Done' "$logs/sweep-$gpus.log" | tail -1 | cut -c1-90)")"
    done
    step sweep-compare 10 $py benchmarks/compare_stores.py "$work/store-cpu/gpu-check" "$work/store-1/gpu-check" \
      "$work/store-0.5/gpu-check"
    rc=$?
    note "sweep check" "$(verdict sweep-compare $rc "$(tail -1 "$logs/sweep-compare.log")")"
  fi
fi

# -- nonlinear: the nonlinear engine's own check (another owner's script), when this checkout has it
if run_part nonlinear 150; then
  nonlinear=${GPU_CHECK_NONLINEAR:-benchmarks/gpu_check_nonlinear.sh}
  if [[ ! -f $nonlinear ]]; then
    note nonlinear "not present ($nonlinear)"
  else
    # its own summary goes beside the logs (not over this one's summary.txt); its lines join this summary
    step nonlinear "$limit" env OUT="$out" NONLINEAR_SUMMARY="$logs/nonlinear_summary.txt" bash "$nonlinear"
    rc=$?
    note nonlinear "$(verdict nonlinear $rc "$(grep -v '^\s*$' "$logs/nonlinear.log" | tail -1 | cut -c1-120)")"
    if [[ -f $logs/nonlinear_summary.txt ]]; then
      while read -r line; do note "  nonlinear" "$line"; done < <(grep -v '^\s*$' "$logs/nonlinear_summary.txt" | tail -n +2)
    fi
  fi
fi
