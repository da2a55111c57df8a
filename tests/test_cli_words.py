"""What the command says where it cannot do what was asked (issue 42's small ones): each a line that names
the problem and a fix that applies to the command, and the docs' words matching the code."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from sweeps.cli import main
from sweeps.cli.text import format_rate, format_seconds, plan_text
from sweeps.packs.dryrun import PlanEstimate, PlanRow
from sweeps.packs.outcome import PackOutcome
from sweeps.spec import PackResources, resolve_sweep

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def dead_address() -> str:
    """http://127.0.0.1:PORT where nothing listens (a port just bound and released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_status_without_an_argument_asks_for_a_results_folder(monkeypatch, capsys):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert main(["status"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "None" not in err
    assert "give a results folder (fade-sweep status STORAGE/<sweep name>)" in err and "--address" in err


@pytest.mark.parametrize("command", [["submit", "linear-demo", "--storage", "/tmp/fade-nowhere"], ["logs", "raysubmit_1"],
                                     ["status", "raysubmit_1"], ["status"]])
def test_a_job_command_to_a_dead_cluster_says_it_is_unreachable_and_never_to_run_embedded(command, dead_address,
                                                                                          monkeypatch, capsys):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert main([*command, "--address", dead_address]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"cannot reach a Ray dashboard at {dead_address.removeprefix('http://')}" in err
    assert "the cluster is unreachable" in err and "no such job" not in err
    assert "omit --address" not in err and "embedded" not in err  # a job command cannot run embedded


def test_a_sub_second_pack_s_time_is_not_zero():
    assert [format_seconds(s) for s in (0.01, 0.6, 9.94, 10.4, 571.4)] == ["<0.1s", "0.6s", "9.9s", "10s", "571s"]


def test_the_dry_run_s_plan_table_is_aligned_whatever_the_names(capsys):
    sweep = resolve_sweep("linear-demo")
    rows = [PlanRow("linear_tracking", "noise=1.0", "fade_idbd", 12, 120, 10, 2.0e9, 3.5e6, "CPU", 571.4),
            PlanRow("emnist_partial_permuted", "stable_classes=24, period=2500", "fade_sgd_all", 1, 5, 5, 2.5e10, 812.0, "GPU",
                    30788177.0)]
    plan = PlanEstimate(13, 2, 0, rows, 100.0, 4.0, 4.0, 2.0, 1.0, 0.2, False, 89.0, 1.0)
    header, *lines = plan_text(sweep, PackResources(cpus=1), plan).splitlines()[1:4]  # the header and the two rows
    cells = [("linear_tracking", "noise=1.0", "fade_idbd", "12", "10", "2.00e+09", f"{format_rate(3.5e6)} CPU", "571s"),
             ("emnist_partial_permuted", "stable_classes=24, period=2500", "fade_sgd_all", "1", "5", "2.50e+10",
              f"{format_rate(812.0)} GPU", "30788177s")]
    names = ("task", "settings", "optimizer", "packs", "runs/pack", "run-steps", "rate (cost table)", "time")
    for line, row in zip(lines, cells):
        for i, (name, cell) in enumerate(zip(names, row)):
            if i < 3:  # text: starts where its header starts
                assert line[header.index(name):].startswith(cell + " "), (name, line)
            else:  # numbers: end where their header ends
                assert line[: header.index(name) + len(name)].endswith(" " + cell), (name, header, line)


def test_the_pack_snippet_of_docs_python_names_the_outcome_s_attributes():
    page = (ROOT / "docs" / "python.md").read_text()
    snippet = page[page.index("outcome = runner.outcome()"):].splitlines()[0]
    named = re.findall(r"outcome\.(\w+)", snippet)
    assert named and set(named) <= set(PackOutcome.__dataclass_fields__), snippet


@pytest.mark.parametrize("command", ["table", "report"])
def test_a_sweep_interrupted_before_its_first_pack_says_no_results_yet(command, tmp_path, capsys):
    """A folder holding the sweep (sweep.yaml) but no pack yet is the right folder: no 'give STORAGE/<sweep name>'."""
    sweep = tmp_path / "long"
    sweep.mkdir()
    (sweep / "sweep.yaml").write_text((ROOT / "sweeps/spec/presets/linear-demo.yaml").read_text())
    assert main([command, str(sweep)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no results yet" in err and f"fade-sweep status {sweep}" in err, err
    assert "STORAGE/<sweep name>" not in err
