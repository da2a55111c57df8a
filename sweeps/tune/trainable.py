"""The Ray Tune trainable: one trial runs one pack. The only Tune calls made on workers.

Tune sees a short summary of the chunks (for its dashboard and our progress display), at most
every REPORT_EVERY_SECONDS and with each checkpoint; the full per-seed curves and scores go to the Parquet store, not through Tune. Every
`checkpoint_every` chunks the pack's whole state (weights, traces, metrics so far,
stream position) goes into a Tune checkpoint, so a retried trial continues from there.
Beside the tensors, `pack.json` names the pack and its progress: a resumed sweep finds
the newest checkpoint of each unfinished pack from the files alone (no Tune state, no
pickle), and hands its path in `resume_from`. How to run (chunk size, dtype, checkpoints,
TF32, the engine) is the run's `ExecutionOptions`, handed over whole.
"""

from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import ray
from ray import tune

from sweeps.packs.checkpoint_files import CHECKPOINT_FILE, CHECKPOINT_META
from sweeps.spec import Config, Experiment
from sweeps.store.location import StoreLocation
from sweeps.store.records import CheckpointRecord, write_record
from sweeps.store.store import Store
from sweeps.tune.metrics import as_report, config_totals
from sweeps.tune.searcher import pack_of
from sweeps.tune.stream_share import attach

# A report is a round trip to the driver (the trial's thread waits for it): a chunk of a small pack (a race's
# later rounds) takes a fraction of that, so progress goes to Tune at most this often (and with each checkpoint).
REPORT_EVERY_SECONDS = 0.5

if TYPE_CHECKING:
    from sweeps.packs import ChunkProgress
    from sweeps.tune.options import ExecutionOptions


def _summary(progress: ChunkProgress) -> dict:
    return {
        "steps_done": progress.steps_done,
        "fraction_done": progress.steps_done / progress.total_steps,
        "run_steps_done": progress.steps_done * progress.runs,
        "mean_loss": progress.mean_loss,
        "diverged_runs": progress.diverged,
        "node_id": ray.get_runtime_context().get_node_id(),
    }


def pack_trainable(
    config: dict,
    *,
    index: dict[str, tuple[Experiment, Config]],
    store_uri: str,
    writer: str | None,
    resume_from: dict[str, str],
    options: ExecutionOptions,
    boards: str | None,
) -> None:
    """Run the pack `config` names (searcher.pack_config; rebuilt from `index`, the sweep's configurations by id:
    searcher.pack_of) from its last checkpoint, if any, and write its results
    into the store at `store_uri` (a `StoreLocation.uri`).

    The last checkpoint is this trial's own (a retry), else the one `resume_from` names for
    the pack (a checkpoint directory of an earlier, interrupted experiment of the sweep).
    `options.engine`: every pack's engine (None: its experiment's, else the default for its task and device);
    `boards`: the name of the nodes' stream boards, through which this node's workers draw each stream once
    (stream_share.py; None: alone)."""
    # The pack engine (torch, numba) is imported here, on the worker: the driver imports this
    # module only to hand Tune the function, and starts sooner without it (2-3 s).
    import numba
    import torch

    from sweeps.packs import make_runner
    from sweeps.packs.neural import use_tf32

    pack = pack_of(config, index)
    attach(boards)
    store = Store.open(store_uri)  # a local path or an object-store URI (credentials: this worker's chain)
    if store.pack_written(pack):
        # Finished before an interruption that Tune's experiment state did not record yet.
        tune.report({"written": True, "already_in_store": True, "compute_seconds": 0.0})
        return
    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1)
    # One compiled thread per CPU Tune gave this trial: packs in parallel, never oversubscribed.
    threads = max(1, min(numba.config.NUMBA_NUM_THREADS, int(cpus)))
    numba.set_num_threads(threads)
    torch.set_num_threads(threads)
    # Ray sets CUDA_VISIBLE_DEVICES to the trial's GPUs, so "cuda" is the one assigned.
    device = "cuda" if ray.get_gpu_ids() else "cpu"
    use_tf32(options.tf32)

    def new_runner():
        return make_runner(pack, options.chunk_steps, getattr(torch, options.dtype), device, options.engine)

    runner = new_runner()
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            runner.load_checkpoint(Path(directory))
    elif pack.pack_id in resume_from and not _load_earlier_checkpoint(runner, store.location, resume_from[pack.pack_id]):
        runner = new_runner()  # half-loaded state: start clean
    restored_from = runner.steps_done
    last = None
    reported_at = time.monotonic()
    for chunk, last in enumerate(runner.run(), start=1):
        if last.steps_done == last.total_steps:
            break
        metrics = {**_summary(last), "restored_from_step": restored_from}
        if options.checkpoint_every and chunk % options.checkpoint_every == 0:
            with tempfile.TemporaryDirectory() as directory:
                runner.save_checkpoint(Path(directory))
                record = CheckpointRecord(pack_id=pack.pack_id, steps_done=runner.steps_done,
                                          total_steps=pack.experiment.settings.steps, dtype=options.dtype)
                write_record(StoreLocation.parse(directory), CHECKPOINT_META, record)
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(directory))
            reported_at = time.monotonic()
        elif time.monotonic() - reported_at >= REPORT_EVERY_SECONDS:
            tune.report(metrics)
            reported_at = time.monotonic()
    outcome = runner.outcome()
    store.write_pack(pack, outcome, writer)  # only while the driver still holds the store
    # The final report comes after the write, so a finished trial means written results.
    final = _summary(last) if last is not None else {}
    tune.report({**final, "restored_from_step": restored_from, "compute_seconds": outcome.wall_seconds, "written": True,
                 "config_totals": as_report(config_totals([c for c, _ in pack.pairs()], outcome.score, outcome.diverged))})


def _load_earlier_checkpoint(runner, location: StoreLocation, directory: str) -> bool:
    """Continue from an interrupted experiment's checkpoint (`directory`, relative to the store);
    False (start over, with a notice: Ray forwards a worker's output to the driver's) if it is unreadable.

    Runs are deterministic, so starting over costs time, never correctness."""
    try:
        runner.load_checkpoint(location.read_bytes(f"{directory}/{CHECKPOINT_FILE}"))
    except Exception as err:  # noqa: BLE001 - a checkpoint cut short by a kill, or not a tensor file
        logging.getLogger(__name__).warning("checkpoint %s unreadable (%s: %s); the pack starts over",
                                            location.url(directory), type(err).__name__, err)
        return False
    return True
