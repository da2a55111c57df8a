"""The results store on an object store (s3://), against a real S3-compatible server on loopback.

A moto server (`moto[server]`, the `test` extras) runs as a subprocess on a free 127.0.0.1
port; the module's environment points the standard AWS chain at it (AWS_ENDPOINT_URL, a test
key pair whose secret must never show up anywhere) before its one embedded Ray starts, so
Ray's workers see the same chain.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import polars as pl
import pytest
import ray
import yaml

boto3 = pytest.importorskip("boto3")
pytest.importorskip("moto.server")

from sweeps.store import Store, StoreLocation  # noqa: E402
from sweeps.cli import main  # noqa: E402
from sweeps.spec import parse_sweep  # noqa: E402
from tests.helpers import scores_in_process

BUCKET = "fade-results"
ACCESS_KEY = "AKIAFADESWEEPTEST01"
SECRET = f"fadeSecret{uuid.uuid4().hex}"
STEPS, BIN = 3000, 500
TINY = {
    "name": "tiny",
    "task": "linear_tracking",
    "task_settings": {"steps": STEPS, "bin": BIN, "noise": 1.0},
    "seeds": 2,
    "optimizers": {"sgd": {"alpha": [0.05, 0.01]}, "fade": {"alpha": [0.05], "theta_lambda": [0.01], "gamma0": [-2.3, -4.6]}},
}
TINY_RUNS = 4 * 2
TINY_OPTIONS = ["--runs-per-pack", "4", "--chunk-steps", "700", "--no-report"]
# 6 packs of a second or two each, 2 at a time: long enough to kill the driver between packs.
LONG = {
    "name": "long",
    "task": "linear_tracking",
    "task_settings": {"steps": 300_000, "bin": 30_000, "noise": 1.0},
    "seeds": 2,
    "optimizers": {"coupled": {"theta": [0.01, 0.005, 0.002], "beta0": [-4.6], "gamma0": [-2.3, -4.6]}},
}
LONG_PACKS = 6
LONG_OPTIONS = ["--num-cpus", "2", "--runs-per-pack", "2", "--chunk-steps", "10000", "--checkpoint-every", "5",
                "--dtype", "float64", "--no-report"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on loopback with one bucket; the AWS environment points at it (module-wide)."""
    port = _free_port()
    log = tmp_path_factory.mktemp("moto") / "server.log"
    with open(log, "w") as out:
        server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                  stdout=out, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "RAY_ADDRESS"):
            mp.delenv(name, raising=False)
        mp.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        mp.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
        mp.setenv("AWS_REGION", "us-east-1")
        mp.setenv("AWS_ENDPOINT_URL", endpoint)
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        deadline = time.monotonic() + 30
        while True:
            try:
                client.create_bucket(Bucket=BUCKET)
                break
            except Exception:  # noqa: BLE001 - not listening yet
                if time.monotonic() > deadline or server.poll() is not None:
                    server.kill()
                    raise AssertionError(f"moto server did not start:\n{log.read_text()[-2000:]}") from None
                time.sleep(0.2)
        yield client
    server.kill()
    server.wait()


@pytest.fixture(scope="module")
def local_ray(s3):
    # After the environment is set: Ray's workers inherit it (endpoint, keys) from this process.
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _objects(client, prefix: str = "") -> dict[str, bytes]:
    keys = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
            for o in page.get("Contents", [])]
    return {k: client.get_object(Bucket=BUCKET, Key=k)["Body"].read() for k in keys}


def _sweep_file(root: Path, document: dict) -> Path:
    path = root / f"{document['name']}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _comparable(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.drop("wall_seconds", strict=False).sort("config_id", "seed", *(["step"] if "step" in frame.columns else []))


@pytest.fixture(scope="module")
def tiny_runs(local_ray, tmp_path_factory):
    """The tiny sweep run twice in this process: to s3://BUCKET/x and to a local folder. Returns outputs too."""
    root = tmp_path_factory.mktemp("tiny")
    sweep = _sweep_file(root, TINY)
    cwd = os.getcwd()
    os.chdir(root)  # a local `s3:` folder would appear here
    try:
        assert main(["run", str(sweep), "--storage", f"s3://{BUCKET}/x", *TINY_OPTIONS]) == 0
        assert main(["run", str(sweep), "--storage", str(root / "local"), *TINY_OPTIONS]) == 0
    finally:
        os.chdir(cwd)
    return root, f"s3://{BUCKET}/x/tiny", root / "local" / "tiny"


def test_s3_run_gives_exactly_the_rows_and_numbers_of_a_local_run(tiny_runs, s3):
    root, uri, local = tiny_runs
    for kind in ("scores", "curves"):
        remote, disk = Store.open(uri).scan(kind).collect(), Store.open(local).scan(kind).collect()
        assert remote.height == disk.height > 0
        assert _comparable(remote).equals(_comparable(disk))
    assert Store.open(uri).scan("scores").collect().height == TINY_RUNS
    objects = _objects(s3, "x/tiny/")
    assert any(k.startswith("x/tiny/manifests/") for k in objects) and "x/tiny/store.json" in objects
    assert any("/checkpoint_" in k for k in objects) or any(k.startswith("x/tiny/tune-") for k in objects)  # Tune wrote there
    assert "x/tiny/writer.lock" not in objects  # released
    assert not list(root.glob("s3*")) and not Path("s3:").exists()  # never a local folder named after the URI


def test_readers_and_commands_work_from_the_uri(tiny_runs, s3, tmp_path, capsys):
    _, uri, local = tiny_runs
    assert main(["table", uri, "--format", "csv"]) == 0
    remote_table = capsys.readouterr().out
    assert main(["table", str(local), "--format", "csv"]) == 0
    assert remote_table == capsys.readouterr().out
    assert main(["verify", uri]) == 0
    assert f"{uri}: clean (" in capsys.readouterr().out
    assert main(["status", uri]) == 0
    assert f"sweep {TINY['name']}: finished" in capsys.readouterr().out
    assert main(["report", uri, "--out", str(tmp_path / "report.html")]) == 0
    assert "FADE sweep report: tiny" in (tmp_path / "report.html").read_text()
    assert main(["report", uri]) == 0  # by default into the results folder: the bucket
    assert b"FADE sweep report" in s3.get_object(Bucket=BUCKET, Key="x/tiny/report.html")["Body"].read()
    assert main(["status", uri.rsplit("/", 1)[0]]) == 0  # the storage: its sweeps listed
    assert capsys.readouterr().out.splitlines()[-1].split()[:3] == ["tiny", "linear_tracking", "finished"]
    # other readers straight from the bucket: pyarrow with the store's filesystem, polars with storage options
    import pyarrow.dataset as ds

    location = StoreLocation.parse(uri)
    committed = [location.path(m.files["scores"].path) for m in Store(location).manifests]
    table = ds.dataset(committed, filesystem=location.fs, format="parquet").to_table()
    assert table.num_rows == TINY_RUNS
    options = {"aws_endpoint_url": os.environ["AWS_ENDPOINT_URL"], "aws_region": "us-east-1", "aws_allow_http": "true"}
    direct = pl.scan_parquet(f"{uri}/scores/**/*.parquet", storage_options=options, hive_partitioning=True).collect()
    assert direct.height == TINY_RUNS and set(direct["optimizer"]) == {"sgd", "fade"}


def test_the_confirmation_stage_on_the_bucket_equals_a_local_one(tiny_runs, s3, capsys):
    """`fade-sweep confirm` of the bucket's store and of the local one: the same fresh-seed rows, tables and verify."""
    _, uri, local = tiny_runs
    for where in (uri, str(local)):
        assert main(["confirm", where, "--seeds", "2", "--chunk-steps", "700"]) == 0
    remote, disk = (Store.open(where).scan("scores", stage="confirmation").collect() for where in (uri, local))
    assert remote.height == disk.height == 2 * 2 and set(remote["seed"]) == {2, 3}  # 2 methods x 2 fresh seeds
    assert _comparable(remote).equals(_comparable(disk))
    capsys.readouterr()
    assert main(["table", uri, "--kind", "confirm", "--format", "csv"]) == 0
    remote_table = capsys.readouterr().out
    assert main(["table", str(local), "--kind", "confirm", "--format", "csv"]) == 0
    assert remote_table == capsys.readouterr().out
    assert main(["verify", uri]) == 0 and f"{uri}: clean (" in capsys.readouterr().out
    record = json.loads(s3.get_object(Bucket=BUCKET, Key="x/tiny/confirmation.json")["Body"].read())
    assert record["seeds"] == [2, 3] and record["tuning_seeds"] == [0, 1]  # the stage's record lives in the bucket


def _packs_in_store(uri: str) -> int:
    try:
        return len(Store.open(uri).finished_runs()) // 2
    except Exception:  # noqa: BLE001 - mid-write
        return 0


def test_second_writer_refused_kill_9_and_resume_on_the_bucket(local_ray, s3, tmp_path, capsys):
    sweep = _sweep_file(tmp_path, LONG)
    storage, uri = f"s3://{BUCKET}/y", f"s3://{BUCKET}/y/long"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    first = subprocess.Popen([sys.executable, "-m", "sweeps.cli", "run", str(sweep), "--storage", storage, *LONG_OPTIONS],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True,
                             cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        # the driver's hold (the CLI's preflight takes the lease and lets it go again; the driver takes it
        # for the whole run and then records the sweep under it)
        while "y/long/store.json" not in _objects(s3, "y/long/store.json"):
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()[0][-3000:]
            time.sleep(0.2)
        # a second writer: refused at once, one line naming the store and the holder, exit 2
        started = time.monotonic()
        assert main(["run", str(sweep), "--storage", storage, *LONG_OPTIONS]) == 2
        err = capsys.readouterr().err
        assert f"fade-sweep: error: {uri} is being written by pid {first.pid} on " in err and err.count("\n") == 1
        assert time.monotonic() - started < 10
        # kill -9 between packs
        while not 0 < _packs_in_store(uri) < LONG_PACKS:
            assert first.poll() is None and time.monotonic() < deadline + 60, first.communicate()[0][-3000:]
            time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):  # it may have ended by itself (the assertion above says why)
            os.killpg(first.pid, signal.SIGKILL)
        output = first.communicate()[0]
    assert SECRET not in output and ACCESS_KEY not in output
    assert main(["status", uri]) == 0
    assert f"driver (pid {first.pid}) is not running" in capsys.readouterr().out
    assert main(["run", str(sweep), "--storage", storage, "--resume", *LONG_OPTIONS[2:]]) == 0
    out = capsys.readouterr()
    assert SECRET not in out.out + out.err
    reference = scores_in_process(LONG)
    scores = Store.open(uri).scan("scores").collect()
    assert scores.height == len(reference) == scores.select("config_id", "seed").unique().height
    for row in scores.iter_rows(named=True):
        assert row["score"] == reference[(row["config_id"], row["seed"])]  # bit for bit
    assert Store.open(uri).scan("curves").collect().height == len(reference) * 10
    assert main(["verify", uri]) == 0  # orphans of the killed write removed, nothing counted twice


@pytest.mark.parametrize(
    ("storage", "shown", "why"),
    [
        ("s3://fade-results/z?endpoint_override=127.0.0.1:9&scheme=http", "s3://fade-results/z", "cannot reach the object store"),
        ("s3://no-such-bucket/z", "s3://no-such-bucket/z", "bucket no-such-bucket does not exist"),
        ("ftp://x/y", "ftp://x/y", "the store cannot serve ftp:// URIs"),
        (f"s3://{ACCESS_KEY}:{SECRET}@fade-results/z", "s3://fade-results/z", "credentials do not belong in the URI"),
    ],
    ids=["wrong-endpoint", "missing-bucket", "ftp", "credentials-in-uri"],
)
def test_bad_storage_is_one_line_naming_the_uri_exit_2_in_seconds(s3, tmp_path, capsys, monkeypatch, storage, shown, why):
    monkeypatch.chdir(tmp_path)
    sweep = _sweep_file(tmp_path, TINY)
    for argv in (["run", str(sweep), "--storage", storage], ["table", storage], ["verify", storage], ["status", storage]):
        started = time.monotonic()
        assert main(argv) == 2, argv
        assert time.monotonic() - started < 20, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("fade-sweep: error: "), err
        assert shown in err and why in err, err
        assert SECRET not in err and ACCESS_KEY not in err and "endpoint_override" not in err, err
    assert list(tmp_path.iterdir()) == [sweep]  # nothing local written: no `s3:` or `ftp:` folder


def test_no_credential_in_any_object_of_the_bucket(tiny_runs, s3):
    objects = _objects(s3)
    assert objects
    leaked = [k for k, body in objects.items() if SECRET.encode() in body or ACCESS_KEY.encode() in body]
    assert leaked == []


def test_submit_accepts_a_uri_and_carries_no_credential(monkeypatch, tmp_path):
    from sweeps.cli import jobs

    sent = {}

    class FakeClient:
        def submit_job(self, **kw):
            sent.update(kw)
            return "raysubmit_1"

    monkeypatch.setattr(jobs, "client", lambda address: FakeClient())
    sweep = parse_sweep(TINY, "tiny")
    assert jobs.submit(sweep, "http://127.0.0.1:8265", f"s3://{BUCKET}/x", []) == "raysubmit_1"
    assert f"run --storage s3://{BUCKET}/x --address auto" in sent["entrypoint"]
    assert "mkdir -p s3:" not in sent["entrypoint"] and "cd s3:" not in sent["entrypoint"]
    dumped = json.dumps({k: v for k, v in sent.items() if k != "runtime_env"}) + json.dumps(sent["runtime_env"].get("env_vars", {}))
    assert SECRET not in dumped and ACCESS_KEY not in dumped


def test_object_storage_cluster_configs():
    configs = Path(__file__).resolve().parents[1] / "cluster" / "configs"
    aws = yaml.safe_load((configs / "ray-cluster.aws.s3.yaml").read_text())
    assert all("IamInstanceProfile" in t["node_config"] for t in aws["available_node_types"].values())
    assert not any("efs" in c for c in aws["setup_commands"])
    head = " ".join(aws["head_start_ray_commands"])
    assert "RAY_AUTH_MODE=token" in head and "--dashboard-host=127.0.0.1" in head
    documents = list(yaml.safe_load_all((configs / "raycluster.kuberay.s3.yaml").read_text()))
    account = next(d for d in documents if d["kind"] == "ServiceAccount")
    assert "eks.amazonaws.com/role-arn" in account["metadata"]["annotations"]
    cluster = next(d for d in documents if d["kind"] == "RayCluster")
    pods = [cluster["spec"]["headGroupSpec"]["template"]["spec"], *(g["template"]["spec"] for g in cluster["spec"]["workerGroupSpecs"])]
    for pod in pods:
        assert pod["serviceAccountName"] == account["metadata"]["name"] and "volumes" not in pod
        assert not any(e["name"].startswith("AWS_SECRET") for e in pod["containers"][0]["env"])


LEASE_URI, LEASE_KEY = f"s3://{BUCKET}/lease/store", "lease/store/writer.lock"


@pytest.fixture
def leases(s3, monkeypatch):
    """Leases on LEASE_URI driven by hand: no heartbeat thread unless a test starts one; the sweep
    interruption a lost lease raises is recorded in an event instead of hitting pytest."""
    import _thread

    from sweeps.store import lease

    interrupted = threading.Event()
    monkeypatch.setattr(_thread, "interrupt_main", lambda *a: interrupted.set())
    made = []

    def new_lease(interval: float = 3600.0) -> lease.LeaseLock:
        made.append(lease.LeaseLock(StoreLocation.parse(LEASE_URI), "fade-sweep run lease-test"))
        made[-1].interval = interval
        return made[-1]

    yield new_lease, interrupted
    for each in made:
        each.release()
    s3.delete_object(Bucket=BUCKET, Key=LEASE_KEY)


def _lease_body(s3) -> dict:
    return json.loads(s3.get_object(Bucket=BUCKET, Key=LEASE_KEY)["Body"].read())


OTHER = {"pid": 1, "host": "elsewhere", "owner": "x", "started": "then"}


def test_lease_lock_on_the_bucket(s3, leases, caplog):
    from sweeps.store.holder import StoreLocked

    new_lease, interrupted = leases
    first = new_lease()
    first.acquire()
    body = _lease_body(s3)
    assert body["pid"] == os.getpid() and body["owner"] == first.owner and body["expires_at"] > time.time()
    assert first.renew() and _lease_body(s3)["expires_at"] > body["expires_at"]  # renewed: still ours, later expiry
    with pytest.raises(StoreLocked, match=f"{LEASE_URI} is being written by pid {os.getpid()} on "):
        StoreLocation.parse(LEASE_URI).writer_lock().acquire()
    # another writer took the lease over (this one was frozen): the next renewal fails and stops the sweep
    s3.put_object(Bucket=BUCKET, Key=LEASE_KEY, Body=json.dumps({**OTHER, "expires_at": time.time() + 60}).encode())
    assert not interrupted.is_set() and first.renew() is False and interrupted.is_set()
    assert "lost the writer lock: another writer took the store over (pid 1 on elsewhere" in caplog.text
    first.release()
    assert _lease_body(s3)["owner"] == "x"  # not ours: left alone
    # an expired lease is taken over with a notice; release deletes it
    s3.put_object(Bucket=BUCKET, Key=LEASE_KEY, Body=json.dumps({**OTHER, "expires_at": time.time() - 1}).encode())
    second = StoreLocation.parse(LEASE_URI).writer_lock().acquire()
    assert "taking over the stale lock of pid 1 on elsewhere" in caplog.text
    second.release()
    assert LEASE_KEY not in _objects(s3, "lease/")


def test_a_takeover_between_read_and_renewal_is_never_overwritten(s3, leases, caplog):
    new_lease, interrupted = leases
    first = new_lease()
    first.acquire()
    write = first.object.write

    def taken_over_first(data: bytes) -> bool:  # the other writer's takeover lands just before our write
        s3.put_object(Bucket=BUCKET, Key=LEASE_KEY, Body=json.dumps({**OTHER, "expires_at": time.time() + 60}).encode())
        return write(data)

    first.object.write = taken_over_first
    assert first.renew() is False and interrupted.is_set()
    assert _lease_body(s3)["owner"] == "x"  # the renewal lost the race and wrote nothing
    assert "lost the writer lock: another writer took the store over (pid 1 on elsewhere" in caplog.text


@pytest.mark.parametrize("previous", ["free", "expired"])
def test_two_writers_racing_for_the_lock_exactly_one_wins(s3, leases, previous):
    from sweeps.store.holder import StoreLocked

    new_lease, _ = leases
    if previous == "expired":
        s3.put_object(Bucket=BUCKET, Key=LEASE_KEY, Body=json.dumps({**OTHER, "expires_at": time.time() - 1}).encode())
    loser, winner = new_lease(), new_lease()
    write = loser.object.write

    def overtaken(data: bytes) -> bool:  # the winner's whole take lands between the loser's read and its write
        winner.acquire()
        return write(data)

    loser.object.write = overtaken
    with pytest.raises(StoreLocked, match=f"{LEASE_URI} is being written by pid {os.getpid()} on "):
        loser.acquire()
    assert _lease_body(s3)["owner"] == winner.owner
    assert winner.renew()


def test_heartbeat_notices_a_takeover_and_stops_cleanly(s3, leases):
    new_lease, interrupted = leases
    lease = new_lease(interval=0.05)
    renewed = threading.Event()
    renew = lease.renew
    lease.renew = lambda: renewed.set() or renew()
    lease.acquire()
    assert renewed.wait(120)  # the thread renews (waits for the event, however loaded the machine)
    s3.put_object(Bucket=BUCKET, Key=LEASE_KEY, Body=json.dumps({**OTHER, "expires_at": time.time() + 60}).encode())
    assert interrupted.wait(120)
    lease.release()
    assert not lease._thread.is_alive() and _lease_body(s3)["owner"] == "x"


def test_a_writer_exiting_without_release_frees_the_lease_quietly(s3):
    """At interpreter exit the heartbeat is stopped and joined before the S3 subsystem finalizes."""
    script = f"import time; from sweeps.store import StoreLocation; StoreLocation.parse({LEASE_URI!r}).writer_lock().acquire(); time.sleep(1.5)"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[1], env={**os.environ, "FADE_SWEEP_LEASE_SECONDS": "2"})
    assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]
    assert LEASE_KEY not in _objects(s3, "lease/")
