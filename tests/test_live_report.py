"""The live report: RESULTS_DIR/report.html written while `fade-sweep run` works, read as it runs (the
finished part shown, the missing part marked, reloading itself), then the final static report, equal
to what `fade-sweep report` writes; both open in headless Chromium with every figure drawn."""

from __future__ import annotations

import html.parser
import re
import subprocess
import sys
import time
from pathlib import Path

import yaml

from sweeps.analysis.live import is_live
from tests.test_analysis import _chromium, _console, _figures_in

# 4 configs x 2 seeds, packs of one config: 4 packs one at a time, a few seconds each (the three after the
# first give the live page, made in about a second once the first lands, several seconds to be written).
SWEEP = {
    "name": "live",
    "task": "linear_tracking",
    "task_settings": {"steps": 4_000_000, "bin": 400_000, "noise": 1.0},
    "seeds": 2,
    "optimizers": {"sgd": {"alpha": [0.01, 0.005]}, "fade": {"alpha": 0.01, "theta_lambda": 0.01, "gamma0": [-2.3, -4.6]}},
}
RUN = ["--num-cpus", "1", "--runs-per-pack", "2", "--chunk-steps", "20000", "--report-every", "30"]


class _Checked(html.parser.HTMLParser):
    """Every opened element closed in order (void elements aside): the page is well formed enough to read."""

    VOID = {"meta", "br", "img", "input", "link", "hr", "col", "area", "base", "embed", "source", "track", "wbr"}

    def __init__(self):
        super().__init__()
        self.open: list[str] = []
        self.bad: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_endtag(self, tag):
        if not self.open or self.open[-1] != tag:
            self.bad.append(f"</{tag}> closes <{self.open[-1] if self.open else None}>")
        else:
            self.open.pop()


def _well_formed(page: str) -> None:
    checked = _Checked()
    checked.feed(page)
    checked.close()
    assert not checked.bad and not checked.open, (checked.bad[:5], checked.open[:5])


def _same_report(page: str) -> str:
    """A report with what differs between two writes of the same store blanked: plotly's div ids and the time it was made."""
    page = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "ID", page)
    return re.sub(r"<dt>report made</dt><dd>[^<]*</dd>", "", page)


def test_a_run_writes_a_live_report_then_the_final_one(tmp_path):
    from sweeps.cli import main

    sweep = tmp_path / "live.yaml"
    sweep.write_text(yaml.safe_dump(SWEEP))
    run = subprocess.Popen([sys.executable, "-m", "sweeps.cli", "run", str(sweep), "--storage", str(tmp_path / "s"), *RUN],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    report = tmp_path / "s" / "live" / "report.html"
    live = None
    deadline = time.monotonic() + 300
    while live is None and run.poll() is None and time.monotonic() < deadline:
        if report.exists():
            page = report.read_text()  # written atomically: never half a page
            live = page if is_live(page) else None
        time.sleep(0.05)
    out = run.communicate(timeout=300)[0]
    assert run.returncode == 0, out
    assert live is not None, f"no live report was seen while the sweep ran:\n{out}"
    assert f"Report: {report} (live:" in out.splitlines()[1], out  # said at the start, after the Sweep line
    # read while it ran: the runs in are shown, the rest marked missing, and the page reloads itself
    _well_formed(live)
    section = live[live.index("id='completeness'"):live.index("id='answer'")]
    done = re.search(r"<b>(\d+) of 8 runs are in", section)
    assert done and 0 < int(done.group(1)) < 8, section
    assert re.search(r"class='missing'>[24] runs missing", section) and "location.reload()" in live
    (tmp_path / "live.html").write_text(live)
    # the end: the static report, what `fade-sweep report` writes of the same store
    final = report.read_text()
    assert not is_live(final) and "id='completeness'" not in final and "location.reload" not in final
    assert main(["report", str(report.parent), "--out", str(tmp_path / "again.html")]) == 0
    assert _same_report(final) == _same_report((tmp_path / "again.html").read_text())
    for name, page in (("live.html", live), ("report.html", final)):
        shown = report if name == "report.html" else tmp_path / name
        dom = _chromium(tmp_path, f"file://{shown}", "--dump-dom")
        assert dom.returncode == 0, dom.stderr[-2000:]
        assert not _console(dom.stderr), (name, _console(dom.stderr))
        figures = _figures_in(dom.stdout)
        assert len(figures) == page.count("class='figure'") > 0
        assert all('class="main-svg"' in f or "<svg" in f for f in figures), name  # every figure drawn


def test_report_writes_into_the_results_folder_by_default(tmp_path):
    from sweeps.cli import main
    from tests.test_analysis import SCORES
    from tests.test_analysis import SWEEP as KNOWN
    from tests.helpers import write_known_store

    store = write_known_store(tmp_path / "known", KNOWN, SCORES)
    assert main(["report", str(store)]) == 0
    page = (store / "report.html").read_text()
    assert not Path("report.html").exists() or Path("report.html").stat().st_mtime < time.time() - 60
    # a store with a run missing says how many are in, and marks the method that lacks them
    section = page[page.index("id='completeness'"):page.index("id='answer'")]
    assert "15 of 18 runs are in" in section and "class='missing'>3 runs missing" in section
    assert "<td>sgd</td><td>6 of 6</td><td>2 of 2</td><td class='complete'>" in section


def test_the_live_page_reloads_and_says_so():
    from sweeps.analysis.live import live_parts

    head, banner = live_parts(10.0)
    assert "setTimeout" in head and "10000" in head and is_live(banner) and "reloads itself every 10 s" in banner


def test_no_report_turns_the_live_report_off_too():
    from sweeps.cli.parser import build_parser
    from sweeps.cli.running import _execution_options
    from sweeps.spec import resolve_sweep
    from sweeps.store import StoreLocation
    from sweeps.tune.live_report import live_reports

    parser, sweep, where = build_parser(), resolve_sweep("linear-demo"), StoreLocation.parse("results/x")
    with_report = _execution_options(parser.parse_args(["run", "linear-demo", "--report-every", "20"]), sweep)
    (callback,) = live_reports(where, with_report)
    assert with_report.report_every == callback.every == 20.0
    without = _execution_options(parser.parse_args(["run", "linear-demo", "--no-report"]), sweep)
    assert without.report_every is None and live_reports(where, without) == []


def test_a_refused_run_leaves_the_writers_live_page_and_an_interrupted_one_makes_its_page_static(tmp_path):
    """`reporting` turns a live page static when its own run stops; a run refused because another process
    writes the store never touches that process's page (an open tab of it would stop reloading)."""
    import argparse

    import pytest

    from sweeps.analysis.report import write_report
    from sweeps.cli.live import reporting
    from sweeps.store import Store
    from sweeps.store.holder import StoreLocked
    from tests.test_analysis import SCORES
    from tests.test_analysis import SWEEP as KNOWN
    from tests.helpers import write_known_store

    store = Store.open(write_known_store(tmp_path / "known", KNOWN, SCORES))
    page = store.location / "report.html"
    args = argparse.Namespace(no_report=False, report_every=10.0)
    for stopped, stays_live in ((StoreLocked("held by another process"), True), (KeyboardInterrupt(), False)):
        write_report(store, page, live_every=10.0)
        with pytest.raises(type(stopped)), reporting(args, store):
            raise stopped
        assert is_live((tmp_path / "known" / "report.html").read_text()) == stays_live, type(stopped).__name__
