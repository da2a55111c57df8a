"""`fade-sweep status STORAGE`: the sweeps of a storage folder, one line each; and `status --watch`:
a status view (of one results folder or of a storage) redrawn in place on a terminal, or printed
again when it changes where stdout is no terminal, until no sweep in it runs or Ctrl-C, which stops
only the watching (the sweep is another process; it goes on)."""

from __future__ import annotations

import contextlib
import datetime
import io
import sys
import time
from typing import Callable

from sweeps.store.listing import RUNNING, SweepEntry, list_sweeps
from sweeps.store.location import StoreLocation

CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear the screen: the view is drawn anew in place


def listing_text(storage: StoreLocation, entries: list[SweepEntry], now: float | None = None) -> str:
    """The lines of `status STORAGE`: a header, one row per sweep, then what is damaged and how to repair it."""
    if not entries:
        return f"{storage}: no sweeps (no results folder directly under it)"
    now = time.time() if now is None else now
    rows = [("sweep", "task", "state", "runs done", "last change")]
    for e in entries:
        runs = f"{e.runs_done:,} of {e.runs_total:,}" if e.runs_total is not None else f"{e.runs_done:,} of ?"
        rows.append((e.name, ", ".join(e.tasks) or "?", e.state, runs, _when(e.last_change, now)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [f"{storage}: {len(entries)} sweep{'s' if len(entries) != 1 else ''}"]
    lines += ["  ".join(cell.ljust(w) if i != 3 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths))).rstrip()
              for r in rows]
    lines += [f"{e.name}: damaged: {e.damage}" for e in entries if e.damage]
    return "\n".join(lines)


def _when(seconds: float | None, now: float) -> str:
    if seconds is None:
        return "not recorded"
    age = max(0.0, now - seconds)
    ago = f"{age:.0f} s ago" if age < 120 else f"{age / 60:.0f} min ago" if age < 7200 else f"{age / 3600:.0f} h ago"
    stamp = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    return f"{stamp:%Y-%m-%d %H:%M} UTC ({ago})"


def storage_status(storage: StoreLocation) -> bool:
    """Print the listing of `storage`; whether a sweep in it is running."""
    entries = list_sweeps(storage)
    print(listing_text(storage, entries))
    return any(e.state == RUNNING for e in entries)


def watch(view: Callable[[], bool], every: float) -> None:
    """Show `view` (it prints the status and returns whether the sweep still runs) every `every` seconds:
    redrawn in place on a terminal, printed again when it changed elsewhere; until it ends or Ctrl-C."""
    terminal = sys.stdout.isatty()
    shown = None
    try:
        while True:
            buffer = io.StringIO()
            with contextlib.redirect_stdout(buffer):
                running = view()
            text = buffer.getvalue()
            if terminal:
                sys.stdout.write(CLEAR + text)
            elif _unstamped(text) != _unstamped(shown or ""):
                stamp = datetime.datetime.now(datetime.timezone.utc)
                sys.stdout.write(f"--- {stamp:%H:%M:%S} UTC\n{text}")
            sys.stdout.flush()
            shown = text
            if not running:
                return
            time.sleep(every)
    except KeyboardInterrupt:
        print("\nstopped watching (the sweep goes on)")


def _unstamped(text: str) -> str:
    """A view less its clock ("updated 3 s ago"): lines are printed again when something else changed."""
    import re

    return re.sub(r"\d+(\.\d+)? (s|min|h) ago", "", text)


def status_view(target: str, results_status: Callable[[str], None]) -> Callable[[], bool]:
    """What `status TARGET` shows, as a view for `watch`: the listing of a storage (a folder holding results
    folders), else `results_status(target)` (one results folder); each returns whether a sweep still runs."""
    from sweeps.store.listing import is_results_folder
    from sweeps.store.status import driver_gone
    from sweeps.store.store import Store

    location = StoreLocation.parse(target)
    location.check()  # an unreachable object store or a missing bucket: one line, exit 2, before any listing
    if not is_results_folder(location) and any(is_results_folder(location / name) for name in location.children()):
        return lambda: storage_status(location)

    def one() -> bool:
        results_status(target)
        try:
            status = Store(location).status()
        except Exception:  # noqa: BLE001 - a damaged status.json: results_status said so; nothing to follow
            return False
        return status is not None and status.state == RUNNING and not driver_gone(status)

    return one
