"""The Tune wiring: one Tune experiment whose trials are packs, handed out by a `PackSearcher`
(searcher.py: a grid's packs, or a race's rounds as they are decided), with the trainable, the
placement of each trial, the run config, signals and Tune's log noise handled.

Interrupts are honest: SIGINT (Ctrl-C) or SIGTERM stops Tune's trials, finished packs stay
in the store, status.json says `interrupted`, and `run_packs` raises `SweepInterrupted`
(the command exits 130) instead of returning as if the sweep were done.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import dataclass

from ray import tune

from sweeps.plan import TUNING, CostModel, Pack
from sweeps.packs.dryrun import draw_seconds
from sweeps.spec import PackResources, Sweep
from sweeps.plan.packing import pack_seconds
from sweeps.store.location import StoreLocation
from sweeps.store.records import PACKS_FILE, PacksRecord, write_record
from sweeps.store.store import Store
from sweeps.tune.live_report import live_reports
from sweeps.tune.metrics import gauge_start
from sweeps.tune.options import ExecutionOptions, SweepInterrupted
from sweeps.tune.progress import SweepProgress
from sweeps.tune.resume import TUNE_PREFIX, config_index, packs_record
from sweeps.tune.searcher import Next, PackSearcher, search
from sweeps.tune.stream_share import end_boards, node_boards
from sweeps.tune.trainable import pack_trainable
from tasks import get_task


def _trainable(index: dict, results_dir: StoreLocation, writer: str | None, options: ExecutionOptions,
               resources: PackResources, resume_from: dict[str, str], boards: str | None):
    """The trainable with what every trial shares, put in Ray's object store once: the sweep's configurations
    by id (a trial's config names its pack by ids: searcher.pack_config), the store (as its URI: workers
    rebuild the location, credentials from their own chain), the writer's token, where interrupted packs
    continue from, the run's options, whole, and the name of the nodes' stream boards (stream_share.py)."""
    trainable = tune.with_parameters(pack_trainable, index=index, store_uri=results_dir.uri, writer=writer,
                                     resume_from=resume_from, options=options, boards=boards)
    return tune.with_resources(trainable, pack_placement(index, resources))


def pack_placement(index: dict, resources: PackResources):
    """Each trial's request: the GPU share for packs of GPU-capable (neural) tasks, CPUs alone
    for CPU-only (linear) ones, so one sweep fills both kinds of slot."""

    def request(config: dict) -> tune.PlacementGroupFactory:
        task = get_task(index[config["configs"][0]][0].task)
        return tune.PlacementGroupFactory([resources.for_task(task.runs_on_gpu).as_tune()])

    return request


def _run_config(name: str, results_dir: StoreLocation, options: ExecutionOptions, callbacks: list) -> tune.RunConfig:
    # We snapshot the experiment at each checkpoint on purpose (see below); Tune warns about it.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    # Tune writes its experiment and the checkpoints beside the results: a local path, or the
    # bucket path with the store's pyarrow filesystem (custom endpoint included, no credentials in it).
    storage_path, storage_filesystem = results_dir.tune_storage()
    return tune.RunConfig(
        name=name,
        storage_path=storage_path,
        storage_filesystem=storage_filesystem,
        verbose=0,
        callbacks=callbacks,
        failure_config=tune.FailureConfig(max_failures=options.max_failures),
        # Keep only the newest checkpoint of each trial: what a retry, or a resumed sweep, continues from.
        checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
    )


def _new_experiment(results_dir: StoreLocation, record: PacksRecord) -> str:
    """A new tune-<time> experiment holding its packs record (the writer lock is held: no race)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        name = f"{TUNE_PREFIX}{stamp}" + (f"-{n}" if n else "")
        if results_dir.exists(name):
            continue
        write_record(results_dir, f"{name}/{PACKS_FILE}", record)
        return name
    raise RuntimeError(f"cannot create a new Tune experiment folder in {results_dir}")


class _QuietTune(logging.Filter):
    """Drops Tune's advice that does not apply here (Tuner.restore: resuming is `--resume`) and its
    complaints about trials it stopped before their first result."""

    HIDDEN = ("Tuner.restore", "Failed to fetch metrics")

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(h in record.getMessage() for h in self.HIDDEN)


_QUIET = _QuietTune()


def _quiet_tune() -> None:
    """Install the filter on Tune's loggers (when a run starts, once; importing this module changes nothing)."""
    for name in ("ray.tune.tune", "ray.tune.analysis.experiment_analysis"):
        logger = logging.getLogger(name)
        if _QUIET not in logger.filters:
            logger.addFilter(_QUIET)


class Signals:
    """While packs run, SIGTERM stops the sweep as SIGINT does (during fit: Tune's handler, which
    stops the trials and returns); afterwards both handlers are restored (Tune leaves its own)."""

    def __enter__(self):
        self._active = threading.current_thread() is threading.main_thread()
        if self._active:
            self._sigint, self._sigterm = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, self._on_sigterm)
        return self

    @staticmethod
    def _on_sigterm(signum, frame) -> None:
        handler = signal.getsignal(signal.SIGINT)  # Tune's while it runs: stop the trials, return from fit
        if callable(handler):
            handler(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt

    def __exit__(self, *exc) -> None:
        if self._active:
            signal.signal(signal.SIGINT, self._sigint)  # Tune leaves its handler installed
            signal.signal(signal.SIGTERM, self._sigterm)


@dataclass(frozen=True)
class Planned:
    """What the packs were planned for: the slots that run them at once and the cost model (the order they
    are handed out in)."""

    slots: int  # packs at once, CPU and GPU slots together
    costs: CostModel
    gpu: bool  # whether GPU-capable tasks run on GPUs

    def device(self, pack: Pack) -> str:
        return "cuda" if self.gpu and get_task(pack.experiment.task).runs_on_gpu else "cpu"


@dataclass(frozen=True)
class Phase:
    """What the Tune experiment of this run did."""

    packs: int
    run_steps: int
    compute_seconds: float
    nodes: frozenset[str]
    restored: frozenset[str]  # packs that continued from a checkpoint (a resumed pack whose checkpoint failed starts over)


def run_packs(sweep: Sweep, packs: list[Pack], resume_from: dict[str, str], store: Store,
              options: ExecutionOptions, resources: PackResources, earlier: list[Pack], plan: Planned,
              after: Next | None = None, progress: SweepProgress | None = None) -> Phase:
    """Run the packs (of one stage) as one new Tune experiment, and the packs `after` adds as trials end (the
    rounds of a race); raises SweepInterrupted or RuntimeError unless all finish. `plan`: the slots and the
    cost model the packs were planned with; `progress`: the callback to report to (made here if None)."""
    _quiet_tune()
    results_dir = store.location  # Tune writes its experiment and checkpoints beside the results
    results_dir.makedirs()
    record = packs_record(sweep, packs)
    name = _new_experiment(results_dir, record)
    stage = packs[0].stage
    label = sweep.name if stage == TUNING else f"{sweep.name} ({stage})"
    progress = progress or SweepProgress(label, packs, results_dir, finished=earlier, display=options.display,
                                         gauges=gauge_start(sweep, store, stage))
    live = live_reports(results_dir, options)  # RESULTS_DIR/report.html as packs land
    ran: dict[str, Pack] = {p.pack_id: p for p in packs}

    def handed(pack: Pack) -> None:  # a pack a round added: in the packs record before its trial exists
        if pack.pack_id not in record.packs:
            record.packs.update(packs_record(sweep, [pack]).packs)
            write_record(results_dir, f"{name}/{PACKS_FILE}", record)
            progress.add([pack])
        ran[pack.pack_id] = pack

    searcher = PackSearcher(packs, lambda p: pack_seconds(p, plan.costs, plan.device(p)), handed, after)
    grid = None
    prefix, boards = node_boards(draw_seconds(packs), plan.slots)  # each node's workers draw a stream once between them
    try:
        tuner = tune.Tuner(
            _trainable(config_index(sweep), results_dir, store.writer, options, resources, resume_from, prefix),
            tune_config=tune.TuneConfig(search_alg=search(searcher, plan.slots), num_samples=-1, reuse_actors=True),
            run_config=_run_config(name, results_dir, options, [progress, *live]),
        )
        grid = tuner.fit()
    except KeyboardInterrupt:  # a second Ctrl-C: Tune's own handler gave up waiting
        pass
    finally:
        end_boards(boards)
    for report in live:  # no live page after this: what the command writes next (the final report) stays
        report.close()
    done = store.reopened().finished_runs(stage)  # what the trials committed
    written = {p.pack_id for p in [*earlier, *ran.values()] if all((c.config_id, s) in done for c in p.configs for s in p.seeds)}
    failed = [] if grid is None else [r.config.get("pack_id") for r in grid if r.error and r.config.get("pack_id") not in written]
    decided = [p.pack_id for p in searcher.queued if p.pack_id not in ran]  # a race's next round, never handed to Tune
    unfinished = [pid for pid in ran if pid not in written and pid not in failed] + decided
    if grid is None or unfinished or not searcher.finished:  # Tune returns from an interrupt too: the searcher knows
        progress.finish("interrupted", written)
        raise SweepInterrupted(len(written), len(earlier) + len(ran) + len(decided), results_dir)
    if failed:
        progress.finish("failed", written)
        raise RuntimeError(
            f"{len(failed)} of {len(ran)} packs failed ({', '.join(failed)}) after retries; the others are saved: "
            f"fix the cause and rerun with --resume. First error: {grid.errors[0]}"
        )
    progress.finish("finished", written)
    compute = sum(r.metrics.get("compute_seconds", 0.0) for r in grid if r.metrics)
    restored = frozenset(pid for pid, t in progress.status.trials.items() if t.restored_from_step > 0)
    return Phase(len(ran), sum(p.run_steps for p in ran.values()), compute, frozenset(progress.status.nodes), restored)
