"""The live report's page as the driver's helper process makes it (sweeps.tune.live_report): read the
store afresh, build the report with the live banner (live.py), and say what it cost. Runs in that
process, so the figures never hold the driver's interpreter."""

from __future__ import annotations


def live_page(uri: str, every: float) -> tuple[bytes, float]:
    """The live report of the store at `uri` as bytes, and the CPU seconds it took: what the driver's
    helper process makes (sweeps.tune.live_report), away from the driver's interpreter."""
    import time

    started = time.process_time()  # the first page's imports counted too
    from sweeps.analysis.report import report_page
    from sweeps.store import Store

    page, _ = report_page(Store.open(uri), live_every=every)
    return page.encode("utf-8"), time.process_time() - started


def lower_priority() -> None:
    """The helper process yields to the packs' processes on a full machine (nice 10; where allowed)."""
    import os

    try:
        os.nice(10)
    except (AttributeError, OSError):
        pass
