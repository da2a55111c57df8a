"""Commit a finished pack: its two Parquet data files (curves, scores), then its manifest, the commit
(manifests.py has the rule; dataset.py the layout). pyarrow writes the files: only a writer loads it."""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sweeps.plan import Pack
from sweeps.store.dataset import STAGE, run_keys
from sweeps.store.holder import StoreLocked
from sweeps.store.location import StoreLocation
from sweeps.store.manifests import MANIFESTS
from sweeps.store.records import KINDS, PARTITIONS, DataFile, Manifest, write_record

if TYPE_CHECKING:  # sweeps.packs imports torch; a store that only reads needs neither
    from sweeps.packs.outcome import PackOutcome

SCORES, CURVES = KINDS


def _arrow_keys(pack: Pack, repeat: int = 1) -> dict[str, pa.ChunkedArray]:
    """`run_keys` as Arrow columns for a data file, each row repeated `repeat` times (curve bins)."""
    keys = run_keys(pack)
    table = keys.gather(np.repeat(np.arange(keys.height), repeat)).to_arrow()
    return {f.name: table[f.name].cast(pa.string()) if pa.types.is_large_string(f.type) or pa.types.is_string_view(f.type)
            else table[f.name] for f in table.schema}


def scores_table(pack: Pack, outcome: PackOutcome) -> pa.Table:
    """The pack's scores as read back (partition columns included)."""
    columns = _arrow_keys(pack)
    columns["score"] = pa.array(outcome.score, pa.float64())
    columns["diverged"] = pa.array(outcome.diverged, pa.bool_())
    columns["steps"] = pa.array(np.full(pack.runs, pack.experiment.settings.steps), pa.int64())
    columns["wall_seconds"] = pa.array(np.full(pack.runs, outcome.wall_seconds), pa.float64())
    columns[STAGE] = pa.array([pack.stage] * pack.runs, pa.string())
    return pa.table(columns)


def curves_table(pack: Pack, outcome: PackOutcome) -> pa.Table:
    """The pack's curves as read back (partition columns included)."""
    bins = len(outcome.bin_end)
    columns = _arrow_keys(pack, bins)
    columns["step"] = pa.array(np.tile(outcome.bin_end, pack.runs), pa.int64())
    for name, values in outcome.curves.items():
        if values is None:
            columns[name] = pa.nulls(pack.runs * bins, pa.float64())
        elif values.ndim == 3:  # one value per output: a fixed-size list column
            flat = pa.array(values.reshape(-1), pa.float64())
            columns[name] = pa.FixedSizeListArray.from_arrays(flat, values.shape[2])
        else:
            columns[name] = pa.array(values.reshape(-1), pa.float64())
    columns[STAGE] = pa.array([pack.stage] * pack.runs * bins, pa.string())
    return pa.table(columns)


def _write_data_file(table: pa.Table, location: StoreLocation, relative: str) -> DataFile:
    """Write one data file under its final (write-once) name; returns its manifest entry."""
    size, sha256 = location.write_with(relative, lambda f: pq.write_table(table.drop_columns(list(PARTITIONS)), f))
    return DataFile(path=relative, rows=table.num_rows, bytes=size, sha256=sha256)


def _check_writer(location: StoreLocation, pack: Pack, writer: str | None) -> None:
    if writer is not None and location.writer_lock().token() != writer:
        raise StoreLocked(f"{location}: the sweep's driver no longer holds the store (another writer took it over); "
                          f"pack {pack.pack_id} is not committed")


def new_write_id() -> str:
    """Unique and time-ordered: <UTC time to the microsecond>-<random>."""
    now = time.time()
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f"{int(now * 1e6) % 1_000_000:06d}-{uuid.uuid4().hex[:8]}"


def write_pack(location: StoreLocation, pack: Pack, outcome: PackOutcome, writer: str | None = None) -> Manifest:
    """Commit a finished pack: its curves and scores files, then its manifest (the commit).

    `writer`: the owner token of the lock hold this pack runs under (the driver's). If writer.lock
    names another (the driver was killed and a new writer took the store over), nothing is written
    (StoreLocked), checked before the data files and again before the manifest: files written in
    between are orphans, which the new writer removes when its run ends."""
    _check_writer(location, pack, writer)
    e = pack.experiment
    write_id = new_write_id()
    stem = f"pack-{pack.pack_id}-{write_id}"
    partition = f"task={e.task}/optimizer={e.optimizer}"
    files = {
        CURVES: _write_data_file(curves_table(pack, outcome), location, f"{CURVES}/{partition}/{stem}.parquet"),
        SCORES: _write_data_file(scores_table(pack, outcome), location, f"{SCORES}/{partition}/{stem}.parquet"),
    }
    manifest = Manifest(
        pack_id=pack.pack_id, write_id=write_id, written_at=time.time(), task=e.task, optimizer=e.optimizer, stage=pack.stage,
        configs=tuple(c.config_id for c in pack.configs), seeds=tuple(int(s) for s in pack.seeds), files=files,
        engine=outcome.engine, name=f"{stem}.json",
    )
    _check_writer(location, pack, writer)
    write_record(location, f"{MANIFESTS}/{manifest.name}", manifest, durable=True)  # the commit
    return manifest
