"""`Backend`: what a storage backend implements, the whole interface of a store location.

A backend is one module with one mixin class (`local.py`: `LocalFolder`, a folder of this machine;
`objects.py`: `ObjectPrefix`, an object-store prefix), joined to `StoreLocation` in location.py, whose
`parse` is the one place a target string picks its backend. `StoreLocation` itself supplies the
naming every backend shares (`base`, `uri`, `display`, `query`, `fs`, `name`, `path`, `/`, `read_text`,
`sha256`); a backend supplies every member below, with these signatures (tests/test_store.py checks
both backends against this protocol). A new backend: a module with its mixin, and a branch of `parse`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Protocol, Self

from sweeps.store.uris import Entry, Files

if TYPE_CHECKING:
    import polars as pl

    from sweeps.store.holder import WriterLock


class Backend(Files, Protocol):
    """A store location's operations (see the module docstring). Paths `rel` are relative to the location,
    `/`-separated; a write is atomic (readers see the old content or the new, never a part)."""

    # ------------------------------------------------------------ naming
    def child(self, name: str) -> Self:
        """The location `name` below this one."""
    @property
    def parent(self) -> Self:
        """The location above this one."""
    def absolute(self) -> Self:
        """This location with messages naming it in full."""
    @property
    def local_path(self) -> Path | None:
        """The folder on this machine, for a tool that needs a path (None: not a folder of this machine)."""
    @property
    def bucket(self) -> str | None:
        """The object store's bucket (None: a local folder)."""
    def __fspath__(self) -> str: ...
    def url(self, rel: str = "") -> str:
        """`rel` as users see it (no credentials, no query string)."""
    def tune_storage(self) -> tuple[str, Any]:
        """(storage_path, storage_filesystem) for Ray Tune's RunConfig."""

    # ------------------------------------------------------------ the writer lock and reachability
    def writer_lock(self, command: str | None = None) -> WriterLock:
        """The store's writer lock (holder.WriterLock), not yet taken."""
    def check(self) -> None:
        """StorageError, one line, if the store cannot be reached."""

    # ------------------------------------------------------------ reading
    def exists(self, rel: str = "") -> bool: ...
    def is_file(self, rel: str) -> bool: ...
    def is_dir(self, rel: str = "") -> bool: ...
    def size(self, rel: str) -> int: ...
    def read_bytes(self, rel: str) -> bytes: ...
    def open_input(self, rel: str) -> BinaryIO:
        """A binary file object to read `rel` from (a Parquet file's footer, a digest)."""
    def list(self, rel: str = "", recursive: bool = False) -> list[Entry]:
        """Files under `rel`, sorted by path ([] if there is none)."""
    def children(self, rel: str = "") -> list[str]:
        """The names of the folders directly under `rel`."""
    def scan_parquet(self, rels: list[str], partitions: tuple[str, ...]) -> pl.LazyFrame:
        """The Parquet files `rels` as one LazyFrame, the hive `partitions` read from their paths."""

    # ------------------------------------------------------------ writing
    def makedirs(self, rel: str = "") -> None: ...
    def write_bytes(self, rel: str, data: bytes, *, durable: bool = False) -> None:
        """Write `rel` atomically (`durable`: it survives a crash once this returns)."""
    def write_with(self, rel: str, write: Callable[[BinaryIO], object]) -> tuple[int, str]:
        """Write `rel` by `write(file)`, atomically and durably; (its size, its sha256)."""
    def delete(self, rel: str) -> None:
        """Remove `rel` (nothing there: nothing to do)."""
