"""`Store`: a results store opened once, the one object readers (and the tables, the report, the
light commands) go through.

    store = Store.open("results/linear-demo")         # or "s3://bucket/prefix/linear-demo"
    store.sweep                                       # the recorded sweep (sweep.yaml), config ids resolved once
    scores = store.scan("scores")                     # LazyFrame: committed rows, each (config, seed) once,
    curves = store.scan("curves")                     #   only the recorded sweep's pairs
    store.missing_runs()                              # the sweep's runs with no committed result
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

from sweeps.spec import Pack, Sweep
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
        self._selections: dict[bool, Selection] = {}

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

    def status(self) -> SweepStatus | None:
        """status.json as it is now (the driver rewrites it every second: never kept)."""
        return read_status(self.location)

    def committed_packs(self) -> int:
        """How many pack writes are committed (manifests listed, not read)."""
        return len(self.manifests) if "manifests" in self.__dict__ else len(manifest_entries(self.location))

    def finished_runs(self) -> set[tuple[str, int]]:
        """(config_id, seed) of every committed run, inside the recorded sweep or not."""
        return runs_of(self.manifests)

    # ------------------------------------------------------------ frames

    def selection(self, all_runs: bool = False) -> Selection:
        """Which committed rows readers read: each (config, seed) from the newest manifest holding it,
        and unless `all_runs` only the recorded sweep's pairs (stored runs outside it are said once)."""
        if all_runs not in self._selections:
            wanted = None if all_runs or self.sweep is None else self.sweep.pairs
            chosen = self._selections[all_runs] = select(self.manifests, wanted)
            if chosen.outside:
                print(f"{chosen.outside} stored runs are not in the current sweep; ignored", file=sys.stderr)
        return self._selections[all_runs]

    def scan(self, kind: Kind, *, all_runs: bool = False) -> pl.LazyFrame:
        """The committed rows of `kind`: one per (config, seed) for scores, per (config, seed, bin) for
        curves; task and optimizer (the hive partitions) first. FileNotFoundError when there are none."""
        frame = scan_selection(self.location, self.selection(all_runs), kind)
        if frame is None:
            raise FileNotFoundError(f"no {kind} in {self.location}: run a sweep first (`fade-sweep run ...`)")
        return frame

    def expected_runs(self) -> pl.DataFrame:
        """The key columns (as in scores/) and steps of every run the recorded sweep asks for."""
        return self._expected

    @cached_property
    def _expected(self) -> pl.DataFrame:
        if self.sweep is None:
            return pl.DataFrame(schema=KEYS_SCHEMA)
        return pl.concat(
            [run_keys(Pack(e, e.cells, self.sweep.seeds)).with_columns(steps=pl.lit(e.settings.steps, pl.Int64))
             for e in self.sweep.experiments],
            how="diagonal_relaxed",
        )

    def missing_runs(self) -> pl.DataFrame:
        """Runs of the recorded sweep with no committed result (columns of `expected_runs`); empty
        when nothing is missing or no sweep is recorded. Reads the manifests only."""
        done = self.finished_runs()
        if self.sweep is None or self.sweep.pairs <= done:
            return self.expected_runs().clear()
        present = pl.DataFrame({"config_id": [c for c, _ in done], "seed": [s for _, s in done]}, schema=KEYS_SCHEMA)
        return self.expected_runs().join(present, on=["config_id", "seed"], how="anti")

    # ------------------------------------------------------------ writes and checks

    def write_pack(self, pack: Pack, outcome: PackOutcome) -> Manifest:
        """Commit a finished pack (dataset.write_pack); this Store counts it from now on."""
        manifest = dataset.write_pack(self.location, pack, outcome)
        if "manifests" in self.__dict__:
            self.manifests.append(manifest)
            self._selections.clear()
        return manifest

    def orphans(self) -> list[str]:
        """Files under scores/, curves/ and manifests/ that no manifest commits (relative paths)."""
        return dataset.orphans(self.location, self.manifests)

    def verify(self) -> Verification:
        """The integrity check of `fade-sweep verify` (NotAStore if this is no store)."""
        return verify_store(self.location)

