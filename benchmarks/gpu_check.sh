#!/usr/bin/env bash
# The round's GPU check: ONE device call whose whole run, cold compiles included, stays inside
# GPU_CHECK_BUDGET seconds (default 500: with a start, about 9 of the 15 minutes of device time; the rest reruns the parts that
# failed). Parts, in order of value, each under its own budget (env GPU_CHECK_<PART>_S), cut
# to what is left of the whole; each step under its own limit, cut to what is left of its part:
#
#   nonlinear (220 s, issue 39)
#     nonlinear.tests  65 s  the cuda engine against the torch engine, all 9 learners; pack, position and
#                            segment invariance; divergence kept to its run (tests/test_cuda_engine.py)
#     nonlinear.bench  70 s  the cuda engine beside the JAX peer at 240/4,000/1,000 runs: fade_sgd, adam,
#                            fade_adam, sgd (peer_jax.py --engine cuda; a row per pack size as it ends)
#     nonlinear.sweep  85 s  gpu_sweep_nonlinear.yaml through Ray Tune on CPUs (engine torch) and on the GPU
#                            (--gpus-per-pack 1 --engine cuda), compared store against store (the kernels
#                            the tests compiled come from the disk cache)
#   emnist    (160 s, issue 40)  benchmarks/gpu_check_emnist.sh, sourced when present: its steps use
#                            `step`, `note`, `need_ray` below under this part's budget
#   triton    (120 s, issue 38)
#     triton.tests    120 s  the Triton engines (triton, triton_step, persistent) and the CUDA path of the packs
#                            compiled on the chip against the torch ops and the plain per-run loop, 8 processes
#                            (the tests that run in Triton's interpreter on a CPU), each test's verdict logged as it ends
#
# A summary line is written (to stdout and $OUT/summary.txt) as each step ends, so a part cut by its
# budget leaves its finished rows. Every step runs under ONE `timeout` (no script nested in another),
# which signals its whole process group when the step's limit is up; the limit is never more than what
# is left of the step's part and of the whole. The run ends by printing the summary, then the figures as
# NAME<TAB>VALUE lines (benchmarks/gpu_figures.py; also $OUT/figures.tsv). Logs: $OUT/gpu_check_logs.tar.gz.
#
#   bash benchmarks/gpu_bundle.sh                 # here, once: .gpu_bundle/ (Ray, polars, pydantic, plotly)
#   device: run(command="bash benchmarks/gpu_check.sh", carry=[".gpu_bundle"], timeout_s=540)
#   bash benchmarks/gpu_check.sh nonlinear.tests nonlinear.bench   # some steps or parts (no bundle needed)
#   bash benchmarks/gpu_check.sh --dry-run        # the plan: every step's command and limit, nothing run
#
# The bundle is unpacked only when a step that needs Ray runs (`need_ray`). Without a CUDA GPU the GPU
# steps are skipped with the reason.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
py=${PYTHON:-python3}
parts_all="nonlinear emnist triton"
steps_all="nonlinear.tests nonlinear.bench nonlinear.sweep emnist.compile emnist.tests emnist.bench emnist.sweep triton.tests"
dry=0
wanted=()
for arg in "$@"; do
  case $arg in
    --dry-run) dry=1 ;;
    nonlinear | emnist | nonlinear.tests | nonlinear.bench | nonlinear.sweep) wanted+=("$arg") ;;
    emnist.compile | emnist.tests | emnist.bench | emnist.sweep | triton | triton.tests) wanted+=("$arg") ;;
    *) echo "gpu_check.sh: unknown part or step '$arg'; choose from: $parts_all $steps_all (and --dry-run)" >&2; exit 2 ;;
  esac
done
selection=" ${wanted[*]:-$parts_all} "
out=${OUT:-/tmp/gpu_check_out}
logs=$(mktemp -d /tmp/gpu_check_logs.XXXX)
work=$(mktemp -d /tmp/gpu_check_work.XXXX)
mkdir -p "$out"
: >"$out/summary.txt"
budget=${GPU_CHECK_BUDGET:-500}
start=$(date +%s)
deadline=$((start + budget - 5))  # (5 s for the summary, the figures and the logs' archive)
part_deadline=$deadline
sweep_same=missing

# note NAME TEXT: a summary line, now (stdout and summary.txt) and again at the end.
note() {
  local line
  line=$(printf '%-16s| %s' "$1" "$2")
  echo "$line" >>"$out/summary.txt"
  echo "-- $line"
}

# wants STEP: whether STEP (part.step) or its part was asked for.
wants() { [[ $selection == *" $1 "* || $selection == *" ${1%%.*} "* ]]; }

# part NAME DEFAULT_S: starts a part: its deadline is its budget (env GPU_CHECK_<NAME>_S) from now, cut to the whole's.
part() {
  local var="GPU_CHECK_${1^^}_S"
  part_deadline=$(($(date +%s) + ${!var:-$2}))
  ((part_deadline > deadline)) && part_deadline=$deadline
  return 0
}

# step NAME LIMIT CMD...: CMD under one timeout of LIMIT seconds, cut to what is left of the part and the whole;
# output in $logs/NAME.log. Its status: 124 cut at its limit, 125 not run (no time left). Dry run: prints the plan.
step() {
  local name=$1 limit=$2 asked=$2 now left
  shift 2
  now=$(date +%s)
  left=$((part_deadline - now))
  ((deadline - now < left)) && left=$((deadline - now))
  ((left < limit)) && limit=$left
  if ((dry)); then
    echo "would run (${limit} s): $*" >"$logs/$name.log"
    return 0
  fi
  if ((limit < 5 && limit < asked)); then  # (a step asking for under 5 s runs when all of it is left)
    echo "not run: no time left of its part's budget" >"$logs/$name.log"
    return 125
  fi
  timeout --kill-after=3 "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  ((rc == 137)) && rc=124
  ((rc == 124)) && echo "cut after ${limit} s (its limit)" >>"$logs/$name.log"
  return $rc
}

# verdict NAME RC DETAIL: a step's summary text.
verdict() {
  if ((dry)); then
    head -1 "$logs/$1.log" | cut -c1-300
    return
  fi
  case $2 in
    0) echo "ok, $3" ;;
    124) echo "CUT at its limit; $3" ;;
    125) echo "not run: no time left of its part" ;;
    *) echo "FAILED (exit $2) $3" ;;
  esac
}

# need_ray: Ray, polars and pydantic importable, from the image or unpacked once from the bundle; else 1 (noted).
need_ray() {
  ((dry)) && return 0
  if [[ -z ${ray_ready:-} ]]; then
    local bundle=${FADE_GPU_BUNDLE:-.gpu_bundle}
    if ! $py -c "import ray, polars, pydantic" 2>/dev/null && [[ -f $bundle/site.tar.xz ]]; then
      mkdir -p "$work/site" && tar -xJf "$bundle/site.tar.xz" -C "$work/site" 2>"$logs/bundle.log" &&
        export PYTHONPATH=$work/site:$PYTHONPATH
    fi
    ray_ready=$($py -c "import ray, polars, pydantic; print('yes')" 2>&1 | tail -1)
    note bundle "$([[ $ray_ready == yes ]] && echo "Ray importable ($([[ -d $work/site ]] && echo "unpacked from $bundle" || echo "the image's"))" ||
      echo "Ray, polars or pydantic missing ($ray_ready); build the bundle: bash benchmarks/gpu_bundle.sh")"
  fi
  [[ $ray_ready == yes ]]
}

finish() {
  trap - EXIT
  local figures
  figures=$($py benchmarks/gpu_figures.py nonlinear --results "$logs/nonlinear_rates.jsonl" --sweep "$sweep_same" 2>&1)
  if [[ -n ${emnist_same:-} ]]; then  # (the EMNIST part ran: gpu_check_emnist.sh sets it)
    figures+=$'\n'$($py benchmarks/gpu_figures.py emnist --results "$logs/emnist_rates.jsonl" --sweep "${emnist_same:-missing}" 2>&1)
  fi
  tar -C "$logs" -czf "$out/gpu_check_logs.tar.gz" . 2>/dev/null
  rm -rf "$work" "$logs"
  echo "$figures" >"$out/figures.tsv"
  printf '== figures (NAME<TAB>VALUE)\n%s\n' "$figures" >>"$out/summary.txt"
  echo
  echo "== GPU check summary ($(($(date +%s) - start)) s of a ${budget} s budget$( ((dry)) && echo ', dry run'); logs in gpu_check_logs.tar.gz)"
  cat "$out/summary.txt"
}
trap finish EXIT

# -- the machine -------------------------------------------------------------------------------------
cuda_reason=""
if ((dry)); then
  cuda_reason="dry run"
else
  $py -c "
import sys, torch
names = []
for name in ('triton', 'jax', 'cuda.bindings', 'ray'):
    try:
        module = __import__(name, fromlist=['_'])
        names.append(f'{name} {getattr(module, \"__version__\", \"?\")}')
    except Exception as err:
        names.append(f'{name} missing ({type(err).__name__})')
gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else 'NO CUDA'
print(f'{gpu}; python {sys.version.split()[0]}, torch {torch.__version__}, ' + ', '.join(names))
sys.exit(0 if torch.cuda.is_available() else 3)" >"$logs/versions.log" 2>&1
  (($? == 3)) && cuda_reason="no CUDA GPU here (torch.cuda.is_available() is False)"
  note machine "$(tail -1 "$logs/versions.log" | cut -c1-200)"
fi

# Every part's GPU steps import the sweep layer (pydantic, and Ray for the sweeps): unpack the bundle first.
[[ -z $cuda_reason ]] && need_ray

# gpu_step STEP: whether a GPU step runs (asked for, a GPU here); a note says why not.
gpu_step() {
  wants "$1" || return 1
  if [[ -n $cuda_reason && $cuda_reason != "dry run" ]]; then
    note "$1" "skipped: $cuda_reason"
    return 1
  fi
  return 0
}

# -- nonlinear (issue 39) ----------------------------------------------------------------------------
if wants nonlinear.tests || wants nonlinear.bench || wants nonlinear.sweep; then
  part nonlinear 220
  if gpu_step nonlinear.tests; then
    step nonlinear.tests 65 $py -m pytest -q -p no:cacheprovider tests/test_cuda_engine.py -k "(torch_ops or position or diverging) and not emulated"
    rc=$?
    note nonlinear.tests "$(verdict nonlinear.tests $rc "$(grep -E '[0-9]+ (passed|failed|error)' "$logs/nonlinear.tests.log" | tail -1)")"
    while read -r line; do note "  failed" "$line"; done < <(grep -E '^(FAILED|ERROR)' "$logs/nonlinear.tests.log" | head -6)
  fi
  if gpu_step nonlinear.bench; then
    step nonlinear.bench 70 $py benchmarks/peer_jax.py --device cuda --engine cuda --runs 240,4000,1000 \
      --steps "${BENCH_STEPS:-1000}" --learners fade_sgd,adam,fade_adam,sgd --repeats 2 \
      --results "$logs/nonlinear_rates.jsonl" --summary "$logs/nonlinear_table.txt"
    rc=$?
    note nonlinear.bench "$(verdict nonlinear.bench $rc "rows below: run-steps/s, engine/JAX")"
    table=$( ( [[ -f $logs/nonlinear_table.txt ]] && cat "$logs/nonlinear_table.txt" ) || grep -E '^(learner|[a-z_]+ +[0-9]+ )' "$logs/nonlinear.bench.log")
    while read -r line; do [[ -n $line ]] && note "  bench" "$line"; done <<<"$table"
  fi
  if gpu_step nonlinear.sweep && need_ray; then
    sweep=benchmarks/gpu_sweep_nonlinear.yaml
    step nonlinear.sweep-cpu 40 $py -m sweeps.cli run "$sweep" --storage "$work/store-cpu" --engine torch --no-report --table-format csv
    rc=$?
    note nonlinear.sweep "$(verdict nonlinear.sweep-cpu $rc "CPUs, engine torch: $(grep -E '^Done' "$logs/nonlinear.sweep-cpu.log" | tail -1 | cut -c1-80)")"
    step nonlinear.sweep-gpu 40 $py -m sweeps.cli run "$sweep" --storage "$work/store-gpu" --gpus-per-pack 1 --engine cuda \
      --no-report --table-format csv
    rc=$?
    note nonlinear.sweep "$(verdict nonlinear.sweep-gpu $rc "GPU, engine cuda: $(grep -E '^Done' "$logs/nonlinear.sweep-gpu.log" | tail -1 | cut -c1-80)")"
    step nonlinear.compare 5 $py benchmarks/compare_stores.py "$work/store-cpu/nonlinear-check" "$work/store-gpu/nonlinear-check"
    rc=$?
    verdict_line=$(tail -1 "$logs/nonlinear.compare.log")  # (yes/no only from compare_stores' own verdict)
    ((!dry && rc == 0)) && [[ $verdict_line == "same numbers"* ]] && sweep_same=yes
    ((!dry && rc == 1)) && [[ $verdict_line == *DIFFERENT* || $verdict_line == *"different (config"* ]] && sweep_same=no
    note nonlinear.sweep "$(verdict nonlinear.compare $rc "$(tail -1 "$logs/nonlinear.compare.log")")"
  fi
fi

# -- emnist (issue 40): its steps, sourced into this script under its part's budget -----------------
if wants emnist.compile || wants emnist.tests || wants emnist.bench || wants emnist.sweep; then
  part emnist 160
  emnist=${GPU_CHECK_EMNIST:-benchmarks/gpu_check_emnist.sh}
  if [[ -f $emnist ]]; then
    # shellcheck source=/dev/null
    source "$emnist"
  else
    note emnist "not present ($emnist): issue 40's steps"
  fi
fi

# -- triton (issue 38): the engines whose element code is printed from the rules, compiled on the chip -------
if wants triton.tests; then
  part triton 120
  if gpu_step triton.tests && need_ray; then
    step triton.tests 120 $py -m pytest -v -p no:cacheprovider -n 8 tests/test_triton.py tests/test_triton_step.py \
      tests/test_persistent.py tests/test_triton_oracle.py tests/test_cuda.py
    rc=$?
    note triton.tests "$(verdict triton.tests $rc "$(grep -E '[0-9]+ (passed|failed|error)' "$logs/triton.tests.log" | tail -1)")"
    while read -r line; do note "  failed" "$line"; done < <(grep -oE '(FAILED|ERROR) tests/[^ ]+' "$logs/triton.tests.log" | sort -u | head -8)
  fi
fi
