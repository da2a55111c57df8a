"""`fade-sweep verify RESULTS_DIR`: an integrity check of a results store.

Checks the records (store.json, sweep.yaml), every manifest (readable; its files present,
of the recorded size and sha256, readable Parquet with the recorded row count, the
expected columns and types, exactly the manifest's (config, seed) pairs), duplicates (a
(config, seed) held by two manifests or twice in one file), orphans (files no manifest
names) and the runs of the current sweep that have no result (of a raced sweep: the runs its race
asks for so far, store/race.py). `verify_store` returns a
`Verification`, the problems found (one line each) and the counts; the command line writes
it out (sweeps.cli.text.format_verification).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from fade_core.hyperparameters import HYPERPARAMETERS
from sweeps.plan import TUNING
from sweeps.spec import SweepError
from sweeps.store.location import StoreLocation
from sweeps.store.manifests import MANIFESTS, damage, manifest_entries, orphans, parse_manifest
from sweeps.store.race import raced_pairs, read_race
from sweeps.store.sweep_record import STORE_RECORD, SWEEP_RECORD, read_store_record, recorded_sweep
from sweeps.store.records import (
    CONFIRMATION_FILE,
    KINDS,
    PARTITIONS,
    ConfirmationRecord,
    Manifest,
    RecordError,
    read_record,
)
from sweeps.store.status import read_status

SCORES, CURVES = KINDS
KEY_TYPES = {"config_id": pa.string(), "seed": pa.int64()}
EXPECTED_TYPES = {
    SCORES: {**KEY_TYPES, "score": pa.float64(), "diverged": pa.bool_(), "steps": pa.int64(),
             "wall_seconds": pa.float64(), **{h: pa.float64() for h in HYPERPARAMETERS}},
    CURVES: {**KEY_TYPES, "step": pa.int64(), **{h: pa.float64() for h in HYPERPARAMETERS}},
}


_RERUN = "`fade-sweep run ... --resume` sets its pack aside and runs it again"


class NotAStore(ValueError):
    """The folder holds no results store."""


@dataclass
class Verification:
    """What `verify_store` found: each problem as (kind, line), notes, and what the store holds."""

    location: StoreLocation
    problems: list[tuple[str, str]] = field(default_factory=list)  # (kind, line)
    notes: list[str] = field(default_factory=list)
    packs: int = 0
    runs: int = 0  # distinct (config, seed) pairs stored
    files: int = 0  # data files checked
    missing: int = 0

    @property
    def clean(self) -> bool:
        return not self.problems

    def add(self, kind: str, line: str) -> None:
        self.problems.append((kind, line))


def _check_file(v: Verification, location: StoreLocation, m: Manifest, kind: str, own: tuple[str, ...] = ()) -> None:
    """One data file of manifest `m`; `own`: the hyperparameter columns of its optimizer's own (a
    researcher's learner, as store.json records it), Float64 like the built-in ones."""
    entry = m.files[kind]
    rel = entry.path
    where = f"{MANIFESTS}/{m.name}"
    if not location.is_file(rel):
        v.add("missing file", f"{rel}: missing (named by {where}; {_RERUN})")
        return
    v.files += 1
    expected_partition = f"{kind}/task={m.task}/optimizer={m.optimizer}/"
    if not rel.startswith(expected_partition):
        v.add("misplaced", f"{rel}: not under {expected_partition} as {where} says (task {m.task}, optimizer {m.optimizer})")
    size = location.size(rel)
    if size != entry.bytes:
        v.add("size mismatch", f"{rel}: {size} bytes, {where} says {entry.bytes} (changed or truncated; {_RERUN})")
    elif location.sha256(rel) != entry.sha256:
        v.add("hash mismatch", f"{rel}: sha256 differs from {where} (the file changed after it was committed, keeping "
                               f"its size, which `--resume` does not check: move {where} into history/ and "
                               "`fade-sweep run ... --resume` runs its pack again)")
    try:
        with location.open_input(rel) as source:
            parquet = pq.ParquetFile(source)
            schema = parquet.schema_arrow
            keys = parquet.read(columns=[c for c in ("config_id", "seed") if c in schema.names])
    except Exception as err:  # noqa: BLE001 - pyarrow raises several types for damaged files
        v.add("corrupt", f"{rel}: corrupt or truncated Parquet file ({type(err).__name__}: {err})")
        return
    if parquet.metadata.num_rows != entry.rows:
        v.add("row count", f"{rel}: {parquet.metadata.num_rows} rows, {where} says {entry.rows}")
    inside = [c for c in PARTITIONS if c in schema.names]
    if inside:
        v.add("schema", f"{rel}: stores the partition column(s) {', '.join(inside)} inside (they belong in the path)")
    for name, dtype in {**EXPECTED_TYPES[kind], **dict.fromkeys(own, pa.float64())}.items():
        if name not in schema.names:
            v.add("schema", f"{rel}: column {name} missing")
        elif schema.field(name).type != dtype:
            v.add("schema", f"{rel}: column {name} is {schema.field(name).type}, expected {dtype}")
    if "config_id" not in keys.column_names or "seed" not in keys.column_names:
        return
    counts = Counter(zip(keys["config_id"].to_pylist(), keys["seed"].to_pylist()))
    pairs = set(m.pairs())
    if set(counts) != pairs:
        extra, lacking = len(set(counts) - pairs), len(pairs - set(counts))
        v.add("content", f"{rel}: holds {extra} runs {where} does not list and lacks {lacking} it lists")
    if kind == SCORES:
        twice = [pair for pair, n in counts.items() if n > 1]
        if twice:
            config_id, seed = twice[0]
            v.add("duplicate", f"{rel}: {len(twice)} runs appear more than once (e.g. config {config_id} seed {seed})")
    elif len(set(counts.values())) > 1:
        v.add("content", f"{rel}: runs have different numbers of curve bins")


def verify_store(location: StoreLocation) -> Verification:
    """Check a store; NotAStore if `location` is not one."""
    location.check()
    if not any(location.exists(p) for p in (MANIFESTS, SCORES, CURVES, SWEEP_RECORD, STORE_RECORD)):
        raise NotAStore(
            f"{location}: not a results store (no {MANIFESTS}/, {SCORES}/ or {SWEEP_RECORD}); give STORAGE/<sweep name>"
        )
    v = Verification(location)
    record = None
    try:
        record = read_store_record(location)
        if record is None:
            v.add("record", f"{STORE_RECORD}: missing (the store does not record its dtype and package version)")
    except RecordError as err:
        v.add("record", f"{err} (`fade-sweep run ... --resume` sets it aside and writes it anew)")
    try:
        read_status(location)
    except RecordError as err:
        v.add("record", f"{err} (`fade-sweep run ... --resume` sets it aside; a run that runs packs writes it)")
    sweep = None
    try:
        sweep = recorded_sweep(location, record)
        if sweep is None:
            v.add("record", f"{SWEEP_RECORD}: missing (the store does not record its sweep; missing runs cannot be checked)")
    except SweepError as err:
        v.add("record", f"{SWEEP_RECORD}: not a valid sweep ({err})")

    manifests = []
    for entry in manifest_entries(location):
        try:
            manifests.append(parse_manifest(location, entry))
        except RecordError as err:
            v.add("damaged manifest", f"{err}; it commits nothing, its runs count as missing "
                                      "(`fade-sweep run ... --resume` sets it aside and runs them again)")
    manifests.sort(key=lambda m: m.order)
    v.packs = len(manifests)
    own = {d.name: tuple(h.name for h in d.own) for d in (sweep.learners if sweep is not None else ())}
    for m in manifests:
        for kind in KINDS:
            _check_file(v, location, m, kind, own.get(m.optimizer, ()))

    holders: dict[tuple[str, int], list[Manifest]] = defaultdict(list)  # tuning runs
    confirming: dict[tuple[str, int], list[Manifest]] = defaultdict(list)
    for m in manifests:
        for pair in m.pairs():
            (holders if m.run_stage == TUNING else confirming)[pair].append(m)
    v.runs = len(holders) + len(confirming)
    shared: dict[tuple[str, ...], list[tuple[str, int]]] = defaultdict(list)
    for pair, ms in [*holders.items(), *confirming.items()]:  # a duplicate is a pair held twice in one stage
        if len(ms) > 1:
            shared[tuple(m.name for m in ms)].append(pair)
    for names, pairs in shared.items():
        config_id, seed = pairs[0]
        v.add(
            "duplicate",
            f"{len(pairs)} runs (e.g. config {config_id} seed {seed}) are held by {len(names)} manifests: "
            f"{', '.join(f'{MANIFESTS}/{n}' for n in names)}; reads use the newest, {MANIFESTS}/{names[-1]}",
        )

    for rel in orphans(location, manifests):
        v.add("orphan", f"{rel}: orphan (no manifest names it; `fade-sweep run --resume` removes it)")

    if sweep is not None:
        outside = sum(1 for pair in holders if pair not in sweep.pairs)
        if outside:
            v.notes.append(f"{outside} stored runs are not in the current sweep; ignored")
        asked = _asked(v, location, sweep)
        unread = {m.name for m in manifests if damage(location, m, SCORES)}  # readers leave its runs out, as missing
        held = {pair for pair, ms in holders.items() if ms[-1].name not in unread}  # the newest holder is the one read
        lacking: Counter = Counter()
        for e in sweep.experiments:
            lacking[(e.task, e.optimizer)] += sum((c.config_id, s) not in held and (asked is None or (c.config_id, s) in asked)
                                                  for c in e.cells for s in sweep.seeds)
        v.missing = sum(lacking.values())
        for (task, optimizer), n in sorted(lacking.items()):
            if n:
                v.add("missing runs", f"{task}/{optimizer}: {n} runs of the current sweep have no result "
                                      "(`fade-sweep run ... --resume` runs them)")
    _check_confirmation(v, location, confirming)
    return v


def _asked(v: Verification, location: StoreLocation, sweep) -> frozenset[tuple[str, int]] | None:
    """The runs a raced sweep asks for so far (race.py; an eliminated configuration's unrun seeds are not
    missing), None for a sweep that is not raced; a damaged race.json is a problem."""
    if sweep.race is None:
        return None
    try:
        return raced_pairs(sweep, read_race(location, sweep))
    except RecordError as err:
        v.add("record", f"{err} (readers replay the race from the stored scores; `fade-sweep run ... --race --resume` "
                        "records it anew)")
        return raced_pairs(sweep, None)


def _check_confirmation(v: Verification, location: StoreLocation, confirming: dict) -> None:
    """The confirmation stage: its record readable, and each of its runs stored (counted as missing)."""
    try:
        record = read_record(location, CONFIRMATION_FILE, ConfirmationRecord)
    except RecordError as err:
        v.add("record", str(err))
        return
    if record is None:
        if confirming:
            v.notes.append(f"{len(confirming)} stored confirmation runs but no {CONFIRMATION_FILE}; ignored")
        return
    lacking = Counter(row.optimizer for row in record.selected for s in record.seeds if (row.config_id, s) not in confirming)
    v.missing += sum(lacking.values())
    for optimizer, n in sorted(lacking.items()):
        v.add("missing runs", f"confirmation/{optimizer}: {n} confirmation runs have no result "
                              "(`fade-sweep confirm` runs them)")
