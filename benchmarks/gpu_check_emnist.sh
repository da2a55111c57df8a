# shellcheck shell=bash disable=SC2154,SC2034
# (sourced: dry, py, logs, work are gpu_check.sh's; emnist_same is read by its finish)
# The GPU check's EMNIST part (issue 40), sourced by benchmarks/gpu_check.sh under its part's budget (160 s):
# it uses that script's `step`, `verdict`, `note`, `gpu_step`, `need_ray`, `$py`, `$logs`, `$work`, `$dry`.
#
#   emnist.compile  10 s  every learner's EMNIST kernel compiled by NVRTC for the GPU in hand, in parallel, into
#                         the disk cache the later steps read (a cold compile takes seconds per learner)
#   emnist.tests    25 s  the EMNIST kernel against the torch engine at 784-300-150-47, all 9 learners, and a
#                         run's independence of its pack and segments (tests/test_emnist_kernel.py)
#   emnist.bench    38 s  bench_gpu_packs.py --engine cuda, one pack of 2,000 and one of 100 runs (a warm wave, a timed one), fade_sgd, adam,
#                         fade_adam, each beside the JAX peer at the same runs (a row per layout as it ends)
#   emnist.sweep    84 s  gpu_sweep_emnist.yaml (emnist-demo's learners and grid, 2,000 steps) through Ray Tune on
#                         CPUs (engine torch) and on the GPU (--gpus-per-pack 1 --engine cuda), compared store
#                         against store (compare_stores.py --accuracy: the same (config, seed) pairs, accuracies
#                         within 0.01: float32 engines flip near-tie predictions; two CPU engines differ by 0.003)
#
# The EMNIST data: the bundle's cut of the bymerge test split ($FADE_GPU_BUNDLE/emnist, gpu_bundle.sh), else
# $FADE_EMNIST_DIR. Figures (gpu_figures.py emnist, printed by gpu_check.sh's end): emnist_fade_sgd_best (2,000
# runs), emnist_fade_sgd_100, emnist_fade_sgd_jax_ratio_min (min over 100 and 2,000 runs of engine / peer),
# emnist_adam_best, emnist_adam_jax_ratio_min, emnist_fade_adam_best, emnist_sweep_same (yes: the stores agree).
emnist_same=missing
emnist_data=${FADE_GPU_BUNDLE:-.gpu_bundle}/emnist
[[ -f $emnist_data/emnist-bymerge-test-images-idx3-ubyte.gz ]] || emnist_data=${FADE_EMNIST_DIR:-}
if [[ -z $emnist_data ]] && ((!dry)); then
  note emnist "no EMNIST data: build the bundle with its cut (bash benchmarks/gpu_bundle.sh) or set FADE_EMNIST_DIR"
fi

if gpu_step emnist.compile; then
  step emnist.compile 10 $py -c "
import concurrent.futures, torch
from fade_core.neural import NEURAL_LEARNERS, cuda_compile
from fade_core.neural.emnist_source import EmnistShape, kernel_source
from tasks.emnist import STUDENT
major, minor = torch.cuda.get_device_capability()
sources = [kernel_source(EmnistShape(l, STUDENT.sizes, STUDENT.negative_slope)) for l in NEURAL_LEARNERS.values()]
with concurrent.futures.ProcessPoolExecutor(len(sources)) as pool:
    done = list(pool.map(cuda_compile.cubin, sources, [10 * major + minor] * len(sources)))
print(f'{len(done)} kernels for sm_{major}{minor} in the cache')"
  rc=$?
  note emnist.compile "$(verdict emnist.compile $rc "$(tail -1 "$logs/emnist.compile.log" | cut -c1-120)")"
fi

if gpu_step emnist.tests; then
  step emnist.tests 25 $py -m pytest -q -p no:cacheprovider tests/test_emnist_kernel.py -k "on_the_gpu"
  rc=$?
  note emnist.tests "$(verdict emnist.tests $rc "$(grep -E '[0-9]+ (passed|failed|error)' "$logs/emnist.tests.log" | tail -1)")"
  while read -r line; do note "  failed" "$line"; done < <(grep -E '^(FAILED|ERROR)' "$logs/emnist.tests.log" | head -6)
fi

if gpu_step emnist.bench; then
  step emnist.bench 38 $py benchmarks/bench_gpu_packs.py --engine cuda --learners fade_sgd,adam,fade_adam \
    --layouts 2000x1,100x1 --waves 1 --steps "${EMNIST_BENCH_STEPS:-50}" --peer-steps "${EMNIST_BENCH_STEPS:-50}" \
    ${emnist_data:+--data-dir "$emnist_data"} --results "$logs/emnist_rates.jsonl"
  rc=$?
  note emnist.bench "$(verdict emnist.bench $rc "rows below: run-steps/s, engine/JAX")"
  while read -r line; do [[ -n $line ]] && note "  bench" "$line"; done < <(grep -E '^(learner|[a-z_]+ +[0-9]+x[0-9]+ )' "$logs/emnist.bench.log")
fi

if gpu_step emnist.sweep && [[ -n $emnist_data || $dry == 1 ]] && need_ray; then
  sweep=benchmarks/gpu_sweep_emnist.yaml
  step emnist.sweep-cpu 40 env FADE_EMNIST_DIR="$emnist_data" $py -m sweeps.cli run "$sweep" --storage "$work/store-cpu" \
    --engine torch --no-report --table-format csv
  rc=$?
  note emnist.sweep "$(verdict emnist.sweep-cpu $rc "CPUs, engine torch: $(grep -E '^Done' "$logs/emnist.sweep-cpu.log" | tail -1 | cut -c1-80)")"
  step emnist.sweep-gpu 40 env FADE_EMNIST_DIR="$emnist_data" $py -m sweeps.cli run "$sweep" --storage "$work/store-gpu" \
    --gpus-per-pack 1 --engine cuda --no-report --table-format csv
  rc=$?
  note emnist.sweep "$(verdict emnist.sweep-gpu $rc "GPU, engine cuda: $(grep -E '^Done' "$logs/emnist.sweep-gpu.log" | tail -1 | cut -c1-80)")"
  step emnist.compare 4 $py benchmarks/compare_stores.py --accuracy "$work/store-cpu/emnist-check" "$work/store-gpu/emnist-check"
  rc=$?
  verdict_line=$(tail -1 "$logs/emnist.compare.log")  # (yes/no only from compare_stores' own verdict)
  ((!dry && rc == 0)) && [[ $verdict_line == "same numbers"* ]] && emnist_same=yes
  ((!dry && rc == 1)) && [[ $verdict_line == *DIFFERENT* || $verdict_line == *"different (config"* ]] && emnist_same=no
  note emnist.sweep "$(verdict emnist.compare $rc "$verdict_line")"
fi
