"""The results store as a small database: every Arrow reader agrees, a manifest commits a pack,
one writer at a time, the recorded sweep is the truth, tables say what is missing, verify."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml

from sweeps.analysis import kinds, queries, summaries
from sweeps.cli import main
from sweeps.packs import PackOutcome
from sweeps.analysis.queries import Analysis
from sweeps.store import Store, StoreLocation, commit, manifests
from sweeps.store import store as store_module
from sweeps.store.holder import LOCK_FILE, StoreLocked, WriterLock
from sweeps.store.lock import FileLock
from sweeps.store.sweep_record import check_and_record
from sweeps.plan import Pack
from sweeps.spec import SweepError, make_config, parse_sweep

ROOT = Path(__file__).resolve().parents[1]
SEEDS = 3
SWEEP = {
    "name": "db",
    "task": "linear_tracking",
    "task_settings": {"steps": 4, "bin": 2},
    "seeds": SEEDS,
    "optimizers": {
        "sgd": {"alpha": [0.1, 0.01]},
        "fade": {"alpha": 0.1, "theta_lambda": [0.0, 0.5], "gamma0": [-1.0, -2.0]},
    },
}


def _outcome(pack: Pack, offset: float = 0.0) -> PackOutcome:
    score = np.arange(pack.runs, dtype=float) + offset
    decays = pack.experiment.optimizer == "fade"
    curves = {"mse": np.stack([score, score]).T, "decay_relevant": np.full((pack.runs, 2), 0.1) if decays else None,
              "decay_irrelevant": np.full((pack.runs, 2), 0.2) if decays else None,
              "step_size_relevant": None, "step_size_irrelevant": None}
    return PackOutcome(score, np.zeros(pack.runs, bool), np.array([2, 4]), curves, 1.0)


def _packs(document: dict = SWEEP, optimizers: tuple[str, ...] | None = None) -> list[Pack]:
    """One pack per optimizer (all its configs x all seeds)."""
    sweep = parse_sweep(document, "test")
    return [
        Pack(e, tuple(make_config(e, v) for v in e.configs()), sweep.seeds)
        for e in sweep.experiments
        if optimizers is None or e.optimizer in optimizers
    ]


def _build(results_dir: Path, document: dict = SWEEP, optimizers: tuple[str, ...] | None = None, dtype="float32") -> Path:
    check_and_record(StoreLocation.parse(results_dir), parse_sweep(document, "test"), dtype)
    store = Store.open(results_dir)
    for pack in _packs(document, optimizers):
        store.write_pack(pack, _outcome(pack))
    return results_dir


RUNS = (2 + 4) * SEEDS  # sgd: 2 configs, fade: 4 configs


@pytest.fixture
def full(tmp_path) -> Path:
    return _build(tmp_path / "db")


# ---------------------------------------------------------------- every Arrow reader


def test_files_hold_no_partition_columns(full):
    import pyarrow.parquet as pq

    files = list((full / "scores").rglob("*.parquet")) + list((full / "curves").rglob("*.parquet"))
    assert len(files) == 4
    for path in files:
        names = pq.ParquetFile(path).schema_arrow.names
        assert "task" not in names and "optimizer" not in names and "config_id" in names


@pytest.mark.parametrize("kind", ["scores", "curves"])
def test_every_arrow_reader_agrees(full, kind):
    import duckdb
    import pandas as pd
    import pyarrow.dataset as ds

    rows = RUNS if kind == "scores" else RUNS * 2
    arrow = ds.dataset(full / kind, format="parquet", partitioning="hive").to_table()
    frame = pd.read_parquet(full / kind)
    duck = duckdb.sql(f"select * from read_parquet('{full / kind}/**/*.parquet', hive_partitioning=true)").arrow()
    if not isinstance(duck, type(arrow)):  # duckdb >= 1.4 returns a reader
        duck = duck.read_all()
    polars_dir = pl.scan_parquet(full / kind).collect()
    polars_glob = pl.scan_parquet(f"{full / kind}/**/*.parquet", hive_partitioning=True).collect()
    ours = Store.open(full).scan(kind).collect()
    for name, height in [("pyarrow", arrow.num_rows), ("pandas", len(frame)), ("duckdb", duck.num_rows),
                         ("polars dir", polars_dir.height), ("polars glob", polars_glob.height), ("Store", ours.height)]:
        assert height == rows, name
    # the same columns with the same types everywhere (pandas: partitions as categoricals of the same values)
    reference = pl.from_arrow(arrow).select(sorted(arrow.column_names))
    for name, other in [("duckdb", pl.from_arrow(duck)), ("polars dir", polars_dir), ("polars glob", polars_glob), ("results", ours)]:
        other = other.select(sorted(other.columns))
        assert other.schema == reference.schema, name
        assert other.sort("config_id", "seed", *(["step"] if kind == "curves" else [])).equals(
            reference.sort("config_id", "seed", *(["step"] if kind == "curves" else []))), name
    assert sorted(frame.columns) == sorted(arrow.column_names)
    assert sorted(frame["optimizer"].astype(str).unique()) == ["fade", "sgd"]
    assert set(frame["task"].astype(str)) == {"linear_tracking"}
    assert str(frame["seed"].dtype) == "int64" and str(frame["config_id"].dtype) in ("object", "string", "str")
    assert str(frame["alpha"].dtype) == "float64"


def test_public_query_api(full):
    frame = Store.open(full).scan("scores").collect()
    assert frame.columns[:3] == ["task", "optimizer", "config_id"]
    assert frame.height == RUNS and frame.select("config_id", "seed").n_unique() == RUNS
    assert queries.cells(Store.open(full).scan("scores"))["seeds"].to_list() == [SEEDS] * 6
    assert set(summaries.best_table(Analysis.of(Store.open(full), "mean"))["optimizer"]) == {"sgd", "fade"}
    assert Store.open(full).missing_runs().height == 0
    assert len(Store.open(full).manifests) == 2


# ---------------------------------------------------------------- the commit protocol


def test_a_pack_is_visible_only_once_its_manifest_is_written(tmp_path, monkeypatch):
    results_dir = _build(tmp_path / "db", optimizers=("sgd",))
    (fade,) = _packs(optimizers=("fade",))
    location = StoreLocation.parse(results_dir)
    real = commit.write_record

    def crash_before_commit(where, rel, record, **kw):
        if rel.startswith(f"{commit.MANIFESTS}/"):
            raise OSError("killed before the manifest")
        return real(where, rel, record, **kw)

    monkeypatch.setattr(commit, "write_record", crash_before_commit)
    with pytest.raises(OSError, match="killed before the manifest"):
        Store(location).write_pack(fade, _outcome(fade))
    monkeypatch.undo()
    # its data files are there, but no reader sees them
    assert len(list((results_dir / "scores").rglob("*.parquet"))) == 2
    assert Store.open(results_dir).scan("scores").collect()["optimizer"].unique().to_list() == ["sgd"]
    assert Store.open(results_dir).scan("curves").collect().height == 2 * SEEDS * 2
    assert Store(location).finished_runs() == {pair for p in _packs(optimizers=("sgd",)) for pair in p.pairs()}
    assert not Store(location).pack_written(fade)
    orphans = Store(location).orphans()
    assert sorted(Path(p).parent.name for p in orphans) == ["optimizer=fade", "optimizer=fade"]
    assert Store(location).tidy() == ([], [str(results_dir / p) for p in orphans]) and Store(location).orphans() == []
    assert all(not (results_dir / p).exists() for p in orphans)


def test_a_pack_of_a_writer_that_lost_the_lock_is_not_committed(tmp_path, monkeypatch):
    """A Ray worker can outlive its killed driver and finish a pack: it writes only while writer.lock
    still names its driver's hold. Once another writer has taken the store over, a late pack writes
    nothing; if the takeover lands while it writes its data files, they are orphans (no manifest)."""
    results_dir = _build(tmp_path / "db", optimizers=("sgd",))
    (fade,) = _packs(optimizers=("fade",))
    store = Store.open(results_dir)
    with store.writing():
        driver = store.writer
        store.write_pack(fade, _outcome(fade), writer=driver)  # the holder's own pack: committed
    assert store.writer is None and Store.open(results_dir).pack_written(fade)

    def files() -> list[str]:
        return sorted(str(p.relative_to(results_dir)) for p in results_dir.rglob("*") if p.is_file() and "history" not in p.parts)

    with Store.open(results_dir).writing() as heir:  # the driver was killed; a resume took the store over
        assert heir.writer != driver
        before = files()
        with pytest.raises(StoreLocked, match="no longer holds the store"):
            Store.open(results_dir).write_pack(fade, _outcome(fade, offset=100.0), writer=driver)
        assert files() == before
        tokens = iter([driver, heir.writer])  # the takeover lands between the data files and the manifest
        monkeypatch.setattr(FileLock, "token", lambda lock: next(tokens))
        with pytest.raises(StoreLocked, match="no longer holds the store"):
            Store.open(results_dir).write_pack(fade, _outcome(fade, offset=100.0), writer=driver)
        monkeypatch.undo()
        assert [f for f in files() if f not in before and not f.endswith(".parquet")] == []
        assert len(heir.tidy()[1]) == 2  # its two data files: orphans, removed
        assert files() == before
        assert Store.open(results_dir).scan("scores").collect()["score"].max() < 100.0  # the late scores are never read


def test_tidy_sets_aside_a_pack_committed_while_it_removed_orphans(tmp_path, monkeypatch):
    """A late worker whose lock check came just before the takeover may commit during tidy, naming
    data files tidy has just removed as orphans: tidy sets that pack aside as damaged."""
    results_dir = _build(tmp_path / "db", optimizers=("sgd",))
    (fade,) = _packs(optimizers=("fade",))
    location = StoreLocation.parse(results_dir)
    real_write_record, real_remove = commit.write_record, manifests.remove_orphans
    late: list = []

    def killed_before_the_manifest(where, rel, record, **kw):
        if rel.startswith(f"{commit.MANIFESTS}/"):
            late.append((where, rel, record, kw))
            raise OSError("the driver was killed")
        return real_write_record(where, rel, record, **kw)

    monkeypatch.setattr(commit, "write_record", killed_before_the_manifest)
    with pytest.raises(OSError):
        Store(location).write_pack(fade, _outcome(fade))
    monkeypatch.undo()

    def the_manifest_lands_meanwhile(where, found):
        removed = real_remove(where, found)
        real_write_record(*late[0][:3], **late[0][3])
        return removed

    monkeypatch.setattr(manifests, "remove_orphans", the_manifest_lands_meanwhile)
    with Store(location).writing() as store:
        damaged, removed = store.tidy()
    assert len(removed) == 2 and len(damaged) == 2, (damaged, removed)
    assert not Store(location).pack_written(fade)
    assert Store.open(results_dir).scan("curves").collect().height == 2 * SEEDS * 2  # the sgd pack alone, readable


def test_committed_files_name_what_the_manifests_commit_and_no_orphan(full, tmp_path):
    """Store.committed_files: what an outside reader should read (an orphan file is not in it)."""
    copy = tmp_path / "copy"
    shutil.copytree(full, copy)
    named = Store.open(copy).committed_files("scores")
    orphan = copy / "scores" / "task=linear_tracking" / "optimizer=sgd" / "pack-orphan.parquet"
    shutil.copy(named[0], orphan)
    store = Store.open(copy)
    assert sorted(store.committed_files("scores")) == sorted(named) and str(orphan) not in named
    assert len(named) == len(store.manifests) and pl.read_parquet(named).height == RUNS


def test_a_pack_written_twice_counts_each_run_once_newest_wins(full):
    (sgd,) = _packs(optimizers=("sgd",))
    Store.open(full).write_pack(sgd, _outcome(sgd, offset=100.0))  # a retried pack, written again
    assert len(Store.open(full).manifests) == 3
    frame = Store.open(full).scan("scores").collect()
    assert frame.height == RUNS and frame.select("config_id", "seed").n_unique() == RUNS
    assert frame.filter(pl.col("optimizer") == "sgd")["score"].min() == 100.0  # the newest write
    assert queries.cells(Store.open(full).scan("scores"))["seeds"].to_list() == [SEEDS] * 6
    assert Store.open(full).scan("curves").collect().height == RUNS * 2
    assert summaries.best_table(Analysis.of(Store.open(full), "mean")).filter(pl.col("optimizer") == "sgd")["seeds"].to_list() == [SEEDS]


def test_committed_files_leave_out_a_superseded_copy(full, capsys):
    """A pack written again (a retry, a resume) supersedes its older copy: outside readers are given the
    newest file only, and count each run once; verify names the copy; the Store's frames agree."""
    (sgd,) = _packs(optimizers=("sgd",))
    first = Store.open(full)
    old = next(m for m in first.manifests if m.optimizer == "sgd")
    newest = first.write_pack(sgd, _outcome(sgd, offset=100.0))
    store = Store.open(full)
    files = store.committed_files("scores")
    assert len(store.manifests) == 3 and len(files) == 2
    assert str(full / old.files["scores"].path) not in files and str(full / newest.files["scores"].path) in files
    assert [str(full / m.files["curves"].path) in store.committed_files("curves") for m in (old, newest)] == [False, True]
    outside = pl.read_parquet(files, hive_partitioning=True)
    assert outside.height == RUNS and outside.select("config_id", "seed").n_unique() == RUNS
    assert outside.sort("config_id", "seed").equals(store.scan("scores").collect().select(outside.columns).sort("config_id", "seed"))
    code, out = _verify(full, capsys)
    assert code == 1 and f"reads use the newest, manifests/{newest.name}" in out


def test_overlapping_packs_read_each_run_from_its_newest_manifest(tmp_path):
    results_dir = tmp_path / "db"
    store = Store.open(results_dir)
    check_and_record(store.location, parse_sweep(SWEEP, "test"), "float32")
    (sgd,) = _packs(optimizers=("sgd",))
    store.write_pack(sgd, _outcome(sgd))  # both configs: scores 0..5
    second = Pack(sgd.experiment, sgd.configs[1:], sgd.seeds)
    store.write_pack(second, _outcome(second, offset=50.0))  # the second config again
    frame = Store.open(results_dir).scan("scores").collect().sort("config_id", "seed")
    assert frame.height == 2 * SEEDS
    assert len(store.committed_files()) == 2  # the first file still commits the first config: listed
    by_config = dict(frame.group_by("config_id").agg(pl.col("score").min()).iter_rows())
    assert by_config[sgd.configs[0].config_id] == 0.0 and by_config[sgd.configs[1].config_id] == 50.0
    assert Store.open(results_dir).scan("curves").collect().height == 2 * SEEDS * 2


# ---------------------------------------------------------------- one writer


HOLD = textwrap.dedent("""
    import sys, time
    from sweeps.store import StoreLocation
    lock = StoreLocation.parse(sys.argv[1]).writer_lock().acquire()
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    lock.release()
""")


def writer_lock(results_dir: Path) -> WriterLock:
    return StoreLocation.parse(results_dir).writer_lock()


def lock_holder(results_dir: Path):
    """Who holds the writer lock of `results_dir` now (None: nobody)."""
    return writer_lock(results_dir).holder()


def _hold_lock(results_dir: Path, seconds: float = 60.0) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(results_dir), str(seconds)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_second_writer_is_refused_at_once(full, tmp_path, capsys, caplog, monkeypatch):
    from sweeps.tune import driver

    def connect(*args, **kwargs):
        raise AssertionError("connected to Ray before refusing")

    monkeypatch.setattr(driver, "connect", connect)  # refused at once: before Ray
    holder = _hold_lock(full)
    try:
        body = json.loads((full / LOCK_FILE).read_text())
        assert body["pid"] == holder.pid and lock_holder(full).pid == holder.pid
        with pytest.raises(StoreLocked, match=rf"{full} is being written by pid {holder.pid} on \S+ since \d{{4}}-"):
            writer_lock(full).acquire()
        sweep_file = tmp_path / "db.yaml"
        sweep_file.write_text(yaml.safe_dump(SWEEP))
        before = {p: p.stat().st_mtime_ns for p in full.rglob("*") if p.is_file()}
        assert main(["run", str(sweep_file), "--storage", str(full.parent), "--resume"]) == 2
        err = capsys.readouterr().err
        assert f"{full} is being written by pid {holder.pid} on " in err
        assert {p: p.stat().st_mtime_ns for p in full.rglob("*") if p.is_file()} == before  # nothing touched
    finally:
        holder.kill()
        holder.wait()
    # the holder was killed without releasing: the next writer takes over with a notice
    with writer_lock(full):
        assert lock_holder(full).pid == os.getpid()
    assert f"taking over the stale lock of pid {holder.pid}" in caplog.text  # a notice (the CLI prints it)
    assert lock_holder(full) is None and not (full / LOCK_FILE).exists()


def test_stale_lock_held_by_an_heir_of_a_dead_writer_is_taken_over(tmp_path, caplog):
    """The writer died but a child it forked still holds the flock (an inherited descriptor)."""
    results_dir = tmp_path / "db"
    script = textwrap.dedent("""
        import os, sys, time
        from sweeps.store import StoreLocation
        lock = StoreLocation.parse(sys.argv[1]).writer_lock().acquire()
        child = os.fork()
        if child == 0:  # let go of the test's pipes, keep the lock's descriptor
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, 1); os.dup2(null, 2)
            time.sleep(60); os._exit(0)
        print(child, flush=True)
        os._exit(0)  # the writer dies; its child keeps the descriptor and the flock
    """)
    proc = subprocess.run([sys.executable, "-c", script, str(results_dir)], capture_output=True, text=True, cwd=ROOT, check=True)
    heir = int(proc.stdout.strip())
    try:
        dead = json.loads((results_dir / LOCK_FILE).read_text())["pid"]
        with writer_lock(results_dir):
            assert json.loads((results_dir / LOCK_FILE).read_text())["pid"] == os.getpid()
        assert f"taking over the stale lock of pid {dead}" in caplog.text
    finally:
        os.kill(heir, signal.SIGKILL)


def test_two_concurrent_runs_one_refused_store_exact(tmp_path):
    """Two `fade-sweep run` of one sweep at once: one runs, the other exits 2; the store holds each run once."""
    document = {**SWEEP, "name": "race", "task_settings": {"steps": 20000, "bin": 5000}}
    sweep_file = tmp_path / "race.yaml"
    sweep_file.write_text(yaml.safe_dump(document))
    command = [sys.executable, "-m", "sweeps.cli", "run", str(sweep_file), "--storage", str(tmp_path / "store"),
               "--num-cpus", "1", "--no-report", "--chunk-steps", "1000"]
    env = {**os.environ, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    results_dir = tmp_path / "store" / "race"
    deadline = time.time() + 300  # the first's imports, on a loaded machine (a whole suite in parallel took > 60 s)
    while lock_holder(results_dir) is None and first.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert lock_holder(results_dir) is not None, "the first run never took the writer lock"
    second = subprocess.run([*command, "--resume"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120, check=False)
    _, err = first.communicate(timeout=600)
    assert first.returncode == 0, err[-3000:]
    assert second.returncode == 2, second.stderr[-3000:]
    assert f"{results_dir} is being written by pid {first.pid} on " in second.stderr
    frame = Store.open(results_dir).scan("scores").collect()
    assert frame.height == RUNS and frame.select("config_id", "seed").n_unique() == RUNS
    assert Store.open(results_dir).scan("curves").collect().height == RUNS * 4
    verification = Store.open(results_dir).verify()
    assert verification.clean, verification.problems
    assert not (results_dir / LOCK_FILE).exists()


# ---------------------------------------------------------------- the recorded sweep


def test_the_command_line_shows_the_stores_notices_on_stderr(tmp_path, capsys):
    """The store logs a notice (a stale lock taken over); the CLI's handler prints it as one line."""
    from sweeps.cli.text import show_notices

    results_dir = tmp_path / "db"
    results_dir.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout
    (results_dir / LOCK_FILE).write_text(json.dumps({"pid": int(dead), "host": os.uname().nodename, "started": "then"}))
    show_notices()
    show_notices()  # once per process, however often asked
    with writer_lock(results_dir):
        pass
    err = capsys.readouterr().err
    assert err.count(f"fade-sweep: {results_dir}: taking over the stale lock of pid {int(dead)}") == 1, err


# Modules that use json for something other than a store's records: each must still do so.
JSON_NOT_RECORDS = {"sweeps/spec/config.py": "a config id hashes its canonical JSON",
                    "sweeps/store/sweep_record.py": "two sweep documents compared as canonical JSON",
                    "sweeps/cli/schema.py": "the sweep file's JSON Schema printed for editors, not a store record"}


def test_every_json_record_goes_through_records_py():
    """records.py is the only reader and writer of the store's JSON records (lock holder, lease, packs,
    checkpoint pack.json, ...): nothing else parses or writes JSON by hand."""
    import ast

    found = {}
    for path in sorted((ROOT / "sweeps").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        calls = [node.lineno for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)
                 and ast.unparse(node.func).split(".")[-1] in ("loads", "dumps", "load", "dump", "model_validate_json")
                 and ("json" in ast.unparse(node.func) or ast.unparse(node.func).endswith("model_validate_json"))]
        if calls and rel != "sweeps/store/records.py":
            found[rel] = calls
    assert set(JSON_NOT_RECORDS) <= set(found), "an exemption that no longer uses json: drop it"
    assert {k: v for k, v in found.items() if k not in JSON_NOT_RECORDS} == {}


def _protocol_members(protocol: type) -> dict[str, object]:
    """The members a Protocol asks for, its own and its bases' (name -> the function, property or annotation)."""
    import typing

    members = {}
    for base in reversed(protocol.__mro__):
        if base in (object, typing.Protocol, typing.Generic):
            continue
        members |= dict.fromkeys(getattr(base, "__annotations__", {}), "annotation")
        members |= {n: v for n, v in vars(base).items() if (not n.startswith("_") or n == "__fspath__")
                    and (callable(v) or isinstance(v, property))}
    return members


@pytest.mark.parametrize("backend", ["local.LocalFolder", "objects.ObjectPrefix"])
def test_each_storage_backend_implements_the_backend_protocol(backend):
    """`Backend` is the whole interface of a store location: every member is on the backend's mixin (or on
    `StoreLocation`, the naming every backend shares), a method with the protocol's parameters and a property
    as a property; and the location the parser makes for the backend is a `Backend`."""
    import importlib
    import inspect

    from sweeps.store.backend import Backend
    from sweeps.store.location import LocalLocation, ObjectLocation

    module, name = backend.split(".")
    mixin = getattr(importlib.import_module(f"sweeps.store.{module}"), name)
    members = _protocol_members(Backend)
    assert {"child", "writer_lock", "scan_parquet", "write_with", "read_bytes", "display"} <= set(members)
    shared = {n for n in members if n in vars(StoreLocation) or n in StoreLocation.__dataclass_fields__}
    for member, wanted in members.items():
        if member in shared:
            continue
        assert member in vars(mixin), f"{name} lacks {member}"
        got = vars(mixin)[member]
        if isinstance(wanted, property):
            assert isinstance(got, property), f"{name}.{member} should be a property"
        else:
            params = [(p.name, p.kind, p.default) for p in inspect.signature(got).parameters.values()]
            assert params == [(p.name, p.kind, p.default) for p in inspect.signature(wanted).parameters.values()], member
    location = LocalLocation if module == "local" else ObjectLocation
    assert issubclass(location, mixin) and issubclass(location, StoreLocation)
    assert not [m for m in members if not hasattr(location, m) and m not in StoreLocation.__dataclass_fields__]


def test_a_checkpoint_record_of_an_earlier_version_still_resumes(tmp_path):
    """pack.json as the runner wrote it before it became a record (json.dumps, one line) still names its
    checkpoint; a damaged one is passed over (its pack continues from another checkpoint or starts over)."""
    from sweeps.packs.checkpoint_files import CHECKPOINT_FILE, CHECKPOINT_META
    from sweeps.tune.resume import newest_checkpoints

    trial = tmp_path / "db" / "tune-20260101-000000" / "trial_1"
    for step, meta in ((1, '{"pack_id": "p1", "steps_done": 400, "total_steps": 800, "dtype": "float32"}'),
                       (2, '{"pack_id": "p1", "steps_done": "not a number", "total_steps": 800, "dtype": "float32"}')):
        folder = trial / f"checkpoint_00000{step}"
        folder.mkdir(parents=True)
        (folder / CHECKPOINT_META).write_text(meta)
        (folder / CHECKPOINT_FILE).write_bytes(b"tensors")
    newest = newest_checkpoints(Store.open(tmp_path / "db"), "float32")
    assert newest == {"p1": (400, "tune-20260101-000000/trial_1/checkpoint_000001")}
    assert newest_checkpoints(Store.open(tmp_path / "db"), "float64") == {}  # another dtype: not this run's


def test_store_records_sweep_dtype_and_version(full):
    record = json.loads((full / "store.json").read_text())
    assert record["dtype"] == "float32" and record["package_version"] and record["history"] == []
    assert yaml.safe_load((full / "sweep.yaml").read_text()) == SWEEP
    assert not list(full.rglob("*.pkl")) and not list(full.rglob("*.pickle"))


def test_resume_with_an_edited_sweep_keeps_history_and_counts_only_the_current_sweep(full, caplog):
    edited = {**SWEEP, "optimizers": {"sgd": {"alpha": [0.1, 0.001]}, "fade": SWEEP["optimizers"]["fade"]}}
    location = StoreLocation.parse(full)
    notices = check_and_record(location, parse_sweep(edited, "edited"), "float32")
    assert len(notices) == 1 and "3 stored runs outside it are ignored" in notices[0]
    record = json.loads((full / "store.json").read_text())
    (kept,) = record["history"]
    assert yaml.safe_load((full / kept).read_text()) == SWEEP  # the old record, not overwritten
    assert yaml.safe_load((full / "sweep.yaml").read_text()) == edited
    caplog.clear()
    store = Store(location)
    frame = store.scan("scores").collect()
    assert frame.height == RUNS - SEEDS and 0.01 not in frame["alpha"].to_list()
    assert caplog.text.count("3 stored runs are not in the current sweep; ignored") == 1  # a notice the CLI prints
    caplog.clear()
    store.scan("curves").collect()
    analysis = Analysis.of(store)
    summaries.best_table(analysis)
    assert "stored runs are not in the current sweep" not in caplog.text  # said once per open
    missing = store.missing_runs()
    assert missing.height == SEEDS and missing["alpha"].unique().to_list() == [0.001]
    assert store.scan("scores", all_runs=True).collect().height == RUNS
    best = summaries.best_table(analysis).filter(pl.col("optimizer") == "sgd").row(0, named=True)
    assert best["alpha"] == 0.1 and best["missing_runs"] == SEEDS and best["configs"] == 1
    # the planner runs only what the new sweep lacks
    from sweeps.plan import plan_packs

    (pack,) = plan_packs(parse_sweep(edited, "edited"), 1, store.finished_runs())
    assert [dict(c.hyperparameters) for c in pack.configs] == [{"alpha": 0.001}]


def test_a_change_of_dtype_or_task_settings_under_stored_runs_is_refused(full):
    full = StoreLocation.parse(full)
    with pytest.raises(SweepError, match=r"^dtype: .* holds float32 runs and this run asks for float64"):
        check_and_record(full, parse_sweep(SWEEP, "same"), "float64")
    longer = {**SWEEP, "task_settings": {"steps": 8, "bin": 2}}
    with pytest.raises(SweepError, match=r"task_settings\.steps: changed from 4 to 8 for linear_tracking/"):
        check_and_record(full, parse_sweep(longer, "longer.yaml"), "float32")
    assert yaml.safe_load(full.read_text("sweep.yaml")) == SWEEP  # nothing recorded
    assert not full.exists("history")
    # adding a variant (new settings beside the old ones) is not a change of meaning
    variants = {k: v for k, v in SWEEP.items() if k != "task_settings"}
    variants["variants"] = [{"task_settings": {"steps": 4, "bin": 2}}, {"task_settings": {"steps": 4, "bin": 2, "noise": 1.0}}]
    check_and_record(full, parse_sweep(variants, "variants"), "float32")


def test_storage_that_is_a_file_is_one_line_exit_2_before_ray(tmp_path, capsys):
    """--storage naming a file (or a path through one): bad input, told at once, nothing written."""
    sweep_file = tmp_path / "db.yaml"
    sweep_file.write_text(yaml.safe_dump(SWEEP))
    a_file = tmp_path / "afile"
    a_file.write_text("not a folder")
    for storage in (a_file, a_file / "deeper"):
        started = time.monotonic()
        assert main(["run", str(sweep_file), "--storage", str(storage), "--no-report"]) == 2
        err = capsys.readouterr().err
        assert err == f"fade-sweep: error: {storage / 'db'}: {a_file} is a file, not a folder; a store is a folder (for `run`: another --storage)\n", err
        assert time.monotonic() - started < 5 and a_file.read_text() == "not a folder"


def test_run_sweep_locks_records_and_removes_orphans(tmp_path, monkeypatch):
    from sweeps.tune import driver, stages

    results_dir = _build(tmp_path / "db", optimizers=("sgd",))
    orphan = results_dir / "scores" / "task=linear_tracking" / "optimizer=fade" / "pack-x-y.parquet"
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"half a file")

    class ReachedTune(Exception):
        pass

    def run_packs(sweep, packs, *args, **kwargs):
        assert lock_holder(results_dir).pid == os.getpid()  # held while running
        assert {p.experiment.optimizer for p in packs} == {"fade"}  # only what the store lacks
        raise ReachedTune

    monkeypatch.setattr(driver, "connect", lambda *a, **k: None)  # no Ray needed up to the packs
    monkeypatch.setattr(driver, "parallel_slots", lambda resources: 1)
    monkeypatch.setattr(driver, "check_storage", lambda results_dir: None)
    monkeypatch.setattr(driver, "run_packs", run_packs)
    notices = []
    with pytest.raises(SweepError, match="dtype: "):
        stages.run_sweep(parse_sweep(SWEEP, "test"), tmp_path, resume=True, options=stages.ExecutionOptions(dtype="float64"))
    assert orphan.exists() and lock_holder(results_dir) is None  # refused before touching anything; lock released
    with pytest.raises(ReachedTune):
        stages.run_sweep(parse_sweep(SWEEP, "test"), tmp_path, resume=True, options=stages.ExecutionOptions(notify=notices.append))
    assert not orphan.exists() and lock_holder(results_dir) is None
    assert any("Removed 1 orphan files of interrupted writes" in line for line in notices)  # a notice, never a print


def test_the_writer_answers_each_stage_of_a_run_in_one_call(tmp_path):
    """SweepWriter: the lock held from entering to leaving; the record stage recorded, tidied and counted the runs
    already stored (of the sweep alone, and none unless resuming); the end tidied again and reopened the store."""
    from sweeps.store.writer import SweepWriter

    results_dir = _build(tmp_path / "db", optimizers=("sgd",))
    orphan = results_dir / "scores" / "task=linear_tracking" / "optimizer=fade" / "pack-x-y.parquet"
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"half a file")
    sweep, store = parse_sweep(SWEEP, "test"), Store.open(results_dir)
    sgd = {pair for p in _packs(optimizers=("sgd",)) for pair in p.pairs()}
    with pytest.raises(SweepError, match="already holds results"):
        with SweepWriter(store, sweep, "float32", resume=False):  # the lock stage refuses
            pass
    assert lock_holder(results_dir) is None and orphan.exists()
    with SweepWriter(store, sweep, "float32", resume=True) as writer:
        assert lock_holder(results_dir).pid == os.getpid() and store.writer is not None
        recorded = writer.record_sweep()
        assert recorded.finished == sgd and not orphan.exists()
        assert recorded.notices == [f"Removed 1 orphan files of interrupted writes from {results_dir}"]
        (fade,) = _packs(optimizers=("fade",))
        store.write_pack(fade, _outcome(fade), writer=store.writer)  # what a trial commits meanwhile
        finished = writer.finish(ran=False)
        assert finished.store is not store and finished.store.finished_runs() == sgd | set(fade.pairs())
        assert finished.notices == [] and finished.status is None  # no packs ran: no closing status
    assert lock_holder(results_dir) is None and store.writer is None


def test_the_writer_counts_the_runs_stored_after_setting_damaged_packs_aside(tmp_path):
    """A pack whose data file is gone is set aside by the record stage; its runs are not counted as stored
    (they run again)."""
    from sweeps.store.writer import SweepWriter

    results_dir = _build(tmp_path / "db")
    (curves,) = (results_dir / "curves" / "task=linear_tracking" / "optimizer=sgd").glob("*.parquet")
    curves.unlink()
    fade = {pair for p in _packs(optimizers=("fade",)) for pair in p.pairs()}
    with SweepWriter(Store.open(results_dir), parse_sweep(SWEEP, "test"), "float32", resume=True) as writer:
        recorded = writer.record_sweep()
    assert recorded.finished == fade
    assert recorded.notices[0].startswith("Set aside 1 damaged file of committed packs"), recorded.notices


def test_the_writer_records_a_confirmation_stage_and_says_what_changed(full):
    from sweeps.store.writer import SweepWriter

    first = _confirmation(Store.open(full))
    again = first.model_copy(update={"seeds": (9, 10)})
    with SweepWriter(Store.open(full)) as writer:
        recorded = writer.record_confirmation(again)
    assert recorded.finished == set()  # none of the fresh seeds' runs is stored
    assert recorded.notices == ["The confirmation stage changed (was median on seeds [7, 8]); stored runs outside "
                                "the new one are ignored"]
    assert Store.open(full).confirmation.seeds == (9, 10)


def test_the_driver_converts_the_storage_once_and_hands_one_store_on(tmp_path, monkeypatch):
    """From `run_sweep(sweep, "STORAGE")` to the Tune experiment: the user's string becomes a location once,
    and resume and the Tune wiring get the driver's Store (whose manifests were read once, under the lock)."""
    from sweeps.tune import driver, stages

    _build(tmp_path / "db", optimizers=("sgd",))
    real_parse, real_read = StoreLocation.parse.__func__, store_module.read_manifests
    conversions, reads, handed = [], [], {}

    def parse(cls, target):
        if not isinstance(target, StoreLocation):
            conversions.append(target)
        return real_parse(cls, target)

    def run_packs(sweep, packs, resume_from, store, *args, **kwargs):
        handed["store"] = store
        raise ReachedTune

    class ReachedTune(Exception):
        pass

    def recorded(store, *args, **kwargs):
        handed["resume"] = store
        return {}

    monkeypatch.setattr(StoreLocation, "parse", classmethod(parse))
    monkeypatch.setattr(store_module, "read_manifests", lambda location: reads.append(location) or real_read(location))
    monkeypatch.setattr(driver, "connect", lambda *a, **k: None)
    monkeypatch.setattr(driver, "parallel_slots", lambda resources: 1)
    monkeypatch.setattr(driver, "check_storage", lambda results_dir: None)
    monkeypatch.setattr(driver, "recorded_packs", recorded)
    monkeypatch.setattr(driver, "run_packs", run_packs)
    with pytest.raises(ReachedTune):
        stages.run_sweep(parse_sweep(SWEEP, "test"), str(tmp_path), resume=True)
    assert conversions == [str(tmp_path)]
    assert handed["store"] is handed["resume"] and handed["store"].location.base == str(tmp_path / "db")
    assert len(reads) == 2  # under the lock, and again after removing orphans (a late pack may have landed)


# ---------------------------------------------------------------- tables say what is missing


def test_best_table_lists_every_method_of_the_sweep(tmp_path):
    results_dir = _build(tmp_path / "db", optimizers=("sgd",))
    best = summaries.best_table(Analysis.of(Store.open(results_dir), "mean"))
    fade = best.filter(pl.col("optimizer") == "fade").row(0, named=True)
    assert fade["status"] == "missing" and fade["mean"] is None and fade["missing_runs"] == 4 * SEEDS
    assert fade["configs"] == 4 and not fade["best_method"]
    assert best.filter(pl.col("optimizer") == "sgd")["best_method"].to_list() == [True]
    md = kinds.table_text(Analysis.of(Store.open(results_dir), "mean"), "best", "md")
    assert "| fade | missing | 0 |" in md
    assert pl.read_csv(kinds.table_text(Analysis.of(Store.open(results_dir), "mean"), "best", "csv").encode()).height == 2


# ---------------------------------------------------------------- verify


def _verify(results_dir, capsys) -> tuple[int, str]:
    code = main(["verify", str(results_dir)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_verify_clean_store(full, capsys):
    code, out = _verify(full, capsys)
    assert code == 0, out
    assert out.strip() == f"{full}: clean (2 packs, {RUNS} runs stored, 4 data files checked, 0 runs missing)"


def test_verify_not_a_store(tmp_path, capsys):
    code, out = _verify(tmp_path, capsys)
    assert code == 2 and "not a results store" in out


def test_verify_finds_a_duplicated_run(full, capsys):
    (sgd,) = _packs(optimizers=("sgd",))
    Store.open(full).write_pack(sgd, _outcome(sgd))
    code, out = _verify(full, capsys)
    assert code == 1
    newest = Store.open(full).manifests[-1].name
    assert f"{2 * SEEDS} runs (e.g. config " in out and f"reads use the newest, manifests/{newest}" in out
    assert "1 problem (1 duplicate)" in out


def test_verify_finds_a_truncated_file(full, capsys):
    (victim,) = list((full / "curves" / "task=linear_tracking" / "optimizer=fade").glob("*.parquet"))
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    code, out = _verify(full, capsys)
    assert code == 1
    rel = victim.relative_to(full)
    assert f"{rel}: {len(data) // 2} bytes, manifests/" in out
    assert f"{rel}: corrupt or truncated Parquet file" in out


def test_verify_finds_a_changed_file_missing_file_and_missing_runs(full, capsys):
    (scores_file,) = list((full / "scores" / "task=linear_tracking" / "optimizer=sgd").glob("*.parquet"))
    data = bytearray(scores_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    scores_file.write_bytes(bytes(data))
    (curves_file,) = list((full / "curves" / "task=linear_tracking" / "optimizer=fade").glob("*.parquet"))
    curves_file.unlink()
    code, out = _verify(full, capsys)
    assert code == 1
    assert f"{scores_file.relative_to(full)}: sha256 differs" in out
    assert f"{curves_file.relative_to(full)}: missing (named by manifests/" in out


def test_verify_finds_an_orphan_and_missing_runs(tmp_path, capsys):
    results_dir = _build(tmp_path / "db", optimizers=("sgd",))
    orphan = results_dir / "curves" / "task=linear_tracking" / "optimizer=sgd" / ".pack-1-2.parquet.123.tmp"
    orphan.write_bytes(b"partial")
    code, out = _verify(results_dir, capsys)
    assert code == 1
    assert f"{orphan.relative_to(results_dir)}: orphan (no manifest names it" in out
    assert f"linear_tracking/fade: {4 * SEEDS} runs of the current sweep have no result" in out
    assert f"2 problems (1 method missing runs, 1 orphan); 1 pack, {2 * SEEDS} runs stored, 2 data files checked, {4 * SEEDS} runs missing" in out


def test_a_truncated_committed_file_is_left_out_by_readers_and_set_aside_on_resume(full, caplog):
    rel = Store.open(full).manifests[0].files["scores"].path
    victim = full / rel
    runs_before = Store.open(full).scan("scores").collect().height
    data = victim.read_bytes()
    victim.write_bytes(data[:100])
    store = Store.open(full)
    assert [(f.path, f.why) for f in store.damaged_files] == [(rel, f"100 bytes, but its manifest recorded {len(data)} (damaged)")]
    left = store.scan("scores").collect().height
    assert 0 < left < runs_before  # the rest answers; that pack's rows are left out
    assert store.scan("curves").collect().height == 2 * runs_before  # its curves file is whole: kept
    assert manifests.set_aside_damaged(StoreLocation.parse(full), Store.open(full).manifests) == [rel]
    assert Store.open(full).scan("scores").collect().height == left  # that pack is no longer committed
    assert list((full / "history").glob("damaged-*.json")), "the manifest is kept, not lost"
    assert rel in Store.open(full).orphans()


@pytest.mark.parametrize("kind", ["scores", "curves"])
def test_table_report_and_status_answer_from_the_rest_with_a_line_naming_a_truncated_data_file(full, kind, capsys):
    finished = {"sweep": "test", "state": "finished", "started_at": 1.0, "updated_at": 2.0, "run_steps_total": 1,
                "trials": [], "driver_pid": None}
    (full / "status.json").write_text(json.dumps(finished))
    rel = Store.open(full).manifests[0].files[kind].path
    (full / rel).write_bytes((full / rel).read_bytes()[:100])
    repair = Store.open(full).resume_command()
    footnote = f"fade-sweep: skipped 1 damaged {kind} file ({full / rel}: 100 bytes, but its manifest recorded"
    left_out = {"scores": "the runs of its pack are left out of the tables and the report (they count as missing)",
                "curves": "the curves of its pack are left out of the figures (their scores are in the tables)"}[kind]
    commands = [["table", str(full)], ["report", str(full), "--out", str(full.parent / "r.html")], ["status", str(full)]]
    for command in commands:
        capsys.readouterr()
        assert main(command) == 0, command
        err = capsys.readouterr().err
        assert err.startswith(footnote) and left_out in err, (command, err)
        assert err.rstrip().endswith(f"`{repair}` sets it aside and runs its pack again"), (command, err)
    assert (full.parent / "r.html").exists()


def _sgd_row(table: str) -> str:
    (row,) = [line for line in table.splitlines() if line.startswith("| sgd")]
    return row


def test_a_truncated_scores_file_counts_its_runs_as_missing_in_the_tables_with_a_footnote(full, capsys):
    """The damaged pack's method keeps its row ("missing", with its runs counted), and every format says so."""
    manifest = Store.open(full).manifests[0]
    assert manifest.optimizer == "sgd"
    rel = manifest.files["scores"].path
    (full / rel).write_bytes((full / rel).read_bytes()[:100])
    repair = Store.open(full).resume_command()
    assert main(["table", str(full)]) == 0
    out = capsys.readouterr().out
    assert _sgd_row(out).split("|")[2].strip() == "missing" and _sgd_row(out).split("|")[-2].strip() == str(2 * SEEDS)
    assert f"- Left out: the runs of 1 damaged scores file ({full / rel}), counted as missing runs; `{repair}`" in out
    assert "- Some methods have missing runs: the best (bold) is the best among the runs that are in" in out
    assert main(["table", str(full), "--format", "latex"]) == 0
    assert "Left out: the runs of 1 damaged scores file" in capsys.readouterr().out
    assert main(["table", str(full), "--format", "csv"]) == 0
    csv = pl.read_csv(io.StringIO(capsys.readouterr().out))
    assert dict(zip(csv["optimizer"], csv["missing_runs"])) == {"fade": 0, "sgd": 2 * SEEDS}
    assert dict(zip(csv["optimizer"], csv["status"])) == {"fade": "ok", "sgd": "missing"}
    assert len(Store.open(full).missing_runs()) == 2 * SEEDS


def test_a_truncated_scores_file_is_named_by_report_status_and_verify(full, capsys):
    rel = Store.open(full).manifests[0].files["scores"].path
    (full / rel).write_bytes((full / rel).read_bytes()[:100])
    report = full.parent / "r.html"
    assert main(["report", str(full), "--out", str(report)]) == 0
    html = report.read_text()
    section = html[html.index("What is in so far"):]
    assert f"{RUNS - 2 * SEEDS:,} of {RUNS:,} runs are in" in section and f"damaged scores file ({full / rel})" in section
    capsys.readouterr()
    assert main(["status", str(full.parent)]) == 0
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if line.startswith("db ")]
    assert row.split()[2:6] == ["damaged", str(RUNS - 2 * SEEDS), "of", str(RUNS)]
    assert f"db: damaged: skipped 1 damaged scores file ({full / rel}" in out
    assert main(["status", str(full)]) == 0
    out = capsys.readouterr().out
    assert f"{2 * SEEDS} runs of its sweep missing" in out and f"damaged: {full / rel}: 100 bytes" in out
    assert main(["verify", str(full)]) == 1
    assert f"{2 * SEEDS} runs missing" in capsys.readouterr().out.splitlines()[-1]


def test_the_best_table_of_a_partial_store_says_the_best_is_among_the_methods_in(tmp_path, capsys):
    partial = _build(tmp_path / "db", optimizers=("sgd",))  # interrupted: fade has no run yet
    assert main(["table", str(partial)]) == 0
    out = capsys.readouterr().out
    assert "| **sgd** |" in out and "- Some methods have missing runs: the best (bold) is the best among" in out
    assert "Left out" not in out
    assert main(["table", str(_build(tmp_path / "whole"))]) == 0
    assert "Some methods have missing runs" not in capsys.readouterr().out


@pytest.mark.parametrize("typo", ["s3:/bucket/x", "s3:bucket", "gs:/b/p"])
def test_a_uri_missing_its_slashes_is_refused_not_made_a_folder(typo, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "linear-demo", "--storage", typo]) == 2
    assert "a URI needs two slashes" in capsys.readouterr().err
    assert not any(tmp_path.iterdir()), "nothing written, no local folder named like a scheme"


def test_submit_refuses_a_results_folder_being_written_before_any_job(full, capsys):

    document = yaml.safe_load((full / "sweep.yaml").read_text())
    sweep_file = full.parent / "s.yaml"
    sweep_file.write_text(yaml.safe_dump(document))
    with writer_lock(full):  # this process is writing the folder
        code = main(["submit", str(sweep_file), "--address", "http://127.0.0.1:1", "--storage", str(full.parent)])
    assert code == 2
    assert "is being written by pid" in capsys.readouterr().err  # refused before the job server was contacted


# ---------------------------------------------------------------- one Store, typed records


def test_a_store_opened_once_serves_a_whole_report(full, tmp_path, monkeypatch):
    """The manifests and the recorded sweep are read once per open, however many tables and figures."""
    from sweeps.analysis.report import write_report

    reads = {"manifests": 0, "sweep": 0}

    def counted(name, real):
        def read(*args):
            reads[name] += 1
            return real(*args)
        return read

    monkeypatch.setattr(store_module, "read_manifests", counted("manifests", store_module.read_manifests))
    monkeypatch.setattr(store_module, "recorded_sweep", counted("sweep", store_module.recorded_sweep))
    figures = write_report(Store.open(full), StoreLocation.parse(tmp_path / "report.html"))
    assert len(figures) > 3 and (tmp_path / "report.html").stat().st_size > 100_000
    assert reads == {"manifests": 1, "sweep": 1}
    summaries.best_table(Analysis.of(Store.open(full), "mean"))  # another Store: read again, once
    assert reads == {"manifests": 2, "sweep": 2}


def _confirmation(store: Store):
    """A confirmation stage of two selected configurations on two fresh seeds, recorded in `store`."""
    from sweeps.store.records import ConfirmationRecord

    chosen = store.scan("scores").select("task", "optimizer", "config_id", "alpha").unique("optimizer").sort("optimizer")
    record = ConfirmationRecord(stat="median", seeds=(7, 8), tuning_seeds=tuple(range(SEEDS)), selected=chosen.collect().to_dicts())
    store.record_confirmation(record)
    return record


def test_records_round_trip(full):
    from sweeps.store.records import LockHolder, Manifest, PacksRecord, SweepStatus, TrialStatus, parse_record, record_json

    store = Store.open(full)
    manifest = store.manifests[0]
    raw = (full / "manifests" / manifest.name).read_bytes()
    assert parse_record(Manifest, raw, "m").model_copy(update={"name": manifest.name}) == manifest
    assert json.loads(raw)["files"]["scores"]["path"].startswith("scores/task=linear_tracking/")
    assert store.record.dtype == "float32" and store.record.history == []
    status = SweepStatus("db", "running", 1.0, 2.0, 100, {"a": TrialStatus("a", "running", 50, 100)}, driver_pid=7, host="h")
    status.write(store.location)
    assert Store.open(full).status() == status
    assert json.loads((full / "status.json").read_text())["trials"][0]["pack_id"] == "a"  # a list on disk
    for record in (store.record, LockHolder(pid=1, host="h", command="x"),
                   PacksRecord(sweep="db", packs={"p": {"configs": [{"config_id": "c"}], "seeds": [0, 1]}})):
        assert parse_record(type(record), record_json(record), "r") == record
    record = _confirmation(store)
    again = Store.open(full).confirmation
    assert again == record and again.selected[0].model_extra["task"] == "linear_tracking"  # extra columns kept
    assert again.pairs() == {(row.config_id, s) for row in record.selected for s in (7, 8)}
    assert json.loads((full / "confirmation.json").read_text())["selected"][0]["alpha"] == record.selected[0].alpha
    older = {"sweep": "s", "state": "running", "started_at": 1.0, "updated_at": 2.0, "run_steps_total": 1, "trials": []}
    assert parse_record(SweepStatus, json.dumps(older).encode(), "s").driver_pid is None  # names no driver, not the reader


@pytest.mark.parametrize("record", ["manifest", "store.json", "status.json", "confirmation.json"])
def test_a_damaged_record_is_an_error_naming_its_file(full, record, capsys):
    from sweeps.store import RecordError
    from sweeps.store.records import SweepStatus

    if record == "manifest":
        victim = full / "manifests" / Store.open(full).manifests[0].name
        victim.write_text(victim.read_text().replace('"seeds"', '"seats"'))
        store = Store.open(full)  # it commits nothing: readers read the rest, and name it
        assert store.scan("scores").collect().height == RUNS - 2 * SEEDS and store.missing_runs().height == 2 * SEEDS
        assert [d.reason for d in store.damaged_manifests] == [f"{victim}: damaged Manifest record (seeds: Field required)"]
        assert store.damage_notice().startswith(f"skipped 1 damaged manifest ({victim}: damaged Manifest record")
        code, out = _verify(full, capsys)
        assert code == 1 and f"{victim}: damaged Manifest record" in out
        return
    victim = full / record
    if record == "status.json":
        SweepStatus("db", "running", 1.0, 2.0, 100).write(StoreLocation.parse(full))
    if record == "confirmation.json":
        _confirmation(Store.open(full))
    victim.write_text(victim.read_text()[:40])
    read = {"status.json": Store.status, "store.json": lambda s: s.record, "confirmation.json": lambda s: s.confirmation}
    with pytest.raises(RecordError, match=rf"^{victim}: damaged \w+ record \(not valid JSON\)$"):
        read[record](Store.open(full))
    capsys.readouterr()
    assert main(["verify", str(full)]) == 1
    if record == "status.json":  # a reader: answers from the rest and names what it skipped
        assert main(["status", str(full)]) == 0
    if record == "confirmation.json":  # valid JSON, but not the record: the field at fault is named
        victim.write_text(json.dumps({"format": 1, "stat": "mean", "seeds": [9], "tuning_seeds": [0], "selected": [{}]}))
        with pytest.raises(RecordError, match=rf"^{victim}: damaged ConfirmationRecord record \(selected\.0\.optimizer: Field required\)$"):
            Store.open(full).confirmation
    captured = capsys.readouterr()
    assert f"{victim}: damaged" in captured.out + captured.err
    if record == "confirmation.json":  # the tuning tables and the report answer; the confirm table names the repair
        capsys.readouterr()
        repair = f"`fade-sweep confirm {full} --seeds N` records it again"
        assert main(["table", str(full)]) == 0
        assert capsys.readouterr().err == f"fade-sweep: skipped {victim}: damaged ConfirmationRecord record (selected.0.optimizer: Field required); {repair}\n"
        assert main(["report", str(full), "--out", str(full.parent / "r.html")]) == 0 and (full.parent / "r.html").exists()
        assert main(["table", str(full), "--kind", "confirm"]) == 2
        assert capsys.readouterr().err.strip().splitlines()[-1] == (
            f"fade-sweep: error: {victim}: damaged ConfirmationRecord record (selected.0.optimizer: Field required); "
            f"`fade-sweep confirm {full} --seeds N` records the stage again")


def test_sweep_yaml_is_read_back_by_the_sweep_files_rules(tmp_path):
    """YAML 1.2 floats (`1e-2`) and no duplicate keys, as when the sweep was validated (not plain safe_load)."""
    results_dir = tmp_path / "db"
    results_dir.mkdir()
    text = yaml.safe_dump(SWEEP).replace("- 0.01\n", "- 1e-2\n", 1)
    assert "1e-2" in text and yaml.safe_load(text)["optimizers"]["sgd"]["alpha"] == [0.1, "1e-2"]  # 1.1 reads a string
    (results_dir / "sweep.yaml").write_text(text)
    assert Store.open(results_dir).sweep.pairs == parse_sweep(SWEEP, "test").pairs
    (results_dir / "sweep.yaml").write_text(text + "name: twice\n")
    with pytest.raises(SweepError, match=rf"^{results_dir / 'sweep.yaml'}: name: duplicate key at line"):
        Store.open(results_dir).sweep


def test_status_names_the_resume_command_and_no_empty_stage_line(tmp_path, capsys):
    """`status` of an interrupted sweep with nothing committed yet: the hint is a command that works
    (the recorded sweep, its --storage), and no empty "committed packs:" line."""
    from sweeps.store.records import SweepStatus

    results_dir = tmp_path / "store" / "db"
    check_and_record(StoreLocation.parse(results_dir), parse_sweep(SWEEP, "test"), "float64")
    SweepStatus("db", "interrupted", 1.0, 2.0, 100).write(StoreLocation.parse(results_dir))
    assert main(["status", str(results_dir)]) == 0
    out = capsys.readouterr().out
    assert f"continue with `fade-sweep run {results_dir}/sweep.yaml --storage {results_dir.parent} --dtype float64 --resume`" in out
    assert "committed packs" not in out, out
