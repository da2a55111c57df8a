"""Where a store lives: a local folder or an object-store prefix (`s3://`, `gs://`), one interface.

    location = StoreLocation.parse("s3://bucket/prefix/linear-demo")   # or "results/linear-demo"
    location.write_bytes("store.json", data)       # atomic: readers see the old or the new object, never a part
    location.read_bytes("store.json"); location.list("manifests"); location.delete("x"); location.exists("x")
    location / "sub"                               # a child location

A URI is never taken for a local path: `scheme://...` with a scheme the store cannot serve is
a StorageError (exit 2), and so is a URI carrying credentials. Credentials come from the
standard chains of the filesystem (AWS: environment, ~/.aws config files, instance or
workload roles; GCS: application default credentials), never from the URI; they are never
printed, logged or written. S3-compatible stores (MinIO, Ceph): `AWS_ENDPOINT_URL` (or
`AWS_ENDPOINT_URL_S3`) in the environment, or `?endpoint_override=host:port` in the URI
(`&scheme=http` for a plain-HTTP endpoint, `&region=...`). Messages show a URI without
its query string (`display`); `uri` keeps the allowed query keys (endpoint, scheme,
region: never a secret) so that another process (a Ray worker, a submitted job) can
rebuild the same location.

Writes: local files go to a hidden temporary name, are fsynced and renamed into place;
objects are written in one request (a PUT, or a multipart upload completed at close): on
S3 and GCS an object appears whole or not at all. `s3_client` gives boto3 for the conditional
writes pyarrow cannot send (S3 `If-None-Match` / `If-Match`): the writer lease's building block.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Self
from urllib.parse import parse_qsl, urlsplit

import pyarrow.fs as pafs

from sweeps.spec import SweepError
from sweeps.store.uris import URI_SCHEME, is_uri, redact

OBJECT_SCHEMES = ("s3", "gs", "gcs")
QUERY_KEYS = ("endpoint_override", "scheme", "region")
CONNECT_TIMEOUT_S = 5.0
REQUEST_TIMEOUT_S = 60.0


class StorageError(SweepError):
    """A storage target that cannot be used (unsupported URI, unreachable store, missing bucket): exit 2."""


@dataclass(frozen=True)
class Entry:
    """A file (object) under a location: its path relative to the location, size and modification time."""

    rel: str
    size: int
    mtime_ns: int

    @property
    def name(self) -> str:
        return self.rel.rsplit("/", 1)[-1]


def _endpoint(query: dict[str, str]) -> tuple[str | None, str | None]:
    """(host[:port][/path], scheme) of a custom S3 endpoint, from the URI's query or the environment."""
    endpoint = query.get("endpoint_override") or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    scheme = query.get("scheme")
    if endpoint and "://" in endpoint:
        parts = urlsplit(endpoint)
        scheme = scheme or parts.scheme
        endpoint = parts.netloc + parts.path.rstrip("/")
    return endpoint or None, scheme


@functools.lru_cache(maxsize=32)
def _s3_filesystem(bucket: str, endpoint: str | None, scheme: str | None, region: str | None) -> pafs.FileSystem:
    if not region and not endpoint:
        try:
            region = pafs.resolve_s3_region(bucket)
        except (OSError, ValueError):
            region = None  # the SDK's default; a missing bucket is reported by `check`
    return pafs.S3FileSystem(
        endpoint_override=endpoint,
        scheme=scheme or "https",
        region=region,
        connect_timeout=CONNECT_TIMEOUT_S,
        request_timeout=REQUEST_TIMEOUT_S,
        retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=3),
        allow_delayed_open=True,  # an object smaller than one upload part is one PutObject at close
    )


@dataclass(frozen=True, eq=False)
class StoreLocation:
    """A folder of a pyarrow filesystem: `base` is the path in `fs` (a local absolute path, or bucket/prefix)."""

    fs: pafs.FileSystem
    base: str
    uri: str  # rebuilds this location anywhere (no credentials; allowed query keys only)
    display: str  # for messages: no query string
    local: bool
    query: str = ""  # "?endpoint_override=..." as given (allowed keys only), appended to child URIs

    # ------------------------------------------------------------ construction

    @classmethod
    def parse(cls, target: str | os.PathLike | Self) -> Self:
        """A location from a local path or a URI; StorageError for what the store cannot serve."""
        if isinstance(target, StoreLocation):
            return target
        text = os.fspath(target) if not isinstance(target, str) else target
        match = URI_SCHEME.match(text)
        if not match:
            typo = re.match(r"^(s3|gs|gcs|file):/?(?!/)", text, re.IGNORECASE)
            if typo:  # `s3:/bucket` or `s3:bucket` would otherwise become a local folder named `s3:`
                raise StorageError(f"storage {redact(text)}: a URI needs two slashes: write {typo.group(1)}://BUCKET/PREFIX (a local folder may not start with {typo.group(1)}:)")
            path = Path(text).expanduser()
            return cls(pafs.LocalFileSystem(), str(path.absolute()), str(path.absolute()), str(path), True)
        scheme = match.group(1).lower()
        parts = urlsplit(text)
        shown = redact(f"{scheme}://{parts.netloc.rsplit('@', 1)[-1]}{parts.path}")
        if scheme == "file":
            path = Path(parts.path or "/")
            return cls(pafs.LocalFileSystem(), str(path), str(path), str(path), True)
        if scheme not in OBJECT_SCHEMES:
            raise StorageError(
                f"storage {shown}: the store cannot serve {scheme}:// URIs; give a local path, s3://BUCKET/PREFIX or gs://BUCKET/PREFIX"
            )
        if "@" in parts.netloc or parts.password:
            raise StorageError(
                f"storage {shown}: credentials do not belong in the URI; use the environment, config files or an instance role"
            )
        if parts.fragment:
            raise StorageError(f"storage {shown}: a storage URI takes no #fragment")
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        unknown = sorted(set(query) - set(QUERY_KEYS))
        if unknown:
            raise StorageError(f"storage {shown}: unknown query key(s) {', '.join(unknown)} (allowed: {', '.join(QUERY_KEYS)})")
        bucket = parts.netloc
        if not bucket:
            raise StorageError(f"storage {shown}: no bucket (expected {scheme}://BUCKET/PREFIX)")
        base = (bucket + "/" + parts.path.strip("/")).rstrip("/")
        if scheme == "s3":
            endpoint, http = _endpoint(query)
            region = query.get("region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
            fs = _s3_filesystem(bucket, endpoint, http, region)
        else:
            if query:
                raise StorageError(f"storage {shown}: query keys are for s3:// only")
            try:
                fs, _ = pafs.FileSystem.from_uri(f"gs://{base}")
            except (OSError, ValueError) as err:
                raise StorageError(f"storage {shown}: {redact(str(err).splitlines()[0])}") from None
        q = f"?{parts.query}" if parts.query else ""
        return cls(fs, base, f"{scheme}://{base}{q}", f"{scheme}://{base}", False, q)

    def __truediv__(self, name: str) -> Self:
        name = str(name).strip("/")
        if self.local:
            path = str(Path(self.base) / name)
            return StoreLocation(self.fs, path, path, str(Path(self.display) / name), True)
        base = f"{self.base}/{name}"
        scheme = self.display.split("://", 1)[0]
        return StoreLocation(self.fs, base, f"{scheme}://{base}{self.query}", f"{scheme}://{base}", False, self.query)

    def __str__(self) -> str:
        return self.display

    def __repr__(self) -> str:
        return f"StoreLocation({self.display!r})"

    def __fspath__(self) -> str:
        if not self.local:
            raise TypeError(f"{self.display} is not a local path")
        return self.base

    @property
    def name(self) -> str:
        return self.base.rstrip("/").rsplit("/", 1)[-1]

    @property
    def parent(self) -> Self:
        if self.local:
            return StoreLocation.parse(Path(self.base).parent)
        head = self.base.rsplit("/", 1)[0]
        scheme = self.display.split("://", 1)[0]
        return StoreLocation(self.fs, head, f"{scheme}://{head}{self.query}", f"{scheme}://{head}", False, self.query)

    @property
    def local_path(self) -> Path:
        if not self.local:
            raise TypeError(f"{self.display} is not a local path")
        return Path(self.base)

    @property
    def bucket(self) -> str | None:
        return None if self.local else self.base.split("/", 1)[0]

    def path(self, rel: str = "") -> str:
        """The path of `rel` in `fs`."""
        return f"{self.base}/{rel}".rstrip("/") if rel else self.base

    def url(self, rel: str = "") -> str:
        """`rel` as users see it (no query string)."""
        if self.local:
            return str(Path(self.display) / rel) if rel else self.display
        return f"{self.display}/{rel}" if rel else self.display

    def tune_storage(self) -> tuple[str, pafs.FileSystem | None]:
        """(storage_path, storage_filesystem) for Ray Tune's RunConfig: a local path, or the bucket path and this fs."""
        return (self.base, None) if self.local else (self.base, self.fs)

    # ------------------------------------------------------------ checks

    def check(self) -> None:
        """StorageError (one line, naming the URI without credentials) if the store cannot be reached; local: no-op."""
        if self.local:
            return
        try:
            info = self.fs.get_file_info(self.bucket)
        except OSError as err:
            raise StorageError(f"storage {self.display}: cannot reach the object store ({_reason(err)})") from None
        if info.type == pafs.FileType.NotFound:
            raise StorageError(f"storage {self.display}: bucket {self.bucket} does not exist (or these credentials cannot see it)")

    # ------------------------------------------------------------ reading

    def info(self, rel: str = "") -> pafs.FileInfo:
        return self._call(self.fs.get_file_info, self.path(rel))

    def exists(self, rel: str = "") -> bool:
        if self.local:
            return os.path.exists(self.path(rel))
        return self.info(rel).type != pafs.FileType.NotFound

    def is_file(self, rel: str) -> bool:
        if self.local:
            return os.path.isfile(self.path(rel))
        return self.info(rel).type == pafs.FileType.File

    def is_dir(self, rel: str = "") -> bool:
        """A folder (locally), or a prefix with at least one object under it."""
        if self.local:
            return os.path.isdir(self.path(rel))
        return self.info(rel).type == pafs.FileType.Directory

    def size(self, rel: str) -> int:
        if self.local:
            return os.stat(self.path(rel)).st_size
        info = self.info(rel)
        if info.type != pafs.FileType.File:
            raise FileNotFoundError(self.url(rel))
        return info.size

    def read_bytes(self, rel: str) -> bytes:
        """The content of `rel`; FileNotFoundError if absent."""
        if self.local:
            return Path(self.path(rel)).read_bytes()
        try:
            with self.fs.open_input_stream(self.path(rel)) as f:
                return f.read()
        except FileNotFoundError:
            raise FileNotFoundError(self.url(rel)) from None
        except OSError as err:
            if "not found" in str(err).lower() or "nosuchkey" in str(err).lower():
                raise FileNotFoundError(self.url(rel)) from None
            raise StorageError(f"{self.url(rel)}: cannot read ({_reason(err)})") from None

    def read_text(self, rel: str) -> str:
        return self.read_bytes(rel).decode()

    def open_input(self, rel: str):
        """A seekable binary file (for pyarrow.parquet.ParquetFile)."""
        if self.local:
            return open(self.path(rel), "rb")  # noqa: SIM115 - the caller closes it
        return self._call(self.fs.open_input_file, self.path(rel))

    def sha256(self, rel: str) -> str:
        with self.open_input(rel) as f:
            return hashlib.file_digest(f, "sha256").hexdigest()

    def list(self, rel: str = "", recursive: bool = False) -> list[Entry]:
        """Files (objects) under `rel`, sorted by path; [] if there is none. Hidden local files included."""
        if self.local:
            root = Path(self.path(rel))
            if not root.is_dir():
                return []
            found = root.rglob("*") if recursive else root.iterdir()
            entries = []
            for p in found:
                try:
                    st = p.stat()
                except FileNotFoundError:
                    continue
                if p.is_file():
                    entries.append(Entry(p.relative_to(self.base).as_posix(), st.st_size, st.st_mtime_ns))
            return sorted(entries, key=lambda e: e.rel)
        selector = pafs.FileSelector(self.path(rel), recursive=recursive, allow_not_found=True)
        infos = self._call(self.fs.get_file_info, selector)
        prefix = self.base + "/"
        return sorted(
            (Entry(i.path[len(prefix):], i.size or 0, i.mtime_ns or 0) for i in infos if i.type == pafs.FileType.File),
            key=lambda e: e.rel,
        )

    def children(self, rel: str = "") -> list[str]:
        """Names of the folders (prefixes) directly under `rel`, sorted."""
        if self.local:
            root = Path(self.path(rel))
            return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        selector = pafs.FileSelector(self.path(rel), recursive=False, allow_not_found=True)
        infos = self._call(self.fs.get_file_info, selector)
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory)

    # ------------------------------------------------------------ writing

    def makedirs(self, rel: str = "") -> None:
        """Locally: create the folder. Object stores have no folders: nothing to do."""
        if self.local:
            os.makedirs(self.path(rel), exist_ok=True)

    def write_bytes(self, rel: str, data: bytes, *, durable: bool = False) -> None:
        """Write so that readers see the old or the new content, never a part."""
        if self.local:
            path = Path(self.path(rel))
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
            try:
                tmp.write_bytes(data)
                if durable:
                    _fsync(tmp)
                os.replace(tmp, path)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            return
        self._put(rel, lambda f: f.write(data))

    def write_with(self, rel: str, write) -> tuple[int, str]:
        """Write a new file with `write(binary file)` atomically and durably; returns (bytes, sha256)."""
        if self.local:
            path = Path(self.path(rel))
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
            try:
                with open(tmp, "wb") as f:
                    write(f)
                _fsync(tmp)
                with open(tmp, "rb") as f:
                    result = (tmp.stat().st_size, hashlib.file_digest(f, "sha256").hexdigest())
                os.replace(tmp, path)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            return result
        import io

        buffer = io.BytesIO()
        write(buffer)
        data = buffer.getvalue()
        self._put(rel, lambda f: f.write(data))
        return len(data), hashlib.sha256(data).hexdigest()

    def s3_client(self):
        """A boto3 client on this location's S3 endpoint, region and credential chain, for what pyarrow
        cannot send: conditional writes (If-None-Match / If-Match, the writer lease). None where the
        store is not S3 or boto3 is not installed."""
        if self.local or not isinstance(self.fs, pafs.S3FileSystem):
            return None
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            return None
        endpoint, scheme = _endpoint(dict(parse_qsl(self.query.lstrip("?"))))
        return boto3.client(
            "s3",
            endpoint_url=f"{scheme or 'https'}://{endpoint}" if endpoint else None,
            region_name=getattr(self.fs, "region", None) or None,
            config=Config(connect_timeout=CONNECT_TIMEOUT_S, read_timeout=REQUEST_TIMEOUT_S, retries={"max_attempts": 2}),
        )

    def delete(self, rel: str) -> None:
        """Remove a file (object); absent is fine."""
        if self.local:
            Path(self.path(rel)).unlink(missing_ok=True)
            return
        try:
            self.fs.delete_file(self.path(rel))
        except FileNotFoundError:
            pass
        except OSError as err:
            if "not found" not in str(err).lower():
                raise StorageError(f"{self.url(rel)}: cannot delete ({_reason(err)})") from None

    # ------------------------------------------------------------ helpers

    def _put(self, rel: str, write) -> None:
        try:
            with self.fs.open_output_stream(self.path(rel)) as f:
                write(f)
        except OSError as err:
            raise StorageError(f"{self.url(rel)}: cannot write ({_reason(err)})") from None

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except FileNotFoundError:
            raise
        except OSError as err:
            if self.local:
                raise
            raise StorageError(f"storage {self.display}: {_reason(err)}") from None


def _reason(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return redact(" ".join(lines)[:300] or type(err).__name__)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def as_location(target: str | os.PathLike | StoreLocation) -> StoreLocation:
    """A StoreLocation from whatever a caller gives (a Path, a path string, a URI, a location)."""
    return StoreLocation.parse(target)
