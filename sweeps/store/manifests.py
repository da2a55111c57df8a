"""The commit records of a store: manifests, the commit rule, and which committed rows readers read.

Commit protocol. A pack's data files get write-once names (the write id is new for every
write) and are written atomically (local.py: under a hidden temporary name, fsynced and
renamed into place; objects.py: as one object, which appears whole or not at all); the
pack's manifest is written the same way LAST (on S3: one PUT, atomic). The manifest is the
commit: readers read only files named by manifests, so a crash never shows half a pack and a file no manifest names
(an orphan) is never read; `fade-sweep run --resume` deletes orphans. If two manifests
claim the same (config, seed) (a pack written twice), readers take each (config, seed)
from the NEWEST manifest (by `written_at`, then write id) and ignore older copies.

Manifest (JSON, format 1; the model is `records.Manifest`):

    {"format": 1, "pack_id": "...", "write_id": "...", "written_at": 1714000000.123,
     "task": "linear_tracking", "optimizer": "fade", "stage": "tuning",
     "configs": ["<config id>", ...], "seeds": [0, 1, 2],      # the pack's runs: every config x every seed
     "files": {"scores": {"path": "scores/task=.../pack-....parquet", "rows": 6, "bytes": 4242, "sha256": "..."},
               "curves": {"path": "curves/task=.../pack-....parquet", "rows": 12, "bytes": 5151, "sha256": "..."}}}

Plain Python on purpose (no polars, no pyarrow): `fade-sweep status` and the driver's
bookkeeping read manifests without loading the Parquet stack.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import NamedTuple

from sweeps.store.location import Entry, StoreLocation
from sweeps.store.records import KINDS, Manifest, RecordError, parse_record

MANIFESTS = "manifests"


# ---------------------------------------------------------------- reading


def manifest_entries(location: StoreLocation) -> list[Entry]:
    """The committed manifests' entries (hidden temporary files excluded), by name."""
    return [e for e in location.list(MANIFESTS) if e.name.endswith(".json") and not e.name.startswith(".")]


def parse_manifest(location: StoreLocation, entry: Entry) -> Manifest:
    """One manifest; RecordError naming its file if it is damaged."""
    manifest = parse_record(Manifest, location.read_bytes(entry.rel), location.url(entry.rel))
    return manifest.model_copy(update={"name": entry.name})


@dataclass(frozen=True)
class Damaged:
    """A manifest that cannot be read (truncated, empty, not a manifest): it commits nothing."""

    rel: str  # manifests/<name>.json
    reason: str  # the RecordError's message, naming the file


class ManifestsRead(NamedTuple):
    """What the manifests folder holds: the readable manifests (oldest first) and the damaged ones."""

    manifests: list[Manifest]
    damaged: list[Damaged]


def read_manifests(location: StoreLocation) -> ManifestsRead:
    """Every readable committed pack write, oldest first, and the damaged manifests apart.

    A damaged manifest commits nothing: readers answer from the rest (its runs count as missing)
    and say so; the writer sets it aside (`set_aside_unreadable`) and its pack runs again, as
    for a damaged data file."""
    manifests, damaged = [], []
    for entry in manifest_entries(location):
        try:
            manifests.append(parse_manifest(location, entry))
        except RecordError as err:
            damaged.append(Damaged(entry.rel, str(err)))
    return ManifestsRead(sorted(manifests, key=lambda m: m.order), damaged)


def runs_of(manifests: list[Manifest]) -> set[tuple[str, int]]:
    """(config_id, seed) of every run these manifests commit."""
    return {pair for m in manifests for pair in m.pairs()}


_LEFT_OUT = {"scores": "the runs of {} are left out of the tables and the report (they count as missing)",
             "curves": "the curves of {} are left out of the figures (their scores are in the tables)"}


def damaged_files_notice(location: StoreLocation, files: list[DamagedFile], repair: str) -> str:
    """The readers' line about damaged data files: the first of each kind named, what readers leave out
    (a scores file: its pack's runs; a curves file: their curves only), and the command that repairs them."""
    parts = []
    for kind in KINDS:
        some = [f for f in files if f.kind == kind]
        if some:
            many = len(some) > 1
            parts.append(f"skipped {len(some)} damaged {kind} file{'s' if many else ''} ({location.url(some[0].path)}: "
                         f"{some[0].why}{', ...' if many else ''}): " + _LEFT_OUT[kind].format("their packs" if many else "its pack"))
    many = len(files) > 1
    return f"{'; '.join(parts)}; `{repair}` sets {'them' if many else 'it'} aside and runs {'their packs' if many else 'its pack'} again"


# ---------------------------------------------------------------- the driver's upkeep (under the writer lock)


def damage(location: StoreLocation, manifest: Manifest, kind: str) -> str | None:
    """Why a committed file cannot be what its manifest recorded (missing, or truncated / grown:
    its size differs), or None. A same-size change needs the hash: `fade-sweep verify`."""
    entry = manifest.files[kind]
    if not location.is_file(entry.path):
        return "missing, but its manifest names it"
    size = location.size(entry.path)
    return None if size == entry.bytes else f"{size} bytes, but its manifest recorded {entry.bytes} (damaged)"


def set_aside_damaged(location: StoreLocation, manifests: list[Manifest]) -> list[str]:
    """Un-commit every pack of `manifests` with a missing or damaged file (only while holding the writer
    lock): its manifest moves to history/damaged-<name>, its files become orphans, and its runs are
    planned again. Returns the damaged files."""
    damaged = []
    for manifest in manifests:
        bad = [manifest.files[k].path for k in KINDS if damage(location, manifest, k)]
        if bad:
            rel = f"{MANIFESTS}/{manifest.name}"
            location.write_bytes(f"history/damaged-{manifest.name}", location.read_bytes(rel))
            location.delete(rel)
            damaged.extend(bad)
    return damaged


def set_aside_unreadable(location: StoreLocation, damaged: list[Damaged]) -> list[str]:
    """Un-commit the damaged manifests (only while holding the writer lock): each moves to
    history/damaged-<name> as it is, the data files it named become orphans, and its runs are
    planned again. Returns the manifests set aside."""
    for bad in damaged:
        name = bad.rel.rsplit("/", 1)[-1]
        try:
            location.write_bytes(f"history/damaged-{name}", location.read_bytes(bad.rel))
        except FileNotFoundError:  # set aside meanwhile by an earlier tidy
            continue
        location.delete(bad.rel)
    return [bad.rel for bad in damaged]


def orphans(location: StoreLocation, manifests: list[Manifest]) -> list[str]:
    """Paths (relative to the store) under scores/, curves/ and manifests/ that `manifests` do not
    commit (left by an interrupted write)."""
    named = {m.files[k].path for m in manifests for k in KINDS}
    found = [e.rel for kind in KINDS for e in location.list(kind, recursive=True) if e.rel not in named]
    found.extend(e.rel for e in location.list(MANIFESTS) if e.name.startswith("."))
    return found


def remove_orphans(location: StoreLocation, manifests: list[Manifest]) -> list[str]:
    """Delete the orphans of `manifests` (only while holding the store's writer lock); returns them as users see them."""
    rels = orphans(location, manifests)
    for rel in rels:
        location.delete(rel)
    return [location.url(r) for r in rels]


# ---------------------------------------------------------------- what readers read


@dataclass(frozen=True)
class Selection:
    """The committed files a reader reads, after the newest-wins rule and the current sweep's filter."""

    whole: tuple[Manifest, ...]  # read every row of these
    partial: tuple[tuple[Manifest, frozenset[tuple[str, int]]], ...]  # read only these (config, seed) rows
    outside: int  # stored (config, seed) pairs not in the wanted set (ignored)
    superseded: int  # (config, seed) pairs also held by a newer manifest (ignored copies)

    @property
    def runs(self) -> int:
        return sum(len(m.configs) * len(m.seeds) for m in self.whole) + sum(len(k) for _, k in self.partial)

    def pairs_from(self, names: set[str]) -> set[tuple[str, int]]:
        """The (config, seed) pairs this selection reads from the manifests named."""
        return ({pair for m in self.whole if m.name in names for pair in m.pairs()}
                | {pair for m, keep in self.partial if m.name in names for pair in keep})

    def without(self, names: set[str]) -> Selection:
        """This selection less the manifests named (a damaged data file: their rows are left out)."""
        return replace(self, whole=tuple(m for m in self.whole if m.name not in names),
                       partial=tuple((m, keep) for m, keep in self.partial if m.name not in names))


@dataclass(frozen=True)
class DamagedFile:
    """A committed data file whose size is not its manifest's: readers leave its rows out."""

    manifest: str  # the manifest's name
    kind: str  # scores or curves
    path: str  # relative to the store
    why: str


def damaged_files(location: StoreLocation, manifests: Iterable[Manifest]) -> list[DamagedFile]:
    """The data files of `manifests` that are missing or of another size than recorded (a stat each; a
    same-size change needs `fade-sweep verify`'s hash)."""
    return [DamagedFile(m.name, kind, m.files[kind].path, why) for m in manifests for kind in KINDS
            if (why := damage(location, m, kind))]


def select(manifests: list[Manifest], wanted: frozenset[tuple[str, int]] | None = None) -> Selection:
    """Each (config, seed) from the newest manifest holding it, and only the `wanted` ones (None: all)."""
    owner: dict[tuple[str, int], int] = {}
    for i, m in enumerate(manifests):  # oldest first: later (newer) manifests overwrite
        for pair in m.pairs():
            owner[pair] = i
    superseded = sum(len(m.configs) * len(m.seeds) for m in manifests) - len(owner)
    outside = 0 if wanted is None else sum(1 for pair in owner if pair not in wanted)
    whole, partial = [], []
    for i, m in enumerate(manifests):
        pairs = m.pairs()
        keep = [p for p in pairs if owner[p] == i and (wanted is None or p in wanted)]
        if len(keep) == len(pairs):
            whole.append(m)
        elif keep:
            partial.append((m, frozenset(keep)))
    return Selection(tuple(whole), tuple(partial), outside, superseded)
