"""The stages of a run that need Ray (sweeps/tune/stages.py runs them in order): where it runs (`connect_cluster`:
Ray started or attached, the slots, the storage reachable from every node), which packs (`start`: interrupted packs
continued from their checkpoints, resume.py, the rest planned, sweeps.plan.packing), and `execute`: every pack as one
new Tune experiment (wiring.py), then the record stage again (`SweepWriter.finish`). A raced tuning stage (`race:`)
starts and runs its rounds in that one experiment (`race`, racing.py). Notices go to `ExecutionOptions.notify`;
nothing here prints.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from cluster.connect import connect
from sweeps.plan import CostModel, Pack
from sweeps.spec import PackResources, Sweep
from sweeps.store.store import Store
from sweeps.store.writer import SweepWriter
from sweeps.tune.grafana import dashboard_hint
from sweeps.tune.options import ExecutionOptions, SweepInterrupted, SweepRun
from sweeps.tune.progress import quiet_tune
from sweeps.tune.racing import RaceRounds, RoundInterrupted, race_progress
from sweeps.tune.reachable import check_storage
from sweeps.tune.resume import StageStart, covered, finished_recorded, recorded_packs, resumable
from sweeps.tune.slots import parallel_slots
from sweeps.tune.wiring import Planned, Signals, run_packs

__all__ = ["Cluster", "Planner", "connect_cluster", "dashboard_notice", "execute", "race", "start"]


@dataclass(frozen=True)
class Cluster:
    """Ray as this run found it."""

    started: float  # perf_counter when connecting began
    ray_start: float
    dashboard_url: str | None
    slots: int  # CPU packs at once
    gpu_slots: int  # GPU packs at once (0 without GPU packs)

    def plan_options(self, options: ExecutionOptions, resources: PackResources) -> dict:
        """What `plan_packs` / `plan_confirmation` need beside the runs: the slots and the cost model."""
        costs = CostModel(chunk_steps=options.chunk_steps, checkpoint_every=options.checkpoint_every,
                          threads=max(1.0, resources.cpus), dtype=options.dtype)
        return {"cpus": self.slots, "runs_per_pack": options.runs_per_pack, "gpu": resources.gpus > 0,
                "gpu_slots": max(1, self.gpu_slots), "costs": costs}

    def planned(self, options: ExecutionOptions, resources: PackResources) -> Planned:
        """The slots and cost model as the searcher orders packs by them."""
        plan = self.plan_options(options, resources)
        return Planned(self.slots + self.gpu_slots, plan["costs"], plan["gpu"])


def connect_cluster(store: Store, options: ExecutionOptions, resources: PackResources, sweep: Sweep) -> Cluster:
    """Where it runs, checked before anything is written (a bad address, resources or storage: exit 2, no folder).
    The sweep's own learners' module files travel to the workers (Ray's runtime environment)."""
    quiet_tune()  # before Ray starts: its banners and hints do not apply to a sweep's output
    started = time.perf_counter()
    modules = tuple(sorted({d.module_file for d in sweep.learners if d.module_file}))
    dashboard_url = connect(options.address, options.num_cpus, modules)
    ray_start = time.perf_counter() - started
    if options.display is not None and dashboard_url:  # a run a person follows: how to open its dashboard
        for line in dashboard_notice(dashboard_url):
            options.notice(line)
    # some node must take a GPU pack (ClusterError otherwise); GPU packs at once size the GPU packs
    gpu_slots = parallel_slots(resources) if resources.gpus > 0 else 0
    slots = parallel_slots(resources.for_task(runs_on_gpu=False))  # CPU packs at once: sizes the CPU packs
    check_storage(store.location)
    return Cluster(started, ray_start, dashboard_url, slots, gpu_slots)


def dashboard_notice(url: str) -> list[str]:
    """How to get into Ray's dashboard (token authentication is on) and what to look at there."""
    return [
        f"Ray dashboard: {url} (it asks for a token: paste what `ray get-auth-token` prints)",
        "  there: Jobs > this driver > its Tune trials, one per pack (run_steps_done, fraction_done, mean_loss); "
        "Metrics: the fade_sweep_* gauges (run-steps, rate, best score per experiment) once Prometheus and "
        "Grafana run (docs/clusters.md, 'The dashboard')",
        dashboard_hint(),
    ]


Planner = Callable[[set[tuple[str, int]]], list[Pack]]  # runs covered -> packs for the rest


def start(sweep: Sweep, store: Store, stage: str, seeds: tuple[int, ...] | None, resume: bool, finished: set,
          plan: Planner, options: ExecutionOptions) -> StageStart:
    """Which packs a stage runs: its interrupted packs continued (`resume`), and what else it lacks planned."""
    recorded = recorded_packs(store, sweep, stage, seeds, options.notify) if resume else {}
    resumed, resume_from = resumable(store, recorded, finished, options.dtype)
    return StageStart(resumed + plan(covered(finished, resumed)), resume_from, finished_recorded(recorded, finished))


def execute(sweep: Sweep, writer: SweepWriter, start: StageStart, skipped: int, options: ExecutionOptions,
            resources: PackResources, cluster: Cluster, rounds: RaceRounds | None = None) -> SweepRun:
    """Run the stage's packs as one Tune experiment (and, for a race, every round that follows them), then
    the record stage again (`SweepWriter.finish`): what the run did, with the store as readers now see it."""
    store, planned, phase = writer.store, cluster.planned(options, resources), None
    with Signals():
        if start.packs:
            progress = None if rounds is None else race_progress(sweep, start, store, options, rounds)
            phase = run_packs(sweep, start.packs, start.resume_from, store, options, resources, start.earlier, planned,
                              rounds.after if rounds is not None else None, progress)
    finished = writer.finish(ran=bool(phase and phase.packs))
    for line in finished.notices:
        options.notice(line)
    started_over = len(start.resume_from) - len(phase.restored) if phase else 0
    if started_over > 0:  # the worker's reason is in its log (Ray keeps workers' output out of the driver's)
        options.notice(f"{started_over} interrupted pack{'s' if started_over > 1 else ''} could not continue from "
                       "a checkpoint (unreadable, or another pack's) and started over; results are the same")
    return SweepRun(
        results_dir=store.location,
        packs=phase.packs if phase else 0,
        run_steps=phase.run_steps if phase else 0,
        skipped_runs=skipped,
        wall_seconds=time.perf_counter() - cluster.started,
        ray_start_seconds=cluster.ray_start,
        compute_seconds=phase.compute_seconds if phase else 0.0,
        slots=cluster.slots,
        nodes=phase.nodes if phase else frozenset(),
        dashboard_url=cluster.dashboard_url,
        resumed_packs=len(phase.restored) if phase else 0,
        store=finished.store,
        status=finished.status,
    )


def race(sweep: Sweep, writer: SweepWriter, skipped: int, resume: bool, options: ExecutionOptions,
         resources: PackResources, cluster: Cluster) -> SweepRun:
    """A raced tuning stage, started and executed: every method's rounds in one Tune experiment (racing.py)."""
    rounds = RaceRounds(sweep, writer.store, cluster.plan_options(options, resources))
    begun = rounds.start(resume, options.dtype, options.notify)
    try:
        return execute(sweep, writer, begun, skipped, options, resources, cluster, rounds)
    except SweepInterrupted as err:
        raise RoundInterrupted(err, rounds) from None
