"""The live report's page as the driver's helper process makes it (sweeps.tune.live_report): read the
store afresh, build the report with the live banner (live.py), and say what it cost. Runs in that
process, so the figures never hold the driver's interpreter."""

from __future__ import annotations

import time

_charged = 0.0  # the helper's CPU seconds already reported with a page


def live_page(uri: str, every: float) -> tuple[bytes, float]:
    """The live report of the store at `uri` as bytes, and the helper's CPU seconds since its last page
    (the first page's also counts the imports of `prepare_helper`): what the driver's helper process
    makes (sweeps.tune.live_report), away from the driver's interpreter."""
    global _charged
    from sweeps.analysis.report import report_page
    from sweeps.store import Store

    page, _ = report_page(Store.open(uri), live_every=every)
    spent, _charged = time.process_time() - _charged, time.process_time()
    return page.encode("utf-8"), spent


def prepare_helper() -> None:
    """The helper process, as it starts (while the first pack runs): it leaves Ctrl-C to the driver (which
    ends it: a helper killed by the terminal's SIGINT broke the driver's interrupt), yields to the packs'
    processes on a full machine (nice 10, where allowed) and imports what a page needs, so the first page
    is quick once the first pack lands rather than paying polars' and plotly's imports then."""
    import os
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        os.nice(10)
    except (AttributeError, OSError):
        pass
    import sweeps.analysis.report  # noqa: F401 - imported for its cost, here rather than at the first page
    import sweeps.store  # noqa: F401
