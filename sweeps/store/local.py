"""A store in a folder of this machine: the local half of `StoreLocation` (location.py).

Writes go to a hidden temporary name beside the target, are fsynced where they must survive
a crash, and are renamed into place: readers see the old content or the new, never a part.
No pyarrow here: a local store's records, manifests and status are read with the standard
library alone, and its Parquet files by polars itself. Its writer lock is a flock (lock.py).
"""

from __future__ import annotations

import hashlib
import os
import uuid
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Callable, Self

from sweeps.store.holder import WriterLock
from sweeps.store.lock import FileLock
from sweeps.store.uris import Entry, StorageError

if TYPE_CHECKING:
    import polars as pl


class LocalFolder:
    """File operations in a local folder. A mixin of `StoreLocation`: it uses `base` (the absolute
    path), `display` (the path as the user wrote it) and `path(rel)`."""


    # ------------------------------------------------------------ naming

    def child(self, name: str) -> Self:
        path = str(Path(self.base) / name)
        return replace(self, base=path, uri=path, display=str(Path(self.display) / name))

    @property
    def parent(self) -> Self:
        path = str(Path(self.base).parent)
        return replace(self, base=path, uri=path, display=str(Path(self.display).parent))

    def absolute(self) -> Self:
        """This location with messages naming its absolute path."""
        return replace(self, display=self.base)

    @property
    def local_path(self) -> Path:
        """The folder on this machine, for a tool that needs a path (an object store has None)."""
        return Path(self.base)

    def __fspath__(self) -> str:
        return self.base

    @property
    def bucket(self) -> None:
        return None

    def url(self, rel: str = "") -> str:
        """`rel` as users see it."""
        return str(Path(self.display) / rel) if rel else self.display

    def tune_storage(self) -> tuple[str, None]:
        """(storage_path, storage_filesystem) for Ray Tune's RunConfig: the folder, Tune's own filesystem."""
        return self.base, None

    def writer_lock(self, command: str | None = None) -> WriterLock:
        """The store's writer lock, not yet taken: a flock on writer.lock (lock.py). `command`: what the
        holder record names (default: this process's command line)."""
        return FileLock(Path(self.base), self.display, command)

    def check(self) -> None:
        """A local folder needs no reachability check, but a file where it or a parent should be is a
        clear error (StorageError, exit 2), before anything reads or writes there."""
        here = Path(self.base)
        for path in (here, *here.parents):
            if path.exists():
                if not path.is_dir():
                    raise StorageError(f"{self.display}: {path} is a file, not a folder; a store is a folder (for `run`: another --storage)")
                return

    # ------------------------------------------------------------ reading

    def exists(self, rel: str = "") -> bool:
        return os.path.exists(self.path(rel))

    def is_file(self, rel: str) -> bool:
        return os.path.isfile(self.path(rel))

    def is_dir(self, rel: str = "") -> bool:
        return os.path.isdir(self.path(rel))

    def size(self, rel: str) -> int:
        return os.stat(self.path(rel)).st_size

    def read_bytes(self, rel: str) -> bytes:
        """The content of `rel`; FileNotFoundError if absent."""
        return Path(self.path(rel)).read_bytes()

    def open_input(self, rel: str) -> BinaryIO:
        """A seekable binary file (for pyarrow.parquet.ParquetFile); the caller closes it."""
        return open(self.path(rel), "rb")  # noqa: SIM115

    def list(self, rel: str = "", recursive: bool = False) -> list[Entry]:
        """Files under `rel`, sorted by path; [] if there is none. Hidden files included."""
        root = Path(self.path(rel))
        if not root.is_dir():
            return []
        entries = []
        for p in root.rglob("*") if recursive else root.iterdir():
            try:
                st = p.stat()
            except FileNotFoundError:  # removed since listed
                continue
            if p.is_file():
                entries.append(Entry(p.relative_to(self.base).as_posix(), st.st_size, st.st_mtime_ns))
        return sorted(entries, key=lambda e: e.rel)

    def children(self, rel: str = "") -> list[str]:
        """Names of the folders directly under `rel`, sorted."""
        root = Path(self.path(rel))
        return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []

    def scan_parquet(self, rels: list[str], partitions: tuple[str, ...]) -> pl.LazyFrame:
        """A lazy scan of the Parquet files `rels`, the string `partitions` read from their hive paths:
        polars reads local files itself (no pyarrow)."""
        import polars as pl

        return pl.scan_parquet([self.path(rel) for rel in rels], hive_partitioning=True,
                               hive_schema=dict.fromkeys(partitions, pl.String), try_parse_hive_dates=False)

    # ------------------------------------------------------------ writing

    def makedirs(self, rel: str = "") -> None:
        os.makedirs(self.path(rel), exist_ok=True)

    def write_bytes(self, rel: str, data: bytes, *, durable: bool = False) -> None:
        """Write so that readers see the old or the new content, never a part (`durable`: fsynced first)."""
        self._replace(rel, lambda f: f.write(data), durable)

    def write_with(self, rel: str, write: Callable[[BinaryIO], object]) -> tuple[int, str]:
        """Write a new file with `write(binary file)` atomically and durably; returns (bytes, sha256)."""
        return self._replace(rel, write, True, digest=True)

    def delete(self, rel: str) -> None:
        """Remove a file; absent is fine."""
        Path(self.path(rel)).unlink(missing_ok=True)

    def _replace(self, rel: str, write: Callable[[BinaryIO], object], durable: bool,
                 digest: bool = False) -> tuple[int, str] | None:
        """Write a hidden temporary file beside `rel`, then rename it into place; (size, sha256) if `digest`."""
        path = Path(self.path(rel))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
        try:
            with open(tmp, "w+b") as f:
                write(f)
                if durable:
                    f.flush()
                    os.fsync(f.fileno())
                if digest:
                    f.seek(0)
                    result = (tmp.stat().st_size, hashlib.file_digest(f, "sha256").hexdigest())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return result if digest else None
