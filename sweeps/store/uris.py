"""What every store location shares and keeps light (no pyarrow): which strings are URIs, how
secrets are kept out of what is printed, the storage error, a listed file, and `Files`, the
file operations of a location as the modules below it (records, the writer locks) see them.
Every error message of the command line goes through `redact`."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Protocol

from sweeps.spec import SweepError

SECRET_VARIABLES = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID", "GOOGLE_APPLICATION_CREDENTIALS_JSON")
URI_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")


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


class Files(Protocol):
    """A store location's file operations (`StoreLocation`, location.py), as the records and the writer
    locks use them: they are typed by this protocol, not the location class, because the location
    imports them (it hands out its writer lock)."""

    display: str

    def path(self, rel: str = "") -> str: ...
    def url(self, rel: str = "") -> str: ...
    def check(self) -> None: ...
    def read_bytes(self, rel: str) -> bytes: ...
    def write_bytes(self, rel: str, data: bytes, *, durable: bool = False) -> None: ...
    def delete(self, rel: str) -> None: ...


class ObjectFiles(Files, Protocol):
    """An object-store location as its lease (lease.py) uses it: also the object's info and, for
    conditional writes on S3, a boto3 client (None elsewhere)."""

    def info(self, rel: str = "") -> Any: ...
    def s3_client(self) -> Any: ...


def is_uri(text: str | os.PathLike) -> bool:
    return isinstance(text, str) and bool(URI_SCHEME.match(text))


def redact(text: str) -> str:
    """`text` without secrets: the values of credential variables, query strings and user info of URIs."""
    for name in SECRET_VARIABLES:
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    text = re.sub(r"([A-Za-z][A-Za-z0-9+.\-]*://)[^/\s@]*@", r"\1***@", text)  # user:password@
    return re.sub(r"([A-Za-z][A-Za-z0-9+.\-]*://[^\s?]*)\?[^\s'\"]*", r"\1?***", text)


def reason(err: BaseException) -> str:
    """An exception as one redacted line (at most 300 characters) for a StorageError."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return redact(" ".join(lines)[:300] or type(err).__name__)
