"""Resume bookkeeping: what earlier Tune experiments of a sweep ran, and where to continue.

Trusts only the store and the pack checkpoints (tensors, read with weights_only=True), never
Tune's own experiment state (pickles): each Tune experiment of the sweep records its packs as
JSON (`tune-*/packs.json`); an unfinished pack with a checkpoint continues from its newest
one, and whatever else the store misses is planned afresh. A record only selects: every pack
is rebuilt from the current sweep's own experiments and configs (sweeps.spec).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from sweeps.packs.checkpoint_files import CHECKPOINT_FILE, CHECKPOINT_META
from sweeps.plan import TUNING, Pack
from sweeps.spec import Config, Experiment, Sweep
from sweeps.store.location import StoreLocation
from sweeps.store.records import (
    PACKS_FILE,
    CheckpointRecord,
    PackConfig,
    PackEntry,
    PacksRecord,
    RecordError,
    read_record,
)
from sweeps.store.store import Store

TUNE_PREFIX = "tune-"

Runs = set[tuple[str, int]]


def _pack_entry(pack: Pack) -> PackEntry:
    e = pack.experiment
    return PackEntry(
        experiment={"task": e.task, "settings": dataclasses.asdict(e.settings), "optimizer": e.optimizer,
                    "grid": {name: list(values) for name, values in e.grid}},
        stage=pack.stage,
        configs=[PackConfig(config_id=c.config_id, hyperparameters=dict(c.hyperparameters)) for c in pack.configs],
        seeds=list(pack.seeds),
    )


def packs_record(sweep: Sweep, packs: list[Pack]) -> PacksRecord:
    """The packs record of a new Tune experiment (written as tune-*/packs.json)."""
    return PacksRecord(sweep=sweep.name, packs={p.pack_id: _pack_entry(p) for p in packs})


def experiments(location: StoreLocation) -> list[str]:
    """The Tune experiment folders of the store (tune-*), by name."""
    return [name for name in location.children() if name.startswith(TUNE_PREFIX)]


def config_index(sweep: Sweep) -> dict[str, tuple[Experiment, Config]]:
    """config id -> (experiment, config) for every grid cell of the sweep."""
    return {config.config_id: (experiment, config) for experiment in sweep.experiments for config in experiment.cells}


def recorded_packs(store: Store, sweep: Sweep, stage: str = TUNING,
                   seeds: tuple[int, ...] | None = None, notify: Callable[[str], None] | None = None) -> dict[str, Pack]:
    """Packs of `stage` recorded by earlier Tune experiments of this sweep, rebuilt from the sweep itself.

    Each pack is kept only if every config id is one of the sweep's, its seeds are among `seeds`
    (default: the sweep's), and the rebuilt pack has the recorded id. Nothing in the record is
    executed; an unreadable record is named through `notify` and its packs are planned afresh.
    """
    index = config_index(sweep)
    allowed = set(sweep.seeds if seeds is None else seeds)
    location = store.location
    packs: dict[str, Pack] = {}
    for experiment_name in experiments(location):
        rel = f"{experiment_name}/{PACKS_FILE}"
        try:
            record = read_record(location, rel, PacksRecord)
        except (OSError, RecordError):
            if notify:
                notify(f"{location.url(rel)}: unreadable pack record; its packs are planned afresh")
            continue
        for pack_id, entry in ({} if record is None else record.packs).items():
            pack = _rebuilt(entry, index, allowed, stage)
            if pack is not None and pack.pack_id == pack_id:
                packs[pack_id] = pack
    return packs


def _rebuilt(entry: PackEntry, index: dict[str, tuple[Experiment, Config]], allowed: set[int], stage: str) -> Pack | None:
    ids = [c.config_id for c in entry.configs]
    pack_seeds = tuple(entry.seeds)
    if entry.stage != stage or not ids or any(i not in index for i in ids) or not set(pack_seeds) <= allowed:
        return None
    if len({id(index[i][0]) for i in ids}) != 1:
        return None
    return Pack(index[ids[0]][0], tuple(index[i][1] for i in ids), pack_seeds, stage)


def newest_checkpoints(store: Store, dtype: str) -> dict[str, tuple[int, str]]:
    """pack id -> (steps done, checkpoint directory relative to the store): the most advanced
    checkpoint of each pack.

    Found from the files alone (each checkpoint's pack.json), whatever state Tune's
    experiment files are in."""
    location = store.location
    newest: dict[str, tuple[int, str]] = {}
    for experiment_name in experiments(location):
        files = {e.rel for e in location.list(experiment_name, recursive=True)}
        for meta in sorted(files):
            parts = meta.split("/")
            if len(parts) != 4 or parts[3] != CHECKPOINT_META or not parts[2].startswith("checkpoint_"):
                continue
            directory = meta.rsplit("/", 1)[0]
            try:
                record = read_record(location, meta, CheckpointRecord)
            except (OSError, RecordError):  # cut short by a kill: the pack continues from another, or starts over
                continue
            if record is None or record.dtype != dtype or f"{directory}/{CHECKPOINT_FILE}" not in files:
                continue
            if record.pack_id not in newest or record.steps_done > newest[record.pack_id][0]:
                newest[record.pack_id] = (record.steps_done, directory)
    return newest


def _runs(pack: Pack) -> Runs:
    return {(c.config_id, s) for c in pack.configs for s in pack.seeds}


def finished_recorded(recorded: dict[str, Pack], finished: Runs) -> list[Pack]:
    """Recorded packs whose runs are all in the store (disjoint): what earlier runs finished, for the status."""
    taken: Runs = set()
    packs = []
    for pack in recorded.values():
        runs = _runs(pack)
        if runs <= finished and not runs & taken:
            taken |= runs
            packs.append(pack)
    return packs


def resumable(store: Store, recorded: dict[str, Pack], finished: Runs, dtype: str) -> tuple[list[Pack], dict[str, str]]:
    """Unfinished recorded packs with a checkpoint (disjoint, most advanced first), and their checkpoints."""
    checkpoints = newest_checkpoints(store, dtype)
    candidates = sorted(
        ((checkpoints[pid][0], recorded[pid]) for pid in checkpoints if pid in recorded),
        key=lambda item: (-item[0], item[1].pack_id),
    )
    taken: Runs = set(finished)
    packs = []
    for _, pack in candidates:
        runs = _runs(pack)
        if runs & taken:
            continue
        taken |= runs
        packs.append(pack)
    return packs, {p.pack_id: str(checkpoints[p.pack_id][1]) for p in packs}


@dataclass(frozen=True)
class StageStart:
    """What a stage's Tune experiment starts with: the first packs, the checkpoints resumed packs continue from
    (pack id -> checkpoint folder), and the packs earlier runs finished (shown as done)."""

    packs: list[Pack]
    resume_from: dict[str, str]
    earlier: list[Pack]


def covered(finished: Runs, resumed: list[Pack]) -> Runs:
    """Runs that need no new pack: finished ones and those of packs continuing from a checkpoint."""
    return set(finished).union(*(_runs(p) for p in resumed))
