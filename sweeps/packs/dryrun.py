"""`fade-sweep run --dry-run`: the plan (packs, run-steps, resources) and an estimated wall time from
the cost model (sweeps/plan/costs.py: the learners' measured rates), in well under a second: no torch,
no numba, nothing compiled. `--calibrate` times each experiment's engine in process first
(calibrate.py) and estimates with those rates instead.

The plan is the one the run makes (`plan_packs` with the cost table of sweeps/plan/costs.py).
The estimate is the command's own start (imports, the store, the closing table), Ray's start,
Tune's start (its trial actors import the trainable), then the makespan of the packs on the slots
(`plan.makespan`: handed out longest first to the first free slot, as Tune starts them), a pack
costing its run-steps at its rate plus the overheads of `costs.Overheads` (start-up, its streams
copied and its bins reduced, per-chunk reports, checkpoints), and on each slot a worker's start
(torch and numba imported, its first kernel loaded from numba's cache) and its draw of the sweep's
streams (each once: `STREAM_RATES`, or timed with `--calibrate`). Linear kernels not in numba's
cache yet (a fresh checkout, a changed kernel) are compiled by the first packs that meet them:
`cold_kernels` finds them from the cache's files (no numba), and the estimate adds their compile
time and names them. `benchmarks/bench_seconds.py` shows where a real run's seconds went, part by
part beside these. A race (`race_bounds`) is
estimated at its two ends: every method's best configuration alone after round 1 (the best
case), nothing eliminated (the worst), each round a method's packs on its share of the slots.
The constants were measured on the 2-core machine when quiet (load average below 1), the
minimum of repeats: `python benchmarks/bench_dryrun.py` prints estimate and real side by side.
On a loaded machine every part is slower: the command line then says so (sweeps.cli.text.load_note); so it
does when the embedded Ray is declared more CPUs than the machine has (`oversubscribed_note`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sweeps.plan import CostModel, Pack, plan_packs, plan_round
from sweeps.spec import Experiment, PackResources, Sweep
from sweeps.spec.engines import choose_engine
from sweeps.plan.packing import makespan, pack_seconds
from tasks import get_task

COMMAND_SECONDS = 4.0  # the command's imports, the store's checks, Tune's experiment, the closing table
RAY_START_SECONDS = 6.0  # starting the embedded Ray and its dashboard (quiet: 3.4 s in the Done line on 2026-11-27, 5.7-7.3 s on 11-28)
# Tune's experiment to its first trial: the trial actors start and import the trainable's module (ray.tune and the
# store: 1.5 CPU s, 2026-11-27), the slots' actors side by side
TUNE_START_SECONDS = 2.0
# a slot's first pack: the worker imports torch and numba (2.0 CPU s) and loads its first linear kernel from numba's
# cache (0.7 CPU s; each further learner's 0.1 s, in `Overheads.pack_start`), measured by process time, 2026-11-27
SLOT_START_SECONDS = 3.0
# a linear kernel not in numba's cache: compiled by the first pack that runs it (CPU s, 2026-11-27: a worker's
# first 4 s more, then 2.3 s per learner; the slots compile different learners side by side)
COMPILE_FIRST_SECONDS = 4.0
COMPILE_LEARNER_SECONDS = 2.3
# steps of one seed's stream drawn per second, one thread, the first time (not from a cache), by process
# time on the 2-core machine under load (2026-11-27, 6 seeds each): linear 1.7-2.1M (21 normal draws a step),
# nonlinear 54-65K (its target network's forward pass: as dear as a fade_adam run); EMNIST's permuted images: a guess.
# (The 33M and 42M this table held were re-reads from the cache.)
STREAM_RATES = {"linear_tracking": 2.0e6, "nonlinear_tracking": 6.5e4}
DEFAULT_STREAM_RATE = 1.0e6
STREAM_BYTES = {"linear_tracking": 168, "nonlinear_tracking": 208}  # a step of one seed's stream (x and y) in the cache
DEFAULT_STREAM_BYTES = 4 * 28 * 28


@dataclass(frozen=True)
class PlanRow:
    """One experiment of the plan: its packs and their rate."""

    task: str
    settings: str  # the task settings the experiment changes
    optimizer: str
    packs: int
    runs: int
    runs_per_pack: int  # the largest pack's
    run_steps: int
    rate: float  # run-steps per second of one pack (the cost table's, or calibrated)
    device: str  # "CPU" or "GPU": where it runs (with --calibrate: where it was measured)
    seconds: float  # its packs' modelled seconds, one after another: kernels and overheads (`CostModel.pack_seconds`)


@dataclass(frozen=True)
class PlanEstimate:
    """The plan and what its wall time is made of (the command line words it: sweeps.cli.plan)."""

    packs: int
    slots: int  # CPU packs at once
    gpu_slots: int  # GPU packs at once
    rows: list[PlanRow]
    wall_seconds: float
    command_seconds: float
    ray_seconds: float  # Ray's start (0: attaching to a cluster)
    slot_start_seconds: float  # a worker's start per slot
    stream_seconds: float  # the streams a slot draws
    pack_start_seconds: float  # start-up per pack
    gpu_on_cpu: bool  # GPU packs calibrated on this GPU-less machine
    packs_seconds: float  # the packs' makespan over the slots (wall = fixed_seconds + this)
    report_seconds: float  # of the packs' seconds (all packs, summed): their per-chunk reports and checkpoints
    calibrated: bool = False  # rates measured here (--calibrate), else the cost table's
    tune_start_seconds: float = 0.0  # Tune's experiment to its first trial (the trial actors' start)
    compile_seconds: float = 0.0  # the linear kernels not in numba's cache, compiled by the first packs
    cold: tuple[str, ...] = ()  # ... their learners
    streams_per_pack: bool = False  # the streams do not fit a worker's cache: each pack draws its own (in its seconds)

    @property
    def fixed_seconds(self) -> float:
        """The wall seconds beside the packs' makespan: the command, Ray's, Tune's and the workers' start, the
        kernels compiled, the streams drawn (what a race pays once, however many rounds)."""
        return (self.command_seconds + self.ray_seconds + self.tune_start_seconds + self.slot_start_seconds
                + self.compile_seconds + self.stream_seconds)


def estimate(sweep: Sweep, slots: int, resources: PackResources, runs_per_pack: int | None, dtype: str,
             gpu_slots: int = 0, embedded: bool = True, costs: CostModel | None = None,
             engine: str | None = None, done: Iterable[tuple[str, int]] = (), calibrate: bool = False) -> PlanEstimate:
    """The plan and its estimated wall time: CPU packs over `slots`, GPU packs over `gpu_slots`, at the cost
    table's rates, or with `calibrate` at rates measured here (a CPU calibration; GPU packs on this machine's
    GPU when it has one). `embedded`: the run starts its own Ray (no --address); `costs`: the run's cost
    model (its chunk and checkpoint settings), which plans the packs as the run will; `done`: the (config,
    seed) runs a resumed store holds, which the run skips."""
    gpu = resources.gpus > 0
    table = costs or CostModel(threads=max(1.0, resources.cpus))
    packs = plan_packs(sweep, slots, done, runs_per_pack, gpu=gpu, gpu_slots=max(1, gpu_slots), costs=table)
    by_experiment: dict[Experiment, list[Pack]] = defaultdict(list)
    for pack in packs:
        by_experiment[pack.experiment].append(pack)
    rows = []
    seconds: dict[str, list[float]] = {"cpu": [], "cuda": []}  # per pack, overheads included
    streams: dict[str, dict[tuple[str, str], float]] = {"cpu": {}, "cuda": {}}  # each stream drawn once
    cached = streams_fit(sweep)  # else every pack draws its seeds' streams again
    uncalibrated = False
    reports = 0.0
    for experiment, group in by_experiment.items():
        on_gpu = gpu and get_task(experiment.task).runs_on_gpu
        pool = "cuda" if on_gpu else "cpu"
        if calibrate:
            rate, kind, on_cpu = _calibrated(experiment, sweep.seeds, dtype, on_gpu, max(p.runs for p in group),
                                             engine, resources)
            uncalibrated |= on_cpu
        else:
            rate, kind = table.run_steps_per_second(experiment, max(p.runs for p in group), pool), pool
        measured = table.calibrated({experiment: rate})  # a GPU pack calibrated on the CPU: at the CPU's rate (noted)
        where = "cpu" if calibrate else pool
        drawn = (experiment.task, repr(experiment.settings))
        if drawn not in streams[pool]:
            streams[pool][drawn] = _stream_seconds(experiment, len(sweep.seeds), calibrate)
        per_seed = 0.0 if cached else streams[pool][drawn] / len(sweep.seeds)
        mine = [measured.pack_seconds(experiment, p.runs, where, len(p.seeds)) + per_seed * len(p.seeds) for p in group]
        seconds[pool] += mine
        reports += sum(measured.report_seconds(experiment, p.runs) for p in group)
        rows.append(PlanRow(experiment.task, experiment.changed_settings, experiment.optimizer, len(group),
                            sum(p.runs for p in group), max(p.runs for p in group), sum(p.run_steps for p in group), rate,
                            "GPU" if kind == "cuda" else "CPU", sum(mine)))
    ray = RAY_START_SECONDS if embedded else 0.0
    # the pool that ends last gives the wall time, and the parts the estimate lists are its own (they add up)
    # A node's slots divide its draws (tasks/stream_cache.py): an embedded Ray is one node; a cluster's nodes each
    # draw every stream, counted whole.
    spans = [(makespan(seconds[d], n), sum(streams[d].values()) / (n if embedded else 1))
             for d, n in (("cpu", slots), ("cuda", gpu_slots or 1)) if seconds[d]]
    packs_span, stream = max(spans, key=sum, default=(0.0, 0.0))
    stream = stream if cached else 0.0  # else in the packs' seconds
    cold = cold_kernels(by_experiment, dtype, engine) if seconds["cpu"] else ()
    compile_seconds = (COMPILE_FIRST_SECONDS + COMPILE_LEARNER_SECONDS * -(-len(cold) // max(1, slots))) if cold else 0.0
    plan = PlanEstimate(len(packs), slots, gpu_slots, rows, 0.0, COMMAND_SECONDS, ray,
                        SLOT_START_SECONDS if spans else 0.0, stream, table.overheads.pack_start, uncalibrated,
                        packs_span, reports, calibrate, TUNE_START_SECONDS if spans else 0.0, compile_seconds, cold,
                        not cached)
    return dataclasses.replace(plan, wall_seconds=plan.fixed_seconds + packs_span)


def cold_kernels(experiments: Iterable[Experiment], dtype: str, engine: str | None = None) -> tuple[str, ...]:
    """The linear learners among `experiments` whose compiled kernel numba's cache lacks for `dtype` (the "cpu"
    engine's: fade_core.linear.kernel names each cache file after its learner and dtype), or holds older than the
    kernel's source (numba compiles those again): their first packs compile them. From the cache's files alone,
    without numba; a learner's changed rule (a new digest in the name) is not seen."""
    import fade_core

    source = Path(os.path.abspath(fade_core.__file__)).parent / "linear" / "kernel.py"
    folder = os.environ.get("NUMBA_CACHE_DIR")  # numba's own layout there: <folder>/<dir name>_<sha1 of the dir>
    where = f"{source.parent.name}_{hashlib.sha1(str(source.parent).encode()).hexdigest()}"
    cache = Path(folder) / where if folder else source.parent / "__pycache__"
    built = source.stat().st_mtime if source.exists() else 0.0
    names = sorted({e.optimizer for e in experiments if get_task(e.task).family == "linear"
                    and choose_engine(e, "cpu", engine) == "cpu"})
    return tuple(n for n in names
                 if not any(f.stat().st_mtime >= built for f in cache.glob(f"kernel.run_blocks_{n}_{dtype}_*.nbi")))


def _calibrated(experiment: Experiment, seeds: tuple[int, ...], dtype: str, on_gpu: bool, runs: int,
                engine: str | None, resources: PackResources) -> tuple[float, str, bool]:
    """(rate of a slot measured here, where: "cpu" | "cuda", whether a GPU pack was measured on the CPU)."""
    import torch

    from sweeps.spec.engines import default_engine
    from sweeps.packs.calibrate import calibrate

    seeds = seeds[: min(len(seeds), 5)]
    if on_gpu and torch.cuda.is_available():
        return calibrate(experiment, seeds, getattr(torch, dtype), "cuda", runs, engine), "cuda", False
    cpu_engine = default_engine(experiment.task, "cpu") if on_gpu else engine  # a GPU pack on this GPU-less machine
    return calibrate(experiment, seeds, getattr(torch, dtype), engine=cpu_engine) * max(resources.cpus, 1), "cpu", on_gpu


def streams_fit(sweep: Sweep) -> bool:
    """Whether a worker's segment cache (FADE_STREAM_CACHE_MB) holds every stream of the sweep: then each is drawn
    once and later packs read it from the cache; else each pack draws its seeds' streams again (a 2M-step
    linear stream of one seed is 336 MB: 512 MiB holds one, the default on a 24 GiB, 2-CPU machine ten)."""
    from tasks.stream_cache import stream_cache_budget

    drawn = {(e.task, repr(e.settings)): e for e in sweep.experiments}
    size = sum(len(sweep.seeds) * e.settings.steps * STREAM_BYTES.get(e.task, DEFAULT_STREAM_BYTES) for e in drawn.values())
    return size <= stream_cache_budget()


def draw_seconds(packs: Iterable[Pack]) -> float:
    """Seconds of drawing every stream the packs read once (each task, settings and seed), at `STREAM_RATES`."""
    streams = {(p.experiment.task, repr(p.experiment.settings), seed): p.experiment for p in packs for seed in p.seeds}
    return sum(_stream_seconds(experiment, 1, False) for experiment in streams.values())


def _stream_seconds(experiment: Experiment, seeds: int, calibrate: bool) -> float:
    """Seconds of drawing the experiment's streams, each seed's once (the segment cache keeps them for the packs
    that follow): timed here with `calibrate`, else at `STREAM_RATES`."""
    if calibrate:
        from sweeps.packs.calibrate import stream_seconds

        return stream_seconds(experiment, seeds)
    return seeds * experiment.settings.steps / STREAM_RATES.get(experiment.task, DEFAULT_STREAM_RATE)


@dataclass(frozen=True)
class RaceBounds:
    """A race's estimated wall time at its two ends (the dry run of a race)."""

    best_seconds: float  # after round 1, each method's best configuration alone gets the later seeds (at once)
    worst_seconds: float  # nothing is eliminated: every configuration gets every seed, round by round
    best_run_steps: int
    worst_run_steps: int


def race_bounds(sweep: Sweep, slots: int, costs: CostModel, fixed_seconds: float) -> RaceBounds:
    """The wall time of `sweep`'s race (CPU slots; the cost table's rates) in its best and worst case:
    `fixed_seconds` (the command, Ray's and the workers' start) plus each method's rounds one after the
    other, the methods side by side on the slots (a method's round waits for its previous one only), each
    method's rounds on its share of the slots, planned as the race plans them (`plan_round`), each pack drawing its
    seeds' streams where the cache cannot hold them (`streams_fit`)."""
    race = sweep.race
    seeds, schedule = race.seeds(sweep.seeds), race.schedule(sweep.seeds)
    cached = streams_fit(sweep)
    rounds = [seeds[:n] for n in schedule]
    share = max(1, round(slots / max(1, len(sweep.experiments))))
    bounds = []
    for worst in (False, True):
        chains, steps = [], 0
        for experiment in sweep.experiments:
            one = dataclasses.replace(sweep, experiments=(experiment,))
            ids = [c.config_id for c in experiment.cells]
            chain = 0.0
            # the best case: after round 1 one configuration is left, which gets every later seed at once
            played = rounds if worst else rounds[:1] + rounds[1:][-1:]
            for number, round_seeds in enumerate(played):
                alive = ids if worst or number == 0 else ids[:1]
                held = played[number - 1] if number else ()
                done = {(c, s) for c in alive for s in held}
                packs = plan_round(one, set(alive), round_seeds, cpus=share, done=done, costs=costs)
                draw = 0.0 if cached else _stream_seconds(experiment, 1, False)  # a seed's, by each pack that needs it
                chain += makespan([pack_seconds(p, costs) + draw * len(p.seeds) for p in packs], share)
                steps += sum(p.run_steps for p in packs)
            chains.append(chain)
        bounds.append((fixed_seconds + makespan(chains, max(1, slots // share)), steps))
    (best, best_steps), (worst, worst_steps) = bounds
    return RaceBounds(best, worst, best_steps, worst_steps)
