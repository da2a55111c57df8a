"""`Store`: a results store opened once, the one object readers (the tables, the report, the light
commands) and the driver go through.

    store = Store.open("results/linear-demo")         # or "s3://bucket/prefix/linear-demo"
    store.sweep                                       # the recorded sweep (sweep.yaml), config ids resolved once
    scores = store.scan("scores")                     # LazyFrame: committed rows, each (config, seed) once,
    curves = store.scan("curves")                     #   only the recorded sweep's pairs
    store.missing_runs()                              # the sweep's runs with no committed result
    store.scan("scores", stage="confirmation")        # the confirmation stage's rows; default tuning
    store.race                                        # a raced sweep's decisions (race.json); its pairs are the wanted ones
    store.verify(); store.status()                    # integrity check; status.json
    with store.writing(sweep, dtype, resume): store.record_sweep(...); store.tidy()   # a run: through writer.py

Opening converts the target (a path, a URI, or a `StoreLocation`) once and touches nothing;
each record is read on first use and kept: the manifests once per open, however many frames,
tables and figures are made from them. A Store sees the store as it was when first read
(manifests are write-once; `reopened()` sees later commits by other processes); its own
writes are added to what it holds, and taking the writer lock reads everything again.

Polars loads with the first frame and pyarrow with the first write (or object-store URI):
`fade-sweep status` reads records and manifests only, `verify` loads pyarrow but not polars,
and `table` and `report` on a local store load polars but not pyarrow.
"""

from __future__ import annotations

import logging
import os
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from typing import TYPE_CHECKING, Literal

from sweeps.plan import CONFIRMATION, STAGES, TUNING, Pack
from sweeps.spec import Sweep, SweepError
from sweeps.store import manifests as committed
from sweeps.store.location import StoreLocation
from sweeps.store.manifests import Damaged, DamagedFile, ManifestsRead, Selection, damaged_files, damaged_files_notice
from sweeps.store.manifests import manifest_entries, read_manifests, runs_of, select
from sweeps.store.race import race_damage, read_race, wanted_pairs, was_raced
from sweeps.store.sweep_record import SWEEP_RECORD, check_and_record, check_change, read_store_record, recorded_learners
from sweeps.store.sweep_record import recorded_sweep
from sweeps.store.records import (
    CONFIRMATION_FILE,
    RACE_FILE,
    ConfirmationRecord,
    Manifest,
    RaceRecord,
    RecordError,
    StoreRecord,
    SweepStatus,
    read_record,
    write_record,
)
from sweeps.store.status import read_status

if TYPE_CHECKING:
    import polars as pl

    from sweeps.packs.outcome import PackOutcome
    from sweeps.store.verify import Verification

Kind = Literal["scores", "curves"]
log = logging.getLogger(__name__)
_READ_ONCE = ("_manifests_read", "manifests", "damaged_manifests", "damaged_files", "sweep", "record", "confirmation",
              "race")  # cached


class Store:
    """A results store: the only reader and writer of its files (see the module docstring)."""

    def __init__(self, location: StoreLocation):
        self.location = location
        self._selections: dict[tuple[bool, str], Selection] = {}
        self._expected: dict[str, pl.DataFrame] = {}
        self.writer: str | None = None  # the lock hold's owner token, inside `writing()`

    @classmethod
    def open(cls, target: str | os.PathLike | StoreLocation | Store) -> Store:
        """The store at a local path or URI (a Store is returned as it is); StorageError (exit 2) for a
        URI the store cannot serve."""
        return target if isinstance(target, Store) else cls(StoreLocation.parse(target))

    @classmethod
    def of_sweep(cls, sweep: Sweep, storage: str | os.PathLike | StoreLocation) -> Store:
        """The store of `sweep` under `storage`: <storage>/<sweep name>, a local folder (messages name it
        absolute) or a prefix of an object store. StorageError (exit 2) for a storage it cannot serve."""
        return cls(StoreLocation.parse(storage).absolute() / sweep.name)  # the one conversion of the user's string

    def check_run(self, sweep: Sweep, dtype: str, resume: bool) -> None:
        """Every refusal of a run of `sweep` that needs no cluster, from the store (SweepError, exit 2): results
        there without --resume, or a resume that would change what stored runs mean (sweep_record.check_change: the
        dtype, task settings). Reads only; asked under the writer lock (`writing`), before Ray starts."""
        if self.has_results() and not resume:
            raise SweepError(f"{self.location} already holds results of sweep {sweep.name}; pass --resume to finish "
                             "it, or choose another --storage or sweep name")
        check_change(self.location, sweep, dtype)

    def reopened(self) -> Store:
        """A new Store on the same location: it sees what other processes committed since."""
        return Store(self.location)

    def __repr__(self) -> str:
        return f"Store({self.location.display!r})"

    def _forget(self) -> None:
        """Drop what was read: the files changed under this Store (it took the lock, or tidied)."""
        for name in _READ_ONCE:
            self.__dict__.pop(name, None)
        self._selections.clear()
        self._expected.clear()

    # ------------------------------------------------------------ records, read once

    @cached_property
    def _manifests_read(self) -> ManifestsRead:
        return read_manifests(self.location)

    @cached_property
    def manifests(self) -> list[Manifest]:
        """Every committed pack write, oldest first (a damaged manifest commits nothing: `damaged_manifests`)."""
        return self._manifests_read.manifests

    @cached_property
    def damaged_manifests(self) -> list[Damaged]:
        """Manifests that cannot be read: their runs count as missing until `run --resume` sets them aside."""
        return self._manifests_read.damaged

    @cached_property
    def damaged_files(self) -> list[DamagedFile]:
        """The data files readers would read whose size is not their manifest's: left out of their frames
        (a scores file's runs count as missing: `left_out_runs`) until `run --resume` runs their packs again."""
        return damaged_files(self.location, (m for stage in STAGES for m in self._current(stage)))

    def damage_notice(self) -> str | None:
        """One line for readers, who answer from the rest: what damaged they skipped, and the repair (None: nothing)."""
        parts = []
        try:
            damaged_race = race_damage(self.location, self.sweep)
        except SweepError as err:  # it names the repair
            parts.append(f"skipped {err}")
            damaged_race = None
        if damaged_race is not None:  # the tables replay its decisions from the stored scores
            parts.append(f"{damaged_race}: the race's decisions are replayed from the stored scores; "
                         f"`{self.resume_command()}` writes it anew")
        bad = self.damaged_manifests
        if bad:
            many = len(bad) > 1
            what = f"{len(bad)} damaged manifest{'s' if many else ''} ({bad[0].reason}{', ...' if many else ''})"
            parts.append(f"skipped {what}: {'their' if len(bad) > 1 else 'its'} runs count as missing; "
                         f"`{self.resume_command()}` sets {'them' if len(bad) > 1 else 'it'} aside and runs them again")
        if self.damaged_files:
            parts.append(damaged_files_notice(self.location, self.damaged_files, self.resume_command()))
        records = ((lambda: self.record, f"`{self.resume_command()}` writes it anew"),
                   (self.status, "the next run that runs packs writes it anew"),
                   (lambda: self.confirmation, f"`fade-sweep confirm {self.location} --seeds N` records it again"))
        for read, repair in records:
            try:
                read()
            except RecordError as err:
                parts.append(f"skipped {err}; {repair}")
        return "; ".join(parts) or None

    def resume_command(self) -> str:
        """The command that continues (and repairs) this store: `fade-sweep run SWEEP --storage STORAGE
        [--dtype D] --resume`, SWEEP being the recorded sweep.yaml of a local store."""
        where = self.location
        try:
            record = self.record
        except RecordError:
            record = None
        try:  # `run` reads a sweep file of this machine: an object store's sweep.yaml is no argument, nor the
            # recorded copy of a sweep whose own learners' modules sit beside the researcher's file, not beside it
            readable = (where.local_path is not None and recorded_sweep(where, record) is not None
                        and not any(learner.module_file for learner in recorded_learners(record)))
        except SweepError:
            readable = False
        sweep = where.url(SWEEP_RECORD) if readable else "SWEEP"
        dtype = record.dtype if record is not None else "float32"
        dtypes = ["--dtype", dtype] if dtype != "float32" else []
        raced = ["--race"] if was_raced(where) else []  # a SWEEP without its `race:` block races again
        command = ["fade-sweep", "run", sweep, "--storage", where.parent.display, *dtypes, *raced]
        return shlex.join([*command, "--resume"])

    @cached_property
    def sweep(self) -> Sweep | None:
        """The recorded sweep (None: none recorded); its configs and pairs are computed once. SweepError
        naming sweep.yaml, and the command that records it anew, if it is damaged."""
        try:
            record = self.record
        except RecordError:
            record = None  # its hash cannot be checked; the damaged store.json is named where it is read
        try:
            return recorded_sweep(self.location, record)
        except SweepError as err:
            raise SweepError(f"{err}; the store's record of its sweep is damaged: `{self.resume_command()}` "
                             "records it anew (SWEEP: the sweep file or preset that wrote the store)") from None

    @cached_property
    def record(self) -> StoreRecord | None:
        """store.json: dtype, package version, sweep history."""
        return read_store_record(self.location)

    @cached_property
    def confirmation(self) -> ConfirmationRecord | None:
        """confirmation.json: the confirmation stage's selected configurations and fresh seeds (None: no
        stage); RecordError naming the file if it is damaged."""
        return read_record(self.location, CONFIRMATION_FILE, ConfirmationRecord)

    @cached_property
    def race(self) -> RaceRecord | None:
        """race.json: the decisions of a raced sweep so far (None: the sweep is not raced, or no round is
        decided yet); RecordError naming the file if it is damaged."""
        return read_race(self.location, self.sweep)

    def status(self) -> SweepStatus | None:
        """status.json as it is now (the driver rewrites it every second: never kept)."""
        return read_status(self.location)

    def committed_packs(self) -> int:
        """How many pack writes are committed (manifests listed, not read)."""
        return len(self.manifests) if "manifests" in self.__dict__ else len(manifest_entries(self.location))

    def has_results(self) -> bool:
        """Whether any pack is committed, now (listed afresh: the driver asks before and under the lock)."""
        return bool(manifest_entries(self.location))

    def stage_manifests(self, stage: str = TUNING) -> list[Manifest]:
        """The committed pack writes of one stage, oldest first."""
        return [m for m in self.manifests if m.run_stage == stage]

    def finished_runs(self, stage: str = TUNING) -> set[tuple[str, int]]:
        """(config_id, seed) of every committed run of `stage`, inside the recorded sweep or not."""
        return runs_of(self.stage_manifests(stage))

    def pack_written(self, pack: Pack) -> bool:
        """Whether every run of `pack` is committed (by this pack or others of its stage)."""
        return set(pack.pairs()) <= self.finished_runs(pack.stage)

    def wanted(self, stage: str = TUNING) -> frozenset[tuple[str, int]] | None:
        """The pairs readers of `stage` read: the recorded sweep's (tuning; None: no sweep recorded,
        all) or confirmation.json's (confirmation; none when no stage is recorded)."""
        if stage == TUNING:
            return wanted_pairs(self.sweep, lambda: self.race, self.finished_runs)  # a race: what it asks for so far
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
                log.warning("%d stored runs are not in the current sweep; ignored", chosen.outside)
        return self._selections[all_runs, stage]

    def scan(self, kind: Kind, *, all_runs: bool = False, stage: str = TUNING) -> pl.LazyFrame:
        """The committed rows of `kind` and `stage` (tuning: the grid; confirmation: the selected configurations
        on fresh seeds): one per (config, seed) for scores, per (config, seed, bin) for curves; task and
        optimizer (the hive partitions) first. FileNotFoundError when there are none."""
        from sweeps.store.dataset import scan_selection  # polars: with the first frame

        damaged = {f.manifest for f in self.damaged_files if f.kind == kind}
        frame = scan_selection(self.location, self.selection(all_runs, stage).without(damaged), kind)
        if frame is None:
            hint = "run a sweep first (`fade-sweep run ...`)" if stage == TUNING else "run `fade-sweep confirm` first"
            raise FileNotFoundError(f"no {stage} {kind} in {self.location}: {hint}")
        return frame

    def expected_runs(self, stage: str = TUNING) -> pl.DataFrame:
        """The key columns (as in scores/) and steps of every run of `stage` the store asks for: the recorded
        sweep's grid on its seeds, or confirmation.json's configurations (cells of that grid) on its seeds."""
        if stage not in self._expected:
            from sweeps.store.dataset import expected_runs, without_runs

            record = self.confirmation if stage == CONFIRMATION else None
            sweep = None if stage == CONFIRMATION and record is None else self.sweep
            configs = None if record is None else {row.config_id for row in record.selected}
            expected = expected_runs(sweep, stage, configs, None if record is None else record.seeds)
            if stage == TUNING and sweep is not None and sweep.race is not None:
                expected = without_runs(expected, set(sweep.pairs - self.wanted(stage)))  # an eliminated cell's unrun seeds
            self._expected[stage] = expected
        return self._expected[stage]

    def missing_runs(self, stage: str = TUNING) -> pl.DataFrame:
        """Runs of `stage` with no committed result (columns of `expected_runs`); empty when nothing is
        missing or no sweep (or confirmation stage) is recorded. Reads the manifests only."""
        from sweeps.store.dataset import without_runs

        done = self.finished_runs(stage) - self.left_out_runs(stage)
        wanted = self.wanted(stage)
        expected = self.expected_runs(stage)
        return expected.clear() if wanted is None or wanted <= done else without_runs(expected, done)

    def left_out_runs(self, stage: str = TUNING) -> set[tuple[str, int]]:
        """(config_id, seed) of the runs of `stage` read from a damaged scores file: left out, counted missing."""
        damaged = {f.manifest for f in self.damaged_files if f.kind == "scores"}
        return self.selection(all_runs=True, stage=stage).pairs_from(damaged) if damaged else set()

    def left_out_files(self, stage: str = TUNING) -> list[str]:
        """The damaged scores files of `left_out_runs`, as users see them; `resume_command()` repairs them."""
        names, url = {m.name for m in self._current(stage)}, self.location.absolute().url
        return [url(f.path) for f in self.damaged_files if f.kind == "scores" and f.manifest in names]

    def committed_files(self, kind: Kind = "scores") -> list[str]:
        """The data files of `kind` an outside reader should read (local paths or URIs): those of the
        manifests that still commit a run of their stage. A pack written again supersedes its older copy,
        which is left out; a file only partly superseded is listed, and its older rows are the
        duplicates `verify` names."""
        current = [m for stage in STAGES for m in self._current(stage)]
        paths = sorted(current, key=lambda m: m.order)
        return [self.location.absolute().url(m.files[kind].path) for m in paths]

    def _current(self, stage: str) -> list[Manifest]:
        chosen = self.selection(all_runs=True, stage=stage)
        return [*chosen.whole, *(m for m, _ in chosen.partial)]

    # ------------------------------------------------------------ the writer's side

    def refuse_if_locked(self) -> None:
        """StorageError if the store cannot be reached, StoreLocked if a live process holds the writer lock: a
        cheap check before anything slow (`fade-sweep confirm` before Ray loads, `submit` before the job)."""
        self.location.check()
        self.location.writer_lock().refuse_if_held()

    @contextmanager
    def writing(self, sweep: Sweep | None = None, dtype: str = "float32", resume: bool = False) -> Iterator[Store]:
        """The lock stage of a run (`SweepWriter`): `refuse_if_locked`, then the writer lock held for the block
        (a storage that cannot be written is refused as it is taken) and, `sweep` given, `check_run` under it.
        What this Store read before is read again under the lock."""
        self.refuse_if_locked()
        with self.location.writer_lock() as lock:
            self._forget()
            self.writer = lock.owner
            try:
                if sweep is not None:
                    self.check_run(sweep, dtype, resume)
                yield self
            finally:
                self.writer = None

    def record_sweep(self, sweep: Sweep, dtype: str) -> list[str]:
        """Make `sweep` the recorded sweep (sweep_record.check_and_record, under the lock); returns notices."""
        notices = check_and_record(self.location, sweep, dtype)
        self._forget()
        return notices

    def record_confirmation(self, record: ConfirmationRecord) -> None:
        """Record the confirmation stage (under the lock), before any of its runs is written."""
        write_record(self.location, CONFIRMATION_FILE, record, durable=True)
        self._forget()

    def record_race(self, record: RaceRecord) -> None:
        """Record a race's decisions so far (under the lock), after each round."""
        write_record(self.location, RACE_FILE, record, durable=True)
        self.__dict__.pop("race", None)
        self._selections.clear()
        self._expected.clear()

    def tidy(self) -> tuple[list[str], list[str]]:
        """Under the lock: set aside the damaged manifests and the packs with a missing or damaged file (their
        runs are planned again), then delete the orphans. Returns (damaged files, removed orphans as users see them)."""
        self._forget()  # what other processes (the trials) committed since this Store last read
        damaged = committed.set_aside_unreadable(self.location, self.damaged_manifests)
        damaged += committed.set_aside_damaged(self.location, self.manifests)
        if damaged:
            self._forget()
        removed = committed.remove_orphans(self.location, self.manifests)
        # Read again: a worker of a killed writer that checked the lock just before this writer took
        # it may have committed meanwhile, naming files just removed. Set that pack aside too.
        self._forget()
        late = committed.set_aside_damaged(self.location, self.manifests)
        if late:
            self._forget()
        return damaged + late, removed

    def write_pack(self, pack: Pack, outcome: PackOutcome, writer: str | None = None) -> Manifest:
        """Commit a finished pack (commit.write_pack: only while writer.lock names `writer`, the
        driver's `Store.writer`, when given); this Store counts it from now on."""
        from sweeps.store.commit import write_pack  # pyarrow: only a writer loads it

        manifest = write_pack(self.location, pack, outcome, writer)
        if "manifests" in self.__dict__:
            self.manifests.append(manifest)
            self._selections.clear()
        return manifest

    def orphans(self) -> list[str]:
        """Files under scores/, curves/ and manifests/ that no manifest commits (relative paths)."""
        return committed.orphans(self.location, self.manifests)

    def verify(self) -> Verification:
        """The integrity check of `fade-sweep verify` (NotAStore if this is no store)."""
        from sweeps.store.verify import verify_store

        return verify_store(self.location)
