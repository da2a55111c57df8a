"""`SweepWriter`: a run's conversation with its store, one call per stage of the run (sweeps/tune/stages.py).

    with SweepWriter(store, sweep, dtype, resume) as writer:  # lock: the store reachable, no other writer, the
                                                              #   writer lock taken, what is stored allows the run
        recorded = writer.record_sweep()                      # record: the sweep recorded, damaged packs set aside,
                                                              #   orphans removed, the runs already stored
        ...                                                   # (the packs run: `writer.store`, `writer.store.writer`)
        finished = writer.finish(ran=True)                    # record again at the end, and what the report reads

Each call asks the `Store` everything its stage needs and answers with it, so the driver never goes back to the
store for a stage it has left. Nothing here prints: what a stage has to say comes back as `notices`.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field

from sweeps.plan import CONFIRMATION, TUNING
from sweeps.spec import Sweep
from sweeps.store.records import ConfirmationRecord, RecordError, SweepStatus
from sweeps.store.store import Store

__all__ = ["Finished", "Recorded", "SweepWriter"]

Pairs = set[tuple[str, int]]


@dataclass(frozen=True)
class Recorded:
    """The record stage's answer: what to say, and the runs of the stage already stored (they are not run)."""

    notices: list[str]
    finished: Pairs


@dataclass(frozen=True)
class Finished:
    """The end of the packs: what to say, the store as readers now see it, and the status.json the closing
    line reads (None: no packs ran, or a race, whose status.json is its last round's)."""

    notices: list[str]
    store: Store
    status: SweepStatus | None


@dataclass
class SweepWriter:
    """The writer of one run of `sweep` (None: the confirmation stage of the recorded sweep) into `store`,
    a context manager holding the writer lock (`Store.writing`) for the run."""

    store: Store
    sweep: Sweep | None = None
    dtype: str = "float32"
    resume: bool = False
    _held: ExitStack = field(default_factory=ExitStack, init=False, repr=False)

    def __enter__(self) -> SweepWriter:
        """The lock stage: refused (StorageError, StoreLocked, SweepError) before anything is written."""
        self._held.enter_context(self.store.writing(self.sweep, self.dtype, self.resume))
        return self

    def __exit__(self, *exc) -> bool | None:
        return self._held.__exit__(*exc)

    def record_sweep(self) -> Recorded:
        """The record stage of the tuning stage: the sweep recorded (checked again, under the lock: sweep_record),
        the store tidied, then the sweep's runs already stored counted when resuming (a pack set aside by the tidy
        runs again; runs outside the sweep are ignored)."""
        notices = self.store.record_sweep(self.sweep, self.dtype) + self._tidy()
        return Recorded(notices, self.store.finished_runs(TUNING) & self.sweep.pairs if self.resume else set())

    def record_confirmation(self, confirmation: ConfirmationRecord) -> Recorded:
        """The record stage of the confirmation stage: `confirmation` recorded (what changed since an earlier one
        said; a damaged confirmation.json is recorded anew, the runs it named stay in the store), the store
        tidied, and the confirmation runs already stored (it always resumes)."""
        try:
            earlier = self.store.confirmation
        except RecordError as err:
            earlier, notices = None, [f"{err}: recorded anew"]
        else:
            notices = []
        if earlier is not None and (earlier.stat, earlier.seeds) != (confirmation.stat, confirmation.seeds):
            notices.append(f"The confirmation stage changed (was {earlier.stat} on seeds {list(earlier.seeds)}); "
                           "stored runs outside the new one are ignored")
        self.store.record_confirmation(confirmation)
        notices += self._tidy()
        return Recorded(notices, self.store.finished_runs(CONFIRMATION) & confirmation.pairs())

    def finish(self, ran: bool) -> Finished:
        """The end of the packs (`ran`: some ran): tidied again (a Ray worker of a killed earlier writer may have
        written data files after the first tidy, its commit refused: commit.write_pack; by now it is gone), and
        the store reopened, as readers now see it."""
        notices = self._tidy()
        reader = self.store.reopened()
        raced = ran and reader.sweep is not None and reader.sweep.race is not None and reader.race is not None
        return Finished(notices, reader, reader.status() if ran and not raced else None)

    def _tidy(self) -> list[str]:
        """Damaged packs set aside (they run again) and orphans of interrupted writes removed, said."""
        damaged, removed = self.store.tidy()
        notices = []
        if damaged:
            files = f"{len(damaged)} damaged file{'s' if len(damaged) > 1 else ''}"
            notices.append(f"Set aside {files} of committed packs ({', '.join(map(str, damaged[:3]))}"
                           f"{', ...' if len(damaged) > 3 else ''}); their packs run again "
                           "(manifests kept in history/)")
        if removed:
            notices.append(f"Removed {len(removed)} orphan files of interrupted writes from {self.store.location}")
        return notices
