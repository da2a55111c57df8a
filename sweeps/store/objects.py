"""A store under an object-store prefix (`s3://`, `gs://`): the object half of `StoreLocation`.

One pyarrow filesystem per bucket and endpoint. Credentials come from the standard chains
of the filesystem (AWS: environment, ~/.aws config files, instance or workload roles; GCS:
application default credentials), never from the URI; they are never printed, logged or
written. S3-compatible stores (MinIO, Ceph): `AWS_ENDPOINT_URL` (or `AWS_ENDPOINT_URL_S3`)
in the environment, or `?endpoint_override=host:port` in the URI (`&scheme=http` for a
plain-HTTP endpoint, `&region=...`): the only query keys, never a secret, kept in `uri` so
that another process (a Ray worker, a submitted job) can rebuild the same location.

Objects are written in one request (a PUT, or a multipart upload completed at close): on
S3 and GCS an object appears whole or not at all. `s3_client` gives boto3 for the conditional
writes pyarrow cannot send (S3 `If-None-Match` / `If-Match`): the building block of the writer
lock, a lease (lease.py).

pyarrow loads with the first object-store URI parsed: a local store's light commands do without it.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
from dataclasses import replace
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Self
from urllib.parse import SplitResult, parse_qsl, urlsplit

from sweeps.store.holder import WriterLock
from sweeps.store.lease import LeaseLock
from sweeps.store.uris import Entry, StorageError, reason, redact

if TYPE_CHECKING:
    import polars as pl
    import pyarrow.fs as pafs

OBJECT_SCHEMES = ("s3", "gs", "gcs")
QUERY_KEYS = ("endpoint_override", "scheme", "region")
CONNECT_TIMEOUT_S = 5.0
REQUEST_TIMEOUT_S = 60.0


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
    import pyarrow.fs as pafs

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


def object_filesystem(scheme: str, parts: SplitResult, shown: str) -> tuple[pafs.FileSystem, str, str]:
    """(filesystem, bucket/prefix, "?query" as given) of an object-store URI; StorageError (naming
    `shown`, the URI without secrets) for credentials, a fragment, unknown query keys or no bucket."""
    import pyarrow.fs as pafs

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
    return fs, base, f"?{parts.query}" if parts.query else ""


class ObjectPrefix:
    """File operations under an object-store prefix. A mixin of `StoreLocation`: it uses `fs`,
    `base` (bucket/prefix), `display` (the URI without its query), `query` and `path(rel)`."""


    # ------------------------------------------------------------ naming

    def _at(self, base: str) -> Self:
        scheme = self.display.split("://", 1)[0]
        return replace(self, base=base, uri=f"{scheme}://{base}{self.query}", display=f"{scheme}://{base}")

    def child(self, name: str) -> Self:
        return self._at(f"{self.base}/{name}")

    @property
    def parent(self) -> Self:
        return self._at(self.base.rsplit("/", 1)[0])

    def absolute(self) -> Self:
        """This location (a URI names it absolutely already)."""
        return self

    @property
    def local_path(self) -> None:
        """None: an object store has no path on this machine."""
        return None

    def __fspath__(self) -> str:
        raise TypeError(f"{self.display} is not a local path")

    @property
    def bucket(self) -> str:
        return self.base.split("/", 1)[0]

    def url(self, rel: str = "") -> str:
        """`rel` as users see it (no query string)."""
        return f"{self.display}/{rel}" if rel else self.display

    def tune_storage(self) -> tuple[str, pafs.FileSystem]:
        """(storage_path, storage_filesystem) for Ray Tune's RunConfig: the bucket path and this filesystem."""
        return self.base, self.fs

    def writer_lock(self, command: str | None = None) -> WriterLock:
        """The store's writer lock, not yet taken: a lease object renewed by a heartbeat while held
        (lease.py). `command`: what the holder record names (default: this process's command line)."""
        return LeaseLock(self, command)

    def check(self) -> None:
        """StorageError (one line, naming the URI without credentials) if the store cannot be reached."""
        try:
            info = self.fs.get_file_info(self.bucket)
        except OSError as err:
            raise StorageError(f"storage {self.display}: cannot reach the object store ({reason(err)})") from None
        if info.type.name == "NotFound":
            raise StorageError(f"storage {self.display}: bucket {self.bucket} does not exist (or these credentials cannot see it)")

    # ------------------------------------------------------------ reading

    def info(self, rel: str = "") -> pafs.FileInfo:
        return self._call(self.fs.get_file_info, self.path(rel))

    def exists(self, rel: str = "") -> bool:
        return self.info(rel).type.name != "NotFound"  # pyarrow's FileType, by name

    def is_file(self, rel: str) -> bool:
        return self.info(rel).type.name == "File"

    def is_dir(self, rel: str = "") -> bool:
        """A prefix with at least one object under it."""
        return self.info(rel).type.name == "Directory"

    def size(self, rel: str) -> int:
        info = self.info(rel)
        if info.type.name != "File":
            raise FileNotFoundError(self.url(rel))
        return info.size

    def read_bytes(self, rel: str) -> bytes:
        """The content of `rel`; FileNotFoundError if absent."""
        try:
            with self.fs.open_input_stream(self.path(rel)) as f:
                return f.read()
        except FileNotFoundError:
            raise FileNotFoundError(self.url(rel)) from None
        except OSError as err:
            if "not found" in str(err).lower() or "nosuchkey" in str(err).lower():
                raise FileNotFoundError(self.url(rel)) from None
            raise StorageError(f"{self.url(rel)}: cannot read ({reason(err)})") from None

    def open_input(self, rel: str) -> Any:
        """A seekable binary file (for pyarrow.parquet.ParquetFile)."""
        return self._call(self.fs.open_input_file, self.path(rel))

    def list(self, rel: str = "", recursive: bool = False) -> list[Entry]:
        """Objects under `rel`, sorted by path; [] if there is none."""
        prefix = self.base + "/"
        return sorted(
            (Entry(i.path[len(prefix):], i.size or 0, i.mtime_ns or 0) for i in self._under(rel, recursive) if i.type.name == "File"),
            key=lambda e: e.rel,
        )

    def children(self, rel: str = "") -> list[str]:
        """Names of the prefixes directly under `rel`, sorted."""
        return sorted(i.base_name for i in self._under(rel, False) if i.type.name == "Directory")

    def scan_parquet(self, rels: list[str], partitions: tuple[str, ...]) -> pl.LazyFrame:
        """A lazy scan of the Parquet objects `rels`, the string `partitions` read from their hive paths
        (below the first folder of `rels`): a pyarrow dataset on this filesystem (its credentials chain
        and endpoint), scanned lazily by polars."""
        import polars as pl
        import pyarrow as pa
        import pyarrow.dataset as ds  # imports pandas: only where an object store is read

        partitioning = ds.partitioning(pa.schema([(name, pa.string()) for name in partitions]), flavor="hive")
        base = self.path(rels[0].split("/", 1)[0])
        return pl.scan_pyarrow_dataset(ds.dataset([self.path(rel) for rel in rels], filesystem=self.fs, format="parquet",
                                                  partitioning=partitioning, partition_base_dir=base))

    # ------------------------------------------------------------ writing

    def makedirs(self, rel: str = "") -> None:
        """Object stores have no folders: nothing to do."""

    def write_bytes(self, rel: str, data: bytes, *, durable: bool = False) -> None:
        """One request: readers see the old or the new object, never a part (always durable)."""
        self._put(rel, data)

    def write_with(self, rel: str, write: Callable[[BinaryIO], object]) -> tuple[int, str]:
        """Write a new object with `write(binary file)` in one request; returns (bytes, sha256)."""
        buffer = io.BytesIO()
        write(buffer)
        data = buffer.getvalue()
        self._put(rel, data)
        return len(data), hashlib.sha256(data).hexdigest()

    def delete(self, rel: str) -> None:
        """Remove an object; absent is fine."""
        try:
            self.fs.delete_file(self.path(rel))
        except FileNotFoundError:
            pass
        except OSError as err:
            if "not found" not in str(err).lower():
                raise StorageError(f"{self.url(rel)}: cannot delete ({reason(err)})") from None

    def s3_client(self) -> Any:
        """A boto3 client on this location's S3 endpoint, region and credential chain, for what pyarrow
        cannot send: conditional writes (If-None-Match / If-Match, the writer lease). None where the
        store is not S3 or boto3 is not installed."""
        if self.fs.type_name != "s3":
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

    # ------------------------------------------------------------ helpers

    def _under(self, rel: str, recursive: bool) -> list[pafs.FileInfo]:
        """What lies under the prefix `rel` (every level if `recursive`); [] if nothing."""
        from pyarrow.fs import FileSelector

        return self._call(self.fs.get_file_info, FileSelector(self.path(rel), recursive=recursive, allow_not_found=True))

    def _put(self, rel: str, data: bytes) -> None:
        try:
            with self.fs.open_output_stream(self.path(rel)) as f:
                f.write(data)
        except OSError as err:
            raise StorageError(f"{self.url(rel)}: cannot write ({reason(err)})") from None

    def _call(self, fn: Callable, *args: Any) -> Any:
        try:
            return fn(*args)
        except FileNotFoundError:
            raise
        except OSError as err:
            raise StorageError(f"storage {self.display}: {reason(err)}") from None
