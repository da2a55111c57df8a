"""The report around a run: where it goes (said at the start), the live report while packs land
(written by the driver: sweeps.tune.live_report), and the static report at the end.

An interrupted (or failed) run's live page, if one was written, is rewritten static: it shows what is in and
marks what is missing, and an open tab stops reloading. A run that wrote no page leaves none.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from sweeps.store.holder import StoreLocked

REPORT_FILE = "report.html"


@contextmanager
def reporting(args: argparse.Namespace, store) -> Iterator[None]:
    """Around `run`'s packs: say where the report goes, and after an interrupt turn a live page static."""
    if args.no_report:
        yield
        return
    where = store.location / REPORT_FILE
    print(f"Report: {where} (live: rewritten as packs land, at most every {args.report_every:g} s; open it in a "
          "browser, it reloads itself until the sweep ends)", flush=True)
    try:
        yield
    except StoreLocked:  # another process writes this store: its live page is its own
        raise
    except BaseException:  # interrupted, or failed: an open tab stops reloading a page that will not change
        try:
            _static_if_live(store)
        except Exception as err:  # noqa: BLE001 - the run's own error is the one to say
            print(f"fade-sweep: the live report was left as it was ({type(err).__name__}: {err})", file=sys.stderr)
        raise


def _static_if_live(store) -> None:
    from sweeps.analysis.live import is_live

    location = store.location
    try:
        live = location.exists(REPORT_FILE) and is_live(location.read_bytes(REPORT_FILE).decode("utf-8", "replace"))
    except OSError:
        return
    if live:
        from sweeps.analysis.report import write_report

        write_report(store.reopened(), location / REPORT_FILE)


def final_report(store, stat: str = "mean") -> str:
    """Write the static report of `store` (what `fade-sweep report RESULTS_DIR` writes; atomically, so an
    interrupt leaves the page before it); its line for the output."""
    from sweeps.analysis.report import write_report

    figures = write_report(store, store.location / REPORT_FILE, stat=stat)
    return f"Report: {store.location / REPORT_FILE} ({len(figures)} figures, opens offline in any browser)"
