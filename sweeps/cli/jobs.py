"""Submit a sweep to a running Ray cluster as a Ray Job, and follow it (status, logs).

The job runs `python -m sweeps.cli run` on the cluster, attached to it (`--address auto`).
The project's packages travel in the job's runtime environment (py_modules) with the
sweep file (working_dir); the cluster's image must provide the dependencies (torch,
numba, ray, pyarrow, polars), or name extra pip requirements with `pip`.
Calls authenticate with the cluster's token: Ray's client reads RAY_AUTH_TOKEN,
RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import tempfile
from pathlib import Path
from urllib.parse import urlparse

import yaml
from ray.job_submission import JobStatus, JobSubmissionClient

import cluster
import fade_core
import sweeps
import tasks
from cluster.connect import SHIPPED_MODULES, check_reachable
from cluster.errors import ClusterError
from sweeps.spec import Sweep
from sweeps.store.location import StoreLocation, is_uri


# Jobs live on a running cluster: no embedded Ray to fall back on (`run` is the command that runs here).
JOBS_FIX = ("the cluster is unreachable: check the address (its dashboard, http://HOST:8265) and that the cluster is up "
            "(`python -m cluster.local up` starts one on this machine); to run a sweep here instead, `fade-sweep run SWEEP`")


def client(address: str | None) -> JobSubmissionClient:
    """A job client for the dashboard at `address` (http://HOST:8265), failing fast if unreachable."""
    if address:
        parsed = urlparse(address if "://" in address else f"http://{address}")
        if parsed.scheme not in ("http", "https") or not parsed.port:
            raise ClusterError(f"bad job address {address!r}: expected http://HOST:PORT (the dashboard, usually port 8265)")
        check_reachable(f"{parsed.hostname}:{parsed.port}", what="Ray dashboard", fix=JOBS_FIX)
        address = f"{parsed.scheme}://{parsed.hostname}:{parsed.port}"
    try:
        return JobSubmissionClient(address)
    except (ConnectionError, RuntimeError, ValueError) as err:
        where = address or os.environ.get("RAY_ADDRESS") or "this machine (no --address, RAY_ADDRESS unset)"
        raise ClusterError(f"cannot reach the Ray job server at {where} ({err}); {JOBS_FIX}") from None


def is_missing_job(err: RuntimeError) -> bool:
    """Whether the job server's error says the job does not exist (HTTP 404), not that the request failed."""
    return "status code 404" in str(err) or "does not exist" in str(err)


def submit(sweep: Sweep, address: str, storage: str, run_args: list[str], pip: list[str] | None = None) -> str:
    """Submit the sweep; returns the job id. `storage` is an object-store URI (s3://, gs://) every node can
    reach with its own credentials, or an absolute path the cluster's nodes share."""
    remote = is_uri(storage)
    if remote:
        location = StoreLocation.parse(storage)  # unsupported schemes, credentials in the URI: StorageError (exit 2)
        if location.local_path is not None:
            storage = str(location.local_path)  # file:///x is the local path /x
            remote = False
    if not remote and not storage.startswith("/"):
        raise ClusterError(
            f"--storage {storage}: give an object-store URI (s3://BUCKET/PREFIX) or an absolute path on a filesystem "
            "that every node of the cluster mounts"
        )
    job_client = client(address)
    staging = Path(tempfile.mkdtemp(prefix="fade-sweep-job-"))
    try:
        (staging / "sweep.yaml").write_text(yaml.safe_dump(sweep.document, sort_keys=False))
        own = sorted({d.module_file for d in sweep.learners if d.module_file})
        for module in own:  # a researcher's module beside the sweep file stays beside it, and reaches the workers
            shutil.copy(module, staging / Path(module).name)
        runtime_env = {
            "working_dir": str(staging),
            "py_modules": [*(str(Path(m.__file__).parent) for m in (fade_core, tasks, sweeps, cluster)), *own],
            "env_vars": {SHIPPED_MODULES: "1"},  # the job's driver then adds none of its own (connect.py)
        }
        if pip:
            runtime_env["pip"] = pip
        if os.environ.get("FADE_SWEEP_DEBUG"):
            runtime_env["env_vars"]["FADE_SWEEP_DEBUG"] = os.environ["FADE_SWEEP_DEBUG"]
        command = ["python", "-m", "sweeps.cli", "run", "--storage", storage, "--address", "auto", *run_args]
        # Run from the storage directory (a local store) or a scratch directory (an object store):
        # Ray may clean up the job's working_dir before the driver ends, and Tune resolves paths
        # against the current directory. The sweep file is read at start, from the working_dir
        # left behind in $OLDPWD. Credentials are never part of the job: the cluster's nodes use
        # their own (instance role / workload identity); the URI carries no secret (see location.py).
        here = shlex.quote(storage) if not remote else '"$(mktemp -d -t fade-sweep-job-XXXXXX)"'
        entrypoint = f'mkdir -p {here} && cd {here} && {shlex.join(command)} "$OLDPWD/sweep.yaml"' if not remote \
            else f'cd {here} && {shlex.join(command)} "$OLDPWD/sweep.yaml"'
        metadata = {"sweep": sweep.name, "storage": StoreLocation.parse(storage).display if remote else storage}
        return job_client.submit_job(entrypoint=entrypoint, runtime_env=runtime_env, metadata=metadata)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def status(address: str | None, job_id: str | None) -> list[tuple[str, str, str]]:
    """(job id, status, sweep) of one job, or of every job of the cluster."""
    job_client = client(address)
    if job_id:
        info = job_client.get_job_info(job_id)
        return [(job_id, str(info.status), (info.metadata or {}).get("sweep", ""))]
    return [
        (j.submission_id or j.job_id or "", str(j.status), (j.metadata or {}).get("sweep", ""))
        for j in job_client.list_jobs()
        if (j.metadata or {}).get("sweep")
    ]


def logs(address: str | None, job_id: str, follow: bool, write=print) -> JobStatus:
    """Print the job's logs (all of them, then new lines until it ends if `follow`); returns its status."""
    job_client = client(address)
    if not follow:
        write(job_client.get_job_logs(job_id), end="")
        return job_client.get_job_status(job_id)

    async def tail() -> None:
        async for lines in job_client.tail_job_logs(job_id):
            write(lines, end="")

    asyncio.run(tail())
    return job_client.get_job_status(job_id)
