"""What makes a report live: a banner saying the sweep is still running and when the page was
written, and a script that reloads the page every few seconds, keeping where the reader had
scrolled to (sessionStorage, which works on file:// pages too).

The live report is the report of the runs in so far (report.write_report with `live_every`),
rewritten by the driver as packs land (sweeps.tune.live_report); when the sweep ends the
static report replaces it, and an open tab stops reloading on its next load.
"""

from __future__ import annotations

import datetime

LIVE_MARK = "data-live-report"  # on the banner: a page that still reloads itself

RELOAD_SCRIPT = """<script type="text/javascript">
(function () {
  var key = 'fade-sweep-scroll:' + location.pathname;
  window.addEventListener('load', function () {
    var y = sessionStorage.getItem(key);
    if (y !== null) { window.scrollTo(0, parseFloat(y)); sessionStorage.removeItem(key); }
  });
  setTimeout(function () { sessionStorage.setItem(key, String(window.scrollY)); location.reload(); }, %d);
})();
</script>"""

BANNER_STYLE = ("position:sticky;top:0;z-index:10;background:#fff7d6;border:1px solid #e0c060;padding:6px 10px;"
                "margin:-1em 0 1em 0;font-size:95%")


def live_parts(every: float, now: float | None = None) -> tuple[str, str]:
    """(head, banner) of a live report that reloads every `every` seconds."""
    seconds = max(1, round(every))
    stamp = datetime.datetime.fromtimestamp(
        datetime.datetime.now(datetime.timezone.utc).timestamp() if now is None else now, datetime.timezone.utc)
    banner = (f"<div id='live' {LIVE_MARK}='{seconds}' style='{BANNER_STYLE}'><b>Live report</b>: the sweep is still "
              f"running. Written at {stamp:%H:%M:%S} UTC from the runs in by then; this page reloads itself every "
              f"{seconds} s, and becomes the final report when the sweep ends.</div>")
    return RELOAD_SCRIPT % (seconds * 1000), banner


def is_live(html: str) -> bool:
    """Whether a report page is a live one (it still reloads itself)."""
    return LIVE_MARK in html

