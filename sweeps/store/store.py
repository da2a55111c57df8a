"""`Store`: a results store opened once, the one object readers (and the tables, the report, the
light commands) go through.

    store = Store.open("results/linear-demo")         # or "s3://bucket/prefix/linear-demo"
    store.sweep                                       # the recorded sweep (sweep.yaml), config ids resolved once
    scores = store.scan("scores")                     # LazyFrame: committed rows, each (config, seed) once,
    curves = store.scan("curves")                     #   only the recorded sweep's pairs
    store.missing_runs()                              # the sweep's runs with no committed result
    store.scan("scores", stage="confirmation")        # the confirmation stage's rows (stages.py); default tuning
    store.verify(); store.status()                    # integrity check; status.json

Opening converts the target (a path, a URI, or a `StoreLocation`) once and touches nothing;
each record is read on first use and kept: the manifests once per open, however many frames,
tables and figures are made from them. A Store sees the store as it was when first read
(manifests are write-once; open a new Store to see later commits); its own `write_pack`s are
added to what it holds.
"""

from __future__ import annotations

import os
import sys
from functools import cached_property
from typing import TYPE_CHECKING, Literal

import polars as pl

from sweeps.spec import CONFIRMATION, TUNING, Pack, Sweep
from sweeps.store import dataset
from sweeps.store.dataset import (
    Selection,
    manifest_entries,
    read_manifests,
    run_keys,
    runs_of,
    scan_selection,
    select,
)
from sweeps.store.location import StoreLocation
from sweeps.store.record import read_store_record, read_sweep
from sweeps.store.records import Manifest, StoreRecord, SweepStatus
from sweeps.store.stages import ConfirmationRecord, read_confirmation
from sweeps.store.status import read_status
from sweeps.store.verify import Verification, verify_store

if TYPE_CHECKING:
    from sweeps.packs.outcome import PackOutcome

Kind = Literal["scores", "curves"]
KEYS_SCHEMA = {"config_id": pl.String, "seed": pl.Int64}


class Store:
    """A results store: the only reader and writer of its files (see the module docstring)."""

    def __init__(self, location: StoreLocation):
        self.location = location
        self._selections: dict[tuple[bool, str], Selection] = {}
        self._expected: dict[str, pl.DataFrame] = {}

    @classmethod
    def open(cls, target: str | os.PathLike | StoreLocation) -> Store:
        """The store at a local path or URI; StorageError (exit 2) for a URI the store cannot serve."""
        return cls(StoreLocation.parse(target))

    def __repr__(self) -> str:
        return f"Store({self.location.display!r})"

    # ------------------------------------------------------------ records, read once

    @cached_property
    def manifests(self) -> list[Manifest]:
        """Every committed pack write, oldest first (StoreError names a damaged manifest)."""
        return read_manifests(self.location)

    @cached_property
    def sweep(self) -> Sweep | None:
        """The recorded sweep (None: none recorded); its configs and pairs are computed once."""
        return read_sweep(self.location)

    @cached_property
    def record(self) -> StoreRecord | None:
        """store.json: dtype, package version, sweep history."""
        return read_store_record(self.location)

    @cached_property
    def confirmation(self) -> ConfirmationRecord | None:
        """confirmation.json: the confirmation stage's selected configurations and fresh seeds (None: no stage)."""
        return read_confirmation(self.location)

    def status(self) -> SweepStatus | None:
        """status.json as it is now (the driver rewrites it every second: never kept)."""
        return read_status(self.location)

    def committed_packs(self) -> int:
        """How many pack writes are committed (manifests listed, not read)."""
        return len(self.manifests) if "manifests" in self.__dict__ else len(manifest_entries(self.location))

    def stage_manifests(self, stage: str = TUNING) -> list[Manifest]:
        """The committed pack writes of one stage, oldest first."""
        return [m for m in self.manifests if m.run_stage == stage]

    def finished_runs(self, stage: str = TUNING) -> set[tuple[str, int]]:
        """(config_id, seed) of every committed run of `stage`, inside the recorded sweep or not."""
        return runs_of(self.stage_manifests(stage))

    def wanted(self, stage: str = TUNING) -> frozenset[tuple[str, int]] | None:
        """The pairs readers of `stage` read: the recorded sweep's (tuning; None: no sweep recorded,
        all) or confirmation.json's (confirmation; none when no stage is recorded)."""
        if stage == TUNING:
            return None if self.sweep is None else self.sweep.pairs
        return frozenset() if self.confirmation is None else self.confirmation.pairs()

    # ------------------------------------------------------------ frames

    def selection(self, all_runs: bool = False, stage: str = TUNING) -> Selection:
        """Which committed rows of `stage` readers read: each (config, seed) from the newest manifest of the
        stage holding it, and unless `all_runs` only the `wanted` pairs (tuning runs outside the sweep are
        said once)."""
        if (all_runs, stage) not in self._selections:
            wanted = None if all_runs else self.wanted(stage)
            chosen = self._selections[all_runs, stage] = select(self.stage_manifests(stage), wanted)
            if chosen.outside and stage == TUNING:
                print(f"{chosen.outside} stored runs are not in the current sweep; ignored", file=sys.stderr)
        return self._selections[all_runs, stage]

    def scan(self, kind: Kind, *, all_runs: bool = False, stage: str = TUNING) -> pl.LazyFrame:
        """The committed rows of `kind` and `stage` (tuning: the grid; confirmation: the selected configurations
        on fresh seeds): one per (config, seed) for scores, per (config, seed, bin) for curves; task and
        optimizer (the hive partitions) first. FileNotFoundError when there are none."""
        frame = scan_selection(self.location, self.selection(all_runs, stage), kind)
        if frame is None:
            hint = "run a sweep first (`fade-sweep run ...`)" if stage == TUNING else "run `fade-sweep confirm` first"
            raise FileNotFoundError(f"no {stage} {kind} in {self.location}: {hint}")
        return frame

    def expected_runs(self, stage: str = TUNING) -> pl.DataFrame:
        """The key columns (as in scores/) and steps of every run of `stage` the store asks for: the recorded
        sweep's grid on its seeds, or confirmation.json's configurations (cells of that grid) on its seeds."""
        if stage not in self._expected:
            self._expected[stage] = self._expected_frame(stage)
        return self._expected[stage]

    def _expected_frame(self, stage: str) -> pl.DataFrame:
        record = self.confirmation if stage == CONFIRMATION else None
        if self.sweep is None or (stage == CONFIRMATION and record is None):
            return pl.DataFrame(schema=KEYS_SCHEMA)
        chosen = None if record is None else {row["config_id"] for row in record.selected}
        seeds = self.sweep.seeds if record is None else record.seeds
        packs = [Pack(e, tuple(c for c in e.cells if chosen is None or c.config_id in chosen), seeds, stage)
                 for e in self.sweep.experiments]
        frames = [run_keys(p).with_columns(steps=pl.lit(p.experiment.settings.steps, pl.Int64)) for p in packs if p.configs]
        return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame(schema=KEYS_SCHEMA)

    def missing_runs(self, stage: str = TUNING) -> pl.DataFrame:
        """Runs of `stage` with no committed result (columns of `expected_runs`); empty when nothing is
        missing or no sweep (or confirmation stage) is recorded. Reads the manifests only."""
        done = self.finished_runs(stage)
        wanted = self.wanted(stage)
        if wanted is None or wanted <= done:
            return self.expected_runs(stage).clear()
        present = pl.DataFrame({"config_id": [c for c, _ in done], "seed": [s for _, s in done]}, schema=KEYS_SCHEMA)
        return self.expected_runs(stage).join(present, on=["config_id", "seed"], how="anti")

    # ------------------------------------------------------------ writes and checks

    def write_pack(self, pack: Pack, outcome: PackOutcome) -> Manifest:
        """Commit a finished pack (dataset.write_pack); this Store counts it from now on."""
        manifest = dataset.write_pack(self.location, pack, outcome)
        if "manifests" in self.__dict__:
            self.manifests.append(manifest)
            self._selections.clear()
        return manifest

    def committed_files(self, kind: Kind = "scores") -> list[str]:
        """The data files of `kind` that manifests name, for other readers (local paths or URIs)."""
        files = [m.files[kind].path for m in self.manifests]
        return [str(self.location.local_path / f) if self.location.local else self.location.url(f) for f in files]

    def orphans(self) -> list[str]:
        """Files under scores/, curves/ and manifests/ that no manifest commits (relative paths)."""
        return dataset.orphans(self.location, self.manifests)

    def verify(self) -> Verification:
        """The integrity check of `fade-sweep verify` (NotAStore if this is no store)."""
        return verify_store(self.location)

