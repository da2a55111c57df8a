"""What the command line says about a store, as text: the library returns data and notices, this
module words them and the commands print them.

`format_status` (`fade-sweep status`), `format_verification` (`fade-sweep verify`), and
`show_notices`, which puts the library's notices (the `sweeps` logger: a stale writer lock taken
over, a lease lost, stored runs outside the current sweep) on stderr as one line each.
"""

from __future__ import annotations

import logging
import socket
import sys
import time
from collections import Counter
from typing import TYPE_CHECKING

from sweeps.store.records import SweepStatus
from sweeps.store.status import driver_gone, packs_text, run_steps_text

if TYPE_CHECKING:  # verify loads pyarrow: `status` reads records only
    from sweeps.store.verify import Verification

NOTICES = "sweeps"  # the logger the library's notices go to (its modules' loggers are below it)


class _Stderr(logging.Handler):
    """One line per notice, on the stderr of the moment (a test's capture, a redirected stream)."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"fade-sweep: {self.format(record)}", file=sys.stderr, flush=True)


def show_notices() -> None:
    """Print the library's notices on stderr from now on (once per process, however often called)."""
    logger = logging.getLogger(NOTICES)
    if not any(isinstance(h, _Stderr) for h in logger.handlers):
        logger.addHandler(_Stderr(logging.INFO))


def format_status(status: SweepStatus, finished_packs: int, resume: str = "fade-sweep run ... --resume") -> str:
    """The lines `fade-sweep status RESULTS_DIR` prints; `resume` is the command that continues the sweep."""
    age = time.time() - status.updated_at
    gone = driver_gone(status)
    state = "interrupted (driver not running)" if gone else status.state
    lines = [
        f"sweep {status.sweep}: {state} (updated {age:.0f} s ago)",
        f"packs: {packs_text(status)} ({finished_packs} pack files in the store)",
        f"run-steps: {run_steps_text(status, not gone)}",
    ]
    if gone:
        where = "" if status.host == socket.gethostname() else f" on {status.host}, no heartbeat for {age:.0f} s"
        lines.append(f"driver (pid {status.driver_pid}{where}) is not running: the sweep was interrupted; "
                     f"continue with `{resume}`")
    elif status.state == "interrupted":
        lines.append(f"the sweep was interrupted; continue with `{resume}`")
    elif status.state == "running" and age > 60:
        lines.append(f"no update for over a minute: the driver may have stopped; continue with `{resume}`")
    return "\n".join(lines)


# How a problem kind of `verify` reads when counted: a "missing runs" problem is one method with runs missing.
_PLURALS = {
    "missing runs": ("method missing runs", "methods missing runs"),
    "schema": ("schema problem", "schema problems"),
    "content": ("content problem", "content problems"),
    "record": ("damaged or missing record", "damaged or missing records"),
    "hash mismatch": ("hash mismatch", "hash mismatches"),
    "size mismatch": ("size mismatch", "size mismatches"),
    "misplaced": ("misplaced file", "misplaced files"),
    "corrupt": ("corrupt file", "corrupt files"),
}


def _counted(kind: str, n: int) -> str:
    one, many = _PLURALS.get(kind, (kind, f"{kind}s"))
    return f"{n} {one if n == 1 else many}"


def verification_summary(v: Verification) -> str:
    """`clean` or `N problems (what they are)`, then the store's counts; every count names what it counts."""
    what = (f"{_counted('pack', v.packs)}, {_counted('run', v.runs)} stored, "
            f"{_counted('data file', v.files)} checked, {_counted('run', v.missing)} missing")
    if v.clean:
        return f"{v.location}: clean ({what})"
    kinds = Counter(kind for kind, _ in v.problems)
    listed = ", ".join(_counted(kind, n) for kind, n in sorted(kinds.items()))
    return f"{v.location}: {len(v.problems)} problem{'s' if len(v.problems) > 1 else ''} ({listed}); {what}"


def format_verification(v: Verification) -> str:
    """What `fade-sweep verify` prints: one line per problem, the notes, then the summary."""
    return "\n".join([*(line for _, line in v.problems), *(f"note: {n}" for n in v.notes), verification_summary(v)])
