"""What the driver's callers pass in and get back: how to run (one frozen `ExecutionOptions`, from the
command line to every trial), what a run did, an interrupt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol

from sweeps.spec import PackResources
from sweeps.plan.packing import DEFAULT_CHECKPOINT_EVERY, DEFAULT_CHUNK_STEPS
from sweeps.store.location import StoreLocation
from sweeps.store.records import SweepStatus

if TYPE_CHECKING:
    from sweeps.store.store import Store


class SweepInterrupted(KeyboardInterrupt):
    """The sweep was stopped (SIGINT / SIGTERM) before every pack finished; finished packs are saved.

    Counts are the sweep's packs: this run's and those earlier runs finished."""

    def __init__(self, packs_done: int, packs_total: int, results_dir: StoreLocation):
        super().__init__(f"interrupted: {packs_done} of {packs_total} packs done")
        self.packs_done, self.packs_total, self.results_dir = packs_done, packs_total, results_dir


class ProgressDisplay(Protocol):
    """Where a run's progress reaches a person: the command line's bar, or its log lines
    (sweeps.cli.progress). The driver's Tune callback feeds it the run's status; it decides what to show."""

    def update(self, status: SweepStatus, milestone: bool) -> None:
        """The status now; `milestone`: a pack was written or the run ended (a log line is due)."""

    def close(self) -> None:
        """The run is over: stop drawing."""


@dataclass(frozen=True)
class ExecutionOptions:
    """How to run a sweep (not what): where, how big the chunks, how often to checkpoint, and
    where notices go (library code never prints: the command passes `print`).

    One object from the command line to the trials: `fade-sweep run` and `confirm` build it once from
    their flags (a flag fills the field of its name: sweeps.cli.running), the driver and the Tune wiring
    read it, and every trial gets it whole (`tune.with_parameters`: one copy in Ray's object store)."""

    address: str | None = None  # None: embedded local Ray (or $RAY_ADDRESS when set)
    num_cpus: int | None = None  # of the embedded Ray
    chunk_steps: int = DEFAULT_CHUNK_STEPS
    dtype: str = "float32"
    runs_per_pack: int | None = None  # None: from the sweep's size and the cluster
    resources: PackResources | None = None  # None: the sweep file's
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY
    max_failures: int = 3  # retries of a failed trial, each from its last checkpoint
    tf32: bool = False  # let float32 matrix products on GPUs use TF32 (faster, ~1e-3 relative error)
    engine: str | None = None  # every pack's engine (fade_core.engines); None: the sweep file's, else the default
    notify: Callable[[str], None] | None = None  # one line per notice (dashboard URL, orphans removed, ...)
    display: Callable[[SweepStatus], ProgressDisplay] | None = None  # one per Tune experiment; None: progress not shown
    report_every: float | None = None  # the live report's least seconds between rewrites (live_report.py); None: none

    def notice(self, line: str) -> None:
        if self.notify is not None:
            self.notify(line)


@dataclass(frozen=True)
class SweepRun:
    """What one `run_sweep` (or `confirm_sweep`) did, for the closing summary and the benchmark."""

    results_dir: StoreLocation  # a local folder, or a prefix of an object store
    packs: int
    run_steps: int
    skipped_runs: int  # (config, seed) pairs already in the store before this run
    wall_seconds: float  # from connecting to Ray to the last write
    ray_start_seconds: float  # of which: starting (or attaching to) Ray
    compute_seconds: float  # summed over packs: time inside the engine
    slots: int  # packs the cluster runs at once
    nodes: frozenset[str]  # Ray node ids that ran packs
    dashboard_url: str | None
    resumed_packs: int = 0  # packs that continued from a checkpoint of an interrupted run
    store: Store | None = None  # the results store, opened after the run: it sees every pack the run committed
    status: SweepStatus | None = None  # status.json at the end, for the closing line (None: no packs, or a race's)

    @property
    def tune_overhead_fraction(self) -> float:
        """Share of the slots' time, from Ray up to the last write, not spent in the engine.

        It counts Tune's scheduling, trial start-up, result reporting and the idle tail
        while the last packs finish; starting Ray itself is reported apart.
        """
        tune_seconds = self.wall_seconds - self.ray_start_seconds
        if tune_seconds <= 0 or self.slots <= 0:
            return 0.0
        return max(0.0, 1.0 - self.compute_seconds / (tune_seconds * min(self.slots, max(self.packs, 1))))
