"""Where a store lives: a local folder or an object-store prefix (`s3://`, `gs://`), one interface.

    location = StoreLocation.parse("s3://bucket/prefix/linear-demo")   # or "results/linear-demo"
    location.write_bytes("store.json", data)       # atomic: readers see the old or the new object, never a part
    location.read_bytes("store.json"); location.list("manifests"); location.delete("x"); location.exists("x")
    location / "sub"                               # a child location
    with location.writer_lock(): ...               # the one writer of the store (holder.WriterLock)

This module turns a target into a location and names paths in it; the file operations are
two backends, each a mixin of `StoreLocation` implementing `backend.Backend`: `local.py` (a folder of this machine:
temporary name, fsync, rename; a flock as writer lock) and `objects.py` (an object-store
prefix through one pyarrow filesystem, a lease as writer lock; credentials, endpoints and
conditional writes are described there). The choice between the two is made here, once, by
`parse`: callers never ask which kind of store they hold. Where a tool truly needs a file of
this machine (the sweep file of a `--resume` command), it asks for `local_path` (None on an
object store).

A URI is never taken for a local path: `scheme://...` with a scheme the store cannot serve is
a StorageError (exit 2), and so is a URI carrying credentials. Messages show a URI without
its query string (`display`); `uri` keeps the allowed query keys so that another process can
rebuild the same location.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sweeps.store.local import LocalFolder
from sweeps.store.objects import OBJECT_SCHEMES, ObjectPrefix, object_filesystem
from sweeps.store.uris import URI_SCHEME, Entry, StorageError, is_uri, redact

__all__ = ["Entry", "StorageError", "StoreLocation", "is_uri", "redact"]


@dataclass(frozen=True, eq=False)
class StoreLocation:
    """A folder of a store: `base` is its path for the backend (a local absolute path, or bucket/prefix).

    Every location is a `LocalLocation` or an `ObjectLocation`, and so a `backend.Backend`: this class
    names paths; the backend's mixin does the rest of that protocol."""

    base: str
    uri: str  # rebuilds this location anywhere (no credentials; allowed query keys only)
    display: str  # for messages: no query string
    query: str = ""  # object stores: "?endpoint_override=..." as given (allowed keys only), kept by children
    fs: Any = None  # object stores: the pyarrow filesystem

    @classmethod
    def parse(cls, target: str | os.PathLike | StoreLocation) -> StoreLocation:
        """A location from a local path or a URI; StorageError for what the store cannot serve."""
        if isinstance(target, StoreLocation):
            return target
        text = os.fspath(target)
        if not text.strip():  # Path("") is the current folder: a store would land there unasked
            raise StorageError(f"storage {text!r}: an empty path names no folder; give a folder (e.g. results) "
                               "or s3://BUCKET/PREFIX")
        match = URI_SCHEME.match(text)
        if not match:
            typo = re.match(r"^(s3|gs|gcs|file):/?(?!/)", text, re.IGNORECASE)
            if typo:  # `s3:/bucket` or `s3:bucket` would otherwise become a local folder named `s3:`
                raise StorageError(f"storage {redact(text)}: a URI needs two slashes: write {typo.group(1)}://BUCKET/PREFIX (a local folder may not start with {typo.group(1)}:)")
            path = Path(text).expanduser()
            return LocalLocation(str(path.absolute()), str(path.absolute()), str(path))
        scheme = match.group(1).lower()
        parts = urlsplit(text)
        if scheme == "file":
            path = str(Path(parts.path or "/"))
            return LocalLocation(path, path, path)
        shown = redact(f"{scheme}://{parts.netloc.rsplit('@', 1)[-1]}{parts.path}")
        if scheme not in OBJECT_SCHEMES:
            raise StorageError(
                f"storage {shown}: the store cannot serve {scheme}:// URIs; give a local path, s3://BUCKET/PREFIX or gs://BUCKET/PREFIX"
            )
        fs, base, query = object_filesystem(scheme, parts, shown)
        return ObjectLocation(base, f"{scheme}://{base}{query}", f"{scheme}://{base}", query, fs)

    def __truediv__(self, name: str) -> StoreLocation:
        return self.child(str(name).strip("/"))

    def __str__(self) -> str:
        return self.display

    def __repr__(self) -> str:
        return f"StoreLocation({self.display!r})"

    @property
    def name(self) -> str:
        return self.base.rstrip("/").rsplit("/", 1)[-1]

    def path(self, rel: str = "") -> str:
        """The path of `rel` for the backend."""
        return f"{self.base}/{rel}".rstrip("/") if rel else self.base

    def read_text(self, rel: str) -> str:
        return self.read_bytes(rel).decode()

    def sha256(self, rel: str) -> str:
        with self.open_input(rel) as f:
            return hashlib.file_digest(f, "sha256").hexdigest()


class LocalLocation(LocalFolder, StoreLocation):
    """A store in a local folder (local.py has its file operations)."""


class ObjectLocation(ObjectPrefix, StoreLocation):
    """A store under an object-store prefix (objects.py has its file operations)."""
