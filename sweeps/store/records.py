"""The store's small JSON records as validated models, each read and written in ONE place.

    manifests/<name>.json   Manifest: one committed pack write (manifests.py has the commit rule)
    store.json              StoreRecord: format, dtype, package version, sweep history (record.py)
    writer.lock             LockHolder: who writes the store (lock.py; lease.py on object stores)
    status.json             SweepStatus: the driver's live status (status.py)
    confirmation.json       ConfirmationRecord: what the confirmation stage runs (Store.record_confirmation)
    race.json               RaceRecord: a raced sweep's rounds and their decisions (Store.record_race)
    tune-*/packs.json       PacksRecord: what a Tune experiment's pack ids mean (written and read by the
                            driver: write_record(location, f"{experiment}/{PACKS_FILE}", record))
    tune-*/.../pack.json    CheckpointRecord: which pack a checkpoint folder holds and how far it got
                            (written by the trainable beside the tensors, read by a resuming driver)

`read_record` and `write_record` are the only code that turns these files into objects and
back (`parse_record` and `record_json` where the bytes come from elsewhere: the lock file's
descriptor, the lease's conditional request). A record that is not valid JSON or does not fit its model is a `RecordError` naming
the file and the first field at fault; nothing executable is ever read (plain JSON only).
"""

from __future__ import annotations

import functools
import os
import socket
from dataclasses import field
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic.dataclasses import dataclass

from sweeps.store.uris import Files

STATUS_FILE = "status.json"
CONFIRMATION_FILE = "confirmation.json"
RACE_FILE = "race.json"
PACKS_FILE = "packs.json"  # inside each Tune experiment folder (tune-*/)
MANIFEST_FORMAT = 1
STORE_FORMAT = 1
PACKS_FORMAT = 1
CONFIRMATION_FORMAT = 1
RACE_FORMAT = 1
KINDS = ("scores", "curves")  # the two data files of a pack
PARTITIONS = ("task", "optimizer")  # hive partitions of the data files: in the path, never inside a file


class RecordError(RuntimeError):
    """A record that cannot be read as what it should be; the message names the file."""


class _Record(BaseModel):
    """Unknown keys are kept (a newer writer may add some) and written back unchanged."""

    model_config = ConfigDict(extra="allow")


class DataFile(BaseModel):
    """One data file of a pack, as its manifest records it."""

    path: str
    rows: int
    bytes: int
    sha256: str


class Manifest(_Record):
    """One committed pack write: its runs (every config x every seed) and its two data files."""

    format: Literal[1] = MANIFEST_FORMAT
    pack_id: str
    write_id: str
    written_at: float
    task: str
    optimizer: str
    configs: tuple[str, ...]
    seeds: tuple[int, ...]
    files: dict[Literal["scores", "curves"], DataFile]
    stage: Literal["tuning", "confirmation"] | None = None  # None: written before stages (tuning; no stage column)
    engine: str | None = None  # the fade_core.engines name that computed the rows (None: written before engines were recorded)
    name: str = Field("", exclude=True)  # its file name under manifests/ (not stored in it)

    @field_validator("files")
    @classmethod
    def _both_kinds_in_place(cls, files: dict[str, DataFile]) -> dict[str, DataFile]:
        for kind in KINDS:
            if kind not in files:
                raise ValueError(f"no {kind} file")
            path = files[kind].path
            if not path.startswith(f"{kind}/") or ".." in path:
                raise ValueError(f"{kind} path {path!r} is not under {kind}/")
        return files

    @property
    def run_stage(self) -> str:
        return self.stage or "tuning"

    @property
    def order(self) -> tuple[float, str]:
        """Newer manifests sort later; ties broken by write id (deterministic)."""
        return (self.written_at, self.write_id)

    def pairs(self) -> list[tuple[str, int]]:
        return [(c, s) for c in self.configs for s in self.seeds]


class StoreRecord(_Record):
    """store.json: what the store holds runs of, and the sweep records it kept."""

    format: int = STORE_FORMAT
    dtype: str
    package_version: str
    created_at: float
    created_by_version: str = "unknown"
    updated_at: float
    sweep_sha256: str = ""
    history: list[str] = []
    learners: list[dict[str, Any]] = []  # the sweep's own learners as data (sweeps.spec.own.DeclaredLearner.to_record)
    # task -> the version of its stream the store's runs were drawn from (tasks.TaskSpec.stream_version);
    # a task not named (every store written before versions were recorded): version 1
    stream_versions: dict[str, int] = {}

    def stream_version(self, task: str) -> int:
        return self.stream_versions.get(task, 1)


class LockHolder(_Record):
    """writer.lock's body: the writing process and its owner token; on object stores also the lease's expiry."""

    pid: int | None = None
    host: str | None = None
    started_at: float | None = None
    started: str | None = None
    command: str = ""
    owner: str | None = None
    lease_seconds: float | None = None
    renewed_at: float | None = None
    expires_at: float | None = None


@dataclass
class TrialStatus:
    """One pack's trial as status.json shows it."""

    pack_id: str
    state: str  # pending | running | done | failed
    run_steps_done: int = 0
    run_steps_total: int = 0
    node_id: str | None = None
    pid: int | None = None
    restored_from_step: int = 0  # > 0 when the trial continued from a checkpoint
    restored_run_steps: int = 0  # the run-steps that checkpoint held: done by an earlier run, not this one


@dataclass
class SweepStatus:
    """status.json: the driver's live view of a sweep (trials are a list there, by pack id here).
    A plain (validated) dataclass: the driver's progress callback updates it in place."""

    sweep: str
    state: str  # running | finished | failed | interrupted
    started_at: float
    updated_at: float  # the heartbeat
    run_steps_total: int
    trials: dict[str, TrialStatus] = field(default_factory=dict)
    driver_pid: int | None = field(default_factory=os.getpid)
    host: str | None = field(default_factory=socket.gethostname)
    run_steps_at_start: int = 0  # of packs finished by earlier runs of the sweep (not part of this run's rate)
    # a race: each method's round under way (its last once finished), the methods finished, the most rounds
    rounds: dict[str, int] = field(default_factory=dict)
    rounds_finished: list[str] = field(default_factory=list)
    rounds_most: int = 0

    @model_validator(mode="before")
    @classmethod
    def _older_file_names_no_driver(cls, data: Any) -> Any:
        """A status.json written before driver_pid / host existed names no driver (not the reader)."""
        if isinstance(data, dict):
            data = {"driver_pid": None, "host": None, **data}
        return data

    @field_validator("trials", mode="before")
    @classmethod
    def _by_pack_id(cls, trials: Any) -> Any:
        return {t["pack_id"]: t for t in trials} if isinstance(trials, list) else trials

    @field_serializer("trials")
    def _as_list(self, trials: dict[str, TrialStatus]) -> list[TrialStatus]:
        return list(trials.values())

    @property
    def run_steps_done(self) -> int:
        return sum(t.run_steps_done for t in self.trials.values())

    def count(self, state: str) -> int:
        return sum(t.state == state for t in self.trials.values())

    @property
    def run_steps_this_run(self) -> int:
        """The run-steps this run of the sweep did: not those of packs earlier runs finished, nor those a
        checkpoint restored (a resumed pack continues where it stopped)."""
        restored = sum(t.restored_run_steps for t in self.trials.values())
        return max(0, self.run_steps_done - self.run_steps_at_start - restored)

    @property
    def rate(self) -> float:
        """Run-steps per second of this run (`run_steps_this_run`) since it started."""
        elapsed = self.updated_at - self.started_at
        return self.run_steps_this_run / elapsed if elapsed > 0 else 0.0

    @property
    def nodes(self) -> set[str]:
        return {t.node_id for t in self.trials.values() if t.node_id}

    def write(self, location: Files) -> None:
        write_record(location, STATUS_FILE, self)


class CheckpointRecord(_Record):
    """pack.json of a checkpoint folder (packs.checkpoint_files.CHECKPOINT_META), beside its tensors: the
    pack, its progress and dtype, so a resume finds each pack's newest checkpoint from the files alone
    (no Tune state, no pickle)."""

    pack_id: str
    steps_done: int
    total_steps: int
    dtype: str


class PackConfig(_Record):
    config_id: str
    hyperparameters: dict[str, float] = {}


class PackEntry(_Record):
    """One pack of packs.json: its configs and seeds (`experiment` is informative only: a resume
    rebuilds every pack from the current sweep)."""

    experiment: dict[str, Any] = {}
    stage: Literal["tuning", "confirmation"] = "tuning"  # absent in records written before stages: tuning
    configs: list[PackConfig]
    seeds: list[int]


class PacksRecord(_Record):
    """tune-*/packs.json: the packs a Tune experiment ran, by pack id; a resume rebuilds each from
    the current sweep and keeps it only if the rebuilt pack has the recorded id."""

    format: int = PACKS_FORMAT
    sweep: str
    packs: dict[str, PackEntry]


class SelectedConfig(_Record):
    """One configuration the confirmation stage runs, as the tuning scores name it: optimizer and
    config id, and (kept as extra keys) its setting columns and hyperparameters (null where the
    optimizer takes none)."""

    optimizer: str
    config_id: str


class ConfirmationRecord(_Record):
    """confirmation.json: the confirmation stage, which re-runs each method's configuration selected
    by `stat` on `tuning_seeds` (`selected`, one per setting and method) on the fresh `seeds`.

    A store holds two stages of runs (sweeps.plan.STAGES): the sweep's grid on its seeds (tuning)
    and this one. Every manifest names its stage and readers ask for one, so the tuning tables
    never see a confirmation row. The record only selects: the driver rebuilds each
    configuration from the recorded sweep by its id."""

    format: Literal[1] = CONFIRMATION_FORMAT
    stat: str
    seeds: tuple[int, ...]
    tuning_seeds: tuple[int, ...]
    selected: tuple[SelectedConfig, ...]

    def pairs(self) -> frozenset[tuple[str, int]]:
        """The (config_id, seed) runs of the stage."""
        return frozenset((row.config_id, s) for row in self.selected for s in self.seeds)


class RaceDecision(_Record):
    """One configuration's decision after one round of a race (sweeps.analysis.race.DECISION_SCHEMA):
    still in the race, or out, why, against which best, with the paired test's numbers (null where no
    test was made: the best itself, a diverged configuration)."""

    round: int
    config_id: str
    optimizer: str
    race_status: Literal["survivor", "eliminated"]
    reason: str | None = None
    best: str | None = None
    difference: float | None = None  # mean paired difference to the best, positive: worse (score units)
    p_value: float | None = None
    p_adjusted: float | None = None  # Holm
    seeds: int  # the seeds the decision was made on (the first `seeds` of the race's seeds)


class RaceMethod(_Record):
    """Where one method (an experiment: task, settings, optimizer) of a race stands: methods race
    independently, each round of a method starting once its previous round is in."""

    method: str  # the experiment's label (sweeps.spec.Experiment.label)
    rounds: int  # rounds decided
    finished: bool


class RaceRecord(_Record):
    """race.json: a raced sweep's decisions so far, round by round (written after each round, under the
    writer lock). Why a cell holds 3 seeds and another 10: its last decision says when it stopped getting
    seeds, and why. The decisions are a deterministic function of the stored scores and the settings
    recorded here, so a resumed race writes the same record."""

    format: Literal[1] = RACE_FORMAT
    test: str
    alpha: float
    schedule: tuple[int, ...]  # seeds held after each round (cumulative), before any re-played last round
    seeds: tuple[int, ...]  # the race's seeds, in the order they are given out
    decisions: tuple[RaceDecision, ...] = ()
    finished: bool = False
    methods: tuple[RaceMethod, ...] = ()  # absent in records written before methods raced apart: read from decisions

    def held(self) -> dict[str, int]:
        """config id -> the seeds it holds (the first n of `seeds`) after the recorded rounds."""
        held: dict[str, int] = {}
        for d in self.decisions:
            held[d.config_id] = max(held.get(d.config_id, 0), d.seeds)
        return held

    def eliminated(self) -> dict[str, int]:
        """config id -> the round of the decision that keeps it out, for every configuration out of the race."""
        last: dict[str, RaceDecision] = {}
        for d in sorted(self.decisions, key=lambda d: d.round):
            last[d.config_id] = d
        return {c: d.round for c, d in last.items() if d.race_status == "eliminated"}


Model = TypeVar("Model")


@functools.cache
def _adapter(model: type) -> TypeAdapter:
    return TypeAdapter(model)


def parse_record(model: type[Model], raw: bytes, where: str) -> Model:
    """`raw` as a `model`; RecordError naming `where` and what is wrong."""
    try:
        return _adapter(model).validate_json(raw)
    except ValidationError as err:
        first = err.errors()[0]
        field_name = ".".join(str(p) for p in first["loc"]) or "the document"
        reason = "not valid JSON" if first["type"] == "json_invalid" else f"{field_name}: {first['msg']}"
        raise RecordError(f"{where}: damaged {model.__name__} record ({reason})") from None


def record_json(record: Any) -> bytes:
    """`record` as the JSON its file holds."""
    return _adapter(type(record)).dump_json(record, indent=1)


def read_record(location: Files, rel: str, model: type[Model]) -> Model | None:
    """The record `rel` under `location` (None if absent); RecordError if it is damaged."""
    try:
        raw = location.read_bytes(rel)
    except FileNotFoundError:
        return None
    return parse_record(model, raw, location.url(rel))


def write_record(location: Files, rel: str, record: Any, *, durable: bool = False) -> None:
    """Write `record` as `rel` atomically (readers see the old or the new one, never a part)."""
    location.write_bytes(rel, record_json(record), durable=durable)
