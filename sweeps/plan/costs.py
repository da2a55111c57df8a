"""What a pack costs, in seconds on one slot: the model the planner sizes packs by.

A pack of R runs (on N seeds) of an experiment of S steps costs

    pack_start + S * lanes(R) / rate(experiment, R, device) + S * N * per_seed_step + bins * per_bin
    + chunks * per_chunk + checkpoints * (per_checkpoint + R * per_checkpoint_run)

where chunks = ceil(S / chunk_steps), checkpoints = chunks // checkpoint_every and bins = S / bin. A linear
pack on a CPU runs in SIMD blocks of 8 runs (16 for the float32 learners that adapt a step size or a decay:
fade_core.linear.kernel.lanes_for), a block's tail padded, so lanes(R) is R rounded up to its block: a race's
later rounds (a few survivors on a few seeds) pay a whole block per pack. Each pack copies its seeds' streams
chunk by chunk (`per_seed_step`) and reduces each bin of every run (`per_bin`): in the runner's loop, beside the
kernel, what made linear-demo's packs cost 3-4x their kernels' modelled time.

`rate` is run-steps per second of one slot. On a CPU it is the learner's own rate
(`CPU_RATES`: learners differ by 5x and more; a pack of fade_adam costs about 2.2 of
fade_sgd) times the slot's threads; it does not depend on R (the kernels are linear in the
runs). On a GPU it is not linear in R: a step costs a launch latency whatever R is, then
R runs of work, so rate(R) = peak * R / (R + half_runs) (`GpuRate`): small packs waste the
device, which is why GPU packs stay large. `--dry-run` replaces the table's rates with the
ones it calibrates (`CostModel.calibrated`); an engines table can be plugged in by passing
any `RateFn`.

The overheads were measured on the 2-core CI machine, quiet (load average < 1), minima of
repeats (`python benchmarks/bench_overheads.py`): see the constants.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from sweeps.spec.sweepfile import Experiment
from tasks import get_task

DEFAULT_CHUNK_STEPS = 10_000  # steps a pack advances between two reports to Tune
DEFAULT_CHECKPOINT_EVERY = 10  # chunks between two checkpoints of a pack
RateFn = Callable[[Experiment, int, str], float]  # (experiment, runs in the pack, "cpu" | "cuda") -> run-steps/s

# Run-steps/s of one pack on one CPU thread, per (task, optimizer), float32, the best of the
# calibrations of `fade-sweep run benchmarks/sweeps/linear-many-small-packs.yaml --dry-run` (3 noise
# levels) on the 2-core CI machine, quiet (load average 1.0), 2026-11-27;
# `python benchmarks/bench_learner_costs.py` measures them again (take the best of its repeats).
CPU_RATES: dict[tuple[str, str], float] = {
    ("linear_tracking", "sgd"): 113e6,
    ("linear_tracking", "sgd_wd"): 261e6,
    ("linear_tracking", "idbd"): 74e6,
    ("linear_tracking", "idbd_wd"): 71e6,
    ("linear_tracking", "fade"): 67e6,
    ("linear_tracking", "fade_idbd"): 50e6,
    ("linear_tracking", "coupled"): 48e6,
    # best of 5 of `python benchmarks/bench_learner_costs.py nonlinear --repeats 5`, timed by CPU seconds (load average 21,
    # 2026-11-27; repeats within 5-10%): wall-clock rates under load (the table's earlier 92e3 ... 30e3) mixed the
    # other jobs' share into the learners' ratios (fade_adam/fade_sgd 2.7 there, 2.2 here). Packs of the preset, 80 runs
    # x 40,000 steps and 8 runs x 100,000 steps, gave 1.96e5 (fade_sgd) and 8.2e4-8.7e4 (fade_adam) per CPU second,
    # alone or beside a second pack: the two cores do not slow each other (benchmarks/bench_clock.py, docs/running.md)
    ("nonlinear_tracking", "sgd"): 311e3,
    ("nonlinear_tracking", "sgd_wd"): 257e3,
    ("nonlinear_tracking", "adam"): 111e3,
    ("nonlinear_tracking", "adamw"): 112e3,
    ("nonlinear_tracking", "fade_sgd"): 174e3,
    ("nonlinear_tracking", "fade_adam"): 80e3,
    # one run pinned to a core, quiet (benchmarks/ROOFLINE.md, "project" column): 4.2x apart
    ("emnist_label_permuted", "fade_sgd"): 20.2e3,
    ("emnist_label_permuted", "adam"): 4.8e3,
    ("emnist_partial_permuted", "fade_sgd"): 20.2e3,
    ("emnist_partial_permuted", "adam"): 4.8e3,
}
TASK_CPU_RATES = {"emnist_label_permuted": 10e3, "emnist_partial_permuted": 10e3}  # between its fade_sgd and adam
FAMILY_CPU_RATES = {"linear": 60e6, "neural": 60e3}  # a learner in neither table


@dataclass(frozen=True)
class GpuRate:
    """A GPU slot's rate for a pack of R runs: peak * R / (R + half_runs).

    Not measured here (no GPU on the CI machine): `peak` and `half_runs` are placeholders of
    the right shape until an engines table (or `--dry-run` on the GPU) gives figures."""

    peak: float = 2e6  # run-steps/s of a full device
    half_runs: int = 256  # the pack size at which the device gives half its peak

    def __call__(self, runs: int) -> float:
        return self.peak * runs / (runs + self.half_runs)


def table_rate(experiment: Experiment, runs: int, device: str) -> float:
    """The default `RateFn`: `CPU_RATES` on a CPU thread, `GpuRate()` on a GPU."""
    if device == "cuda":
        return GpuRate()(runs)
    key = (experiment.task, experiment.optimizer)
    return CPU_RATES.get(key) or TASK_CPU_RATES.get(experiment.task) or FAMILY_CPU_RATES[get_task(experiment.task).family]


@dataclass(frozen=True)
class Overheads:
    """Seconds a pack spends outside its kernel (quiet 2-core machine, minima of repeats).

    `per_seed_step` and `per_bin` are CPU seconds of the runner's loop (timed by process time, which a shared
    machine's load moves far less than wall time; `benchmarks/bench_seconds.py` shows a real run's parts):
    linear-demo's packs, 200,000 steps in 200 bins, cost 0.11-0.44 CPU s where their kernels alone
    are 0.02-0.18 s; the same packs in 20 bins cost 0.08-0.33 s (2026-11-27)."""

    # a Tune trial on a reused actor, the runner's build, the kernel from cache, the write (quiet: 21 small packs
    # on 2 slots took 4.6 s, 2 s of it the workers' start)
    pack_start: float = 0.25
    per_chunk: float = 0.004  # a chunk's report to Tune
    per_bin: float = 4e-4  # a bin's end: every run's summaries (0.17 ms for sgd's 15 runs, 0.6 ms for fade's 60)
    per_seed_step: float = 7e-8  # a seed's stream copied into the pack's chunks (sgd 5e-8, fade 9e-8 per seed-step)
    per_checkpoint: float = 0.05  # a checkpoint's folder, pack.json and Tune's bookkeeping
    per_checkpoint_run: float = 2e-5  # ... and its tensors, per run


LANES = 8  # runs per SIMD block of a linear kernel (fade_core.linear.kernel.LANES; 16 for the adaptive float32 rules)


def lanes(experiment: Experiment, runs: int, device: str = "cpu", dtype: str = "float32") -> int:
    """The runs a pack's kernel does work for: a linear pack's on a CPU rounded up to its SIMD block (8, or 16 for
    a float32 rule with an adapted step size or decay, as `lanes_for` decides: from its hyperparameters, beta0 or
    gamma0), others as they are."""
    if device != "cpu" or get_task(experiment.task).family != "linear":
        return runs
    names = {name for cell in experiment.cells[:1] for name, _ in cell.hyperparameters}
    block = 2 * LANES if dtype == "float32" and names & {"beta0", "gamma0"} else LANES
    return -(-runs // block) * block


@dataclass(frozen=True)
class CostModel:
    """Seconds of a pack on one slot (see the module docstring)."""

    rate: RateFn = table_rate
    overheads: Overheads = Overheads()
    chunk_steps: int = DEFAULT_CHUNK_STEPS
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY
    threads: float = 1.0  # CPU threads of a CPU slot (a pack's CPUs)
    measured: Mapping[Experiment, float] = field(default_factory=dict)  # calibrated rates of a slot
    dtype: str = "float32"  # the runs' (a linear kernel's SIMD block depends on it)

    def run_steps_per_second(self, experiment: Experiment, runs: int, device: str = "cpu") -> float:
        """One slot's rate for a pack of `runs` runs of `experiment` on `device`."""
        return self.measured.get(experiment) or self.rate(experiment, runs, device) * (self.threads if device == "cpu" else 1)

    def pack_seconds(self, experiment: Experiment, runs: int, device: str = "cpu", seeds: int = 1) -> float:
        """The wall seconds of one pack of `runs` runs of `experiment` on `seeds` seeds, on one slot of `device`."""
        return self.kernel_seconds(experiment, runs, device) + self.fixed_seconds(experiment, runs, seeds)

    def kernel_seconds(self, experiment: Experiment, runs: int, device: str = "cpu") -> float:
        """The seconds a pack's kernel spends on `runs` runs of `experiment`: what grows with its runs."""
        work = lanes(experiment, runs, device, self.dtype)
        return experiment.settings.steps * work / self.run_steps_per_second(experiment, runs, device)

    def fixed_seconds(self, experiment: Experiment, runs: int, seeds: int = 1) -> float:
        """The seconds of a pack beyond its kernel: its start, its seeds' streams, its bins, chunk reports and
        checkpoints (nearly the same for 2 runs as for 200)."""
        steps, o = experiment.settings.steps, self.overheads
        loop = steps * seeds * o.per_seed_step + steps // max(1, experiment.settings.bin) * o.per_bin
        return o.pack_start + loop + self.report_seconds(experiment, runs)

    def at_once(self, experiment: Experiment, alive: int, seeds_left: int, rounds_left: int) -> bool:
        """Whether a raced method's `alive` configurations should get their `seeds_left` remaining seeds at once
        rather than over its `rounds_left` rounds (sweeps.tune.racing): when their kernel seconds are no more
        than the fixed seconds those rounds' packs would cost (one seed each, one after another). Then the most
        a round-by-round race could spare (every one of those runs) is worth no more than the rounds cost."""
        per_round = self.fixed_seconds(experiment, alive)
        return self.kernel_seconds(experiment, alive * seeds_left) <= rounds_left * per_round

    def report_seconds(self, experiment: Experiment, runs: int) -> float:
        """The seconds of one pack's per-chunk reports and checkpoints: what a long stream in short chunks
        (`--chunk-steps`) pays beyond its kernel."""
        chunks = math.ceil(experiment.settings.steps / self.chunk_steps)
        checkpoints = chunks // self.checkpoint_every if self.checkpoint_every else 0
        o = self.overheads
        return chunks * o.per_chunk + checkpoints * (o.per_checkpoint + runs * o.per_checkpoint_run)

    def calibrated(self, rates: Mapping[Experiment, float]) -> CostModel:
        """This model with the rates of a slot measured for these experiments (the dry run's calibration)."""
        return replace(self, measured={**self.measured, **rates})
