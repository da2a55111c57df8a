"""The confirmation stage: each method's selected configuration re-run on fresh seeds.

The tuning stage is written in-process (float64, the pack runner itself); `fade-sweep confirm`
runs in a subprocess (embedded Ray, 2 CPUs) as a user would. Confirmation scores must equal an
in-process float64 computation on the fresh seeds, also after an interrupt, to SAME_RUN: the
linear kernels are compiled with fastmath `reassoc`, so a vectorised dot product may round its
last bit differently from one process to another (seen once: 1 ulp on a 600,000-step run);
anything a confirmation or a resume could get wrong (another seed, configuration, setting or
step) moves the score by far more.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from sweeps.analysis import kinds
from sweeps.analysis.confirm import confirmation_table
from sweeps.analysis.queries import Analysis
from sweeps.cli import main
from sweeps.packs import make_runner
from sweeps.plan import CONFIRMATION, Pack, plan_confirmation
from sweeps.spec import SweepError, make_config, parse_sweep
from sweeps.store import Store
from sweeps.store.sweep_record import check_and_record

# Two settings; sgd with a step size that learns and one that barely moves (alpha=5e-4 cannot
# track a target that changes every 20 steps), so the selection is known: alpha=0.05.
KNOWN = {
    "name": "known",
    "task": "linear_tracking",
    "task_settings": {"steps": 20_000, "bin": 5_000},
    "seeds": 3,
    "variants": [{"task_settings": {"noise": 0.0}}, {"task_settings": {"noise": 1.0}}],
    "optimizers": {"sgd": {"alpha": [0.05, 0.0005]}, "fade": {"alpha": [0.05], "theta_lambda": [0.01], "gamma0": [-2.3, -4.6]}},
}
# Six experiments of one configuration each: six confirmation packs of a few seconds, two at a time.
SLOW = {
    "name": "slow",
    "task": "linear_tracking",
    "task_settings": {"steps": 600_000, "bin": 60_000},
    "seeds": 2,
    "variants": [{"task_settings": {"noise": 0.0}}, {"task_settings": {"noise": 1.0}}],
    "optimizers": {"sgd": {"alpha": 0.01}, "idbd": {"theta_alpha": 0.005, "beta0": -4.6},
                   "coupled": {"theta": 0.005, "beta0": -4.6, "gamma0": -2.3}},
}
SLOW_PACKS = 6
SAME_RUN = 1e-13  # relative: a few ulps (see the module docstring)
CONFIRM_OPTIONS = ["--num-cpus", "2", "--chunk-steps", "10000", "--checkpoint-every", "5"]


def _outcome(pack: Pack):
    runner = make_runner(pack, 100_000, torch.float64)
    for _ in runner.run():
        pass
    return runner.outcome()


def _tuned_store(storage: Path, document: dict) -> Path:
    """The sweep's grid computed in-process (one float64 pack per experiment) and committed as a store."""
    sweep = parse_sweep(document, "test")
    results_dir = storage / sweep.name
    store = Store.open(results_dir)
    check_and_record(store.location, sweep, "float64")
    for e in sweep.experiments:
        pack = Pack(e, e.cells, sweep.seeds)
        store.write_pack(pack, _outcome(pack))
    return results_dir


def _reference(document: dict, selected: list[str], seeds: tuple[int, ...]) -> dict[tuple[str, int], float]:
    """Scores of the selected configurations on `seeds`, in-process, one float64 pack each."""
    sweep = parse_sweep(document, "reference")
    chosen = [(e, make_config(e, v)) for e in sweep.experiments for v in e.configs() if make_config(e, v).config_id in selected]
    scores = {}
    for pack in plan_confirmation(chosen, seeds, cpus=1):
        scores.update(zip([(c.config_id, s) for c in pack.configs for s in pack.seeds], _outcome(pack).score))
    return scores


def _cli(*args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.Popen([sys.executable, "-m", "sweeps.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, start_new_session=True)


def _confirmation_scores(results_dir: Path) -> pl.DataFrame:
    return Store.open(results_dir).scan("scores", stage=CONFIRMATION).collect()


@pytest.fixture(scope="module")
def confirmed(tmp_path_factory) -> tuple[Path, dict]:
    """KNOWN tuned in-process, its tables as they were, then `fade-sweep confirm --seeds 2`."""
    results_dir = _tuned_store(tmp_path_factory.mktemp("known"), KNOWN)
    before = {kind: kinds.table_text(Analysis.of(Store.open(results_dir), "mean"), kind, "csv") for kind in ("best", "compare", "sensitivity", "importance")}
    assert main(["report", str(results_dir)]) == 0  # the report of the tuning stage, before the confirmation
    report = (results_dir / "report.html").read_text()
    run = _cli("confirm", str(results_dir), "--seeds", "2", *CONFIRM_OPTIONS)
    out, _ = run.communicate(timeout=400)
    assert run.returncode == 0, out
    return results_dir, {"before": before, "report": report, "out": out}


def test_confirm_rewrites_the_report_with_its_table(confirmed):
    """The report's "How sure are we?" said how to get a confirmation; after `confirm` it shows it."""
    results_dir, seen = confirmed
    assert "No confirmation stage" in seen["report"]
    report = (results_dir / "report.html").read_text()
    assert "No confirmation stage" not in report and "Confirmation on fresh seeds" in report
    assert seen["out"].rstrip().splitlines()[-1].startswith(f"Report: {results_dir / 'report.html'} (")


def test_the_known_selection_is_confirmed_on_fresh_disjoint_seeds(confirmed):
    results_dir, _ = confirmed
    record = Store.open(results_dir).confirmation
    assert record.seeds == (3, 4) and record.tuning_seeds == (0, 1, 2) and record.stat == "mean"
    sgd = [row for row in record.selected if row.optimizer == "sgd"]
    assert sorted(row.noise for row in sgd) == [0.0, 1.0] and {row.alpha for row in sgd} == {0.05}
    runs = _confirmation_scores(results_dir)
    assert set(runs["seed"]) == {3, 4} and not set(runs["seed"]) & set(Store.open(results_dir).scan("scores").collect()["seed"])
    assert runs.height == len(record.selected) * 2 == 8 and runs.select("config_id", "seed").unique().height == 8
    assert set(runs["stage"]) == {"confirmation"} and set(Store.open(results_dir).scan("scores").collect()["stage"]) == {"tuning"}
    reference = _reference(KNOWN, [row.config_id for row in record.selected], record.seeds)
    for row in runs.iter_rows(named=True):
        assert row["score"] == pytest.approx(reference[(row["config_id"], row["seed"])], rel=SAME_RUN, abs=0)  # as alone


def test_the_table_equals_an_independent_computation(confirmed):
    results_dir, _ = confirmed
    tuning, fresh = Store.open(results_dir).scan("scores").collect(), _confirmation_scores(results_dir)
    keys = ["noise", "optimizer"]
    best = (tuning.group_by(*keys, "config_id").agg(pl.col("score").mean().alias("tuned"))
            .sort("tuned").group_by(keys, maintain_order=True).first())  # MSE: lower is better
    confirmed_means = fresh.group_by(*keys, "config_id").agg(pl.col("score").mean().alias("fresh"))
    expected = best.join(confirmed_means, on=[*keys, "config_id"]).with_columns(gap=pl.col("fresh") - pl.col("tuned"))
    expected = expected.with_columns(rank=pl.col("fresh").rank("ordinal").over("noise").cast(pl.UInt32)).sort(keys)
    table = confirmation_table(Store.open(results_dir).scan("scores"), Store.open(results_dir).scan("scores", stage=CONFIRMATION)).sort(keys)
    assert table["config_id"].to_list() == expected["config_id"].to_list()
    for ours, theirs in (("tuning_score", "tuned"), ("confirmation_score", "fresh"), ("gap", "gap")):
        np.testing.assert_allclose(table[ours].to_numpy(), expected[theirs].to_numpy(), rtol=1e-12)
    assert table["rank"].to_list() == expected["rank"].to_list()
    assert (table["ci_low"] <= table["confirmation_score"]).all() and (table["confirmation_score"] <= table["ci_high"]).all()
    shown = main(["table", str(results_dir), "--kind", "confirm"])
    assert shown == 0


def test_tuning_tables_verify_and_missing_runs_ignore_the_confirmation_rows(confirmed, tmp_path):
    results_dir, seen = confirmed
    for kind, text in seen["before"].items():
        assert kinds.table_text(Analysis.of(Store.open(results_dir), "mean"), kind, "csv") == text, kind
    assert Store.open(results_dir).missing_runs().height == 0
    verification = Store.open(results_dir).verify()
    assert verification.clean, verification.problems
    assert verification.runs == 2 * 4 * 3 + 2 * 2 * 2 and verification.missing == 0  # tuning + confirmation runs
    copy = tmp_path / results_dir.name
    shutil.copytree(results_dir, copy)
    lost = next(p for p in (copy / "manifests").glob("*.json") if json.loads(p.read_text())["stage"] == "confirmation")
    manifest = json.loads(lost.read_text())
    lost.unlink()
    verification = Store.open(copy).verify()
    assert verification.missing == len(manifest["configs"]) * len(manifest["seeds"]) > 0
    lacking = Store.open(copy).missing_runs(CONFIRMATION)  # the Store counts the same runs, per stage
    assert set(zip(lacking["config_id"], lacking["seed"])) == {(c, s) for c in manifest["configs"] for s in manifest["seeds"]}
    assert Store.open(copy).missing_runs().height == 0 and Store.open(results_dir).missing_runs(CONFIRMATION).height == 0
    assert any("confirmation runs have no result" in line for _, line in verification.problems)


def test_an_overlapping_seed_list_is_refused(tmp_path, capsys):
    results_dir = _tuned_store(tmp_path, {**KNOWN, "task_settings": {"steps": 400, "bin": 200}})
    manifests = sorted(p.name for p in (results_dir / "manifests").iterdir())
    assert main(["confirm", str(results_dir), "--seeds", "2,7"]) == 2
    assert "seed(s) 2 are tuning seeds" in capsys.readouterr().err
    assert sorted(p.name for p in (results_dir / "manifests").iterdir()) == manifests
    assert not (results_dir / "confirmation.json").exists()
    with pytest.raises(SweepError, match=r"confirm\.seeds: seed\(s\) 0 are tuning seeds"):
        parse_sweep({**KNOWN, "confirm": {"seeds": [0, 9]}}, "test")
    assert parse_sweep({**KNOWN, "confirm": {"seeds": 4}}, "test").confirm_seeds == (3, 4, 5, 6)


def test_confirmation_packs_never_share_an_id_with_tuning_packs():
    sweep = parse_sweep(KNOWN, "test")
    e = sweep.experiments[0]
    config = make_config(e, e.configs()[0])
    tuning = Pack(e, (config,), (3, 4))
    (confirming,) = plan_confirmation([(e, config)], (3, 4), cpus=1)
    assert confirming.stage == CONFIRMATION and confirming.seeds == tuning.seeds and confirming.pack_id != tuning.pack_id


def _packs_done(results_dir: Path) -> int:
    try:
        return len(Store.open(results_dir).finished_runs(CONFIRMATION)) // 2
    except Exception:  # noqa: BLE001 - mid-write
        return 0


def test_resume_after_an_interrupt_in_the_confirmation_stage_is_exact(tmp_path):
    results_dir = _tuned_store(tmp_path, SLOW)
    args = ["confirm", str(results_dir), "--seeds", "2", "--runs-per-pack", "2", *CONFIRM_OPTIONS]
    run = _cli(*args)
    deadline = time.monotonic() + 300
    while not 0 < _packs_done(results_dir) < SLOW_PACKS:
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()[0][-3000:]
        time.sleep(0.05)
    os.killpg(run.pid, signal.SIGINT)  # Ctrl-C
    out, _ = run.communicate(timeout=120)
    saved = _packs_done(results_dir)
    assert run.returncode == 130 and 0 < saved < SLOW_PACKS, out
    assert out.strip().splitlines()[-1] == (f"fade-sweep: interrupted: {saved} of {SLOW_PACKS} packs done; continue with "
                                            f"`fade-sweep confirm {results_dir} --seeds 2`"), out
    resume = _cli(*args)
    out, _ = resume.communicate(timeout=400)
    assert resume.returncode == 0, out
    assert f"Resumed: {2 * saved:,} runs were already in the store and were not re-run." in out, out
    runs = _confirmation_scores(results_dir)
    assert runs.height == 2 * SLOW_PACKS and runs.select("config_id", "seed").unique().height == runs.height
    record = Store.open(results_dir).confirmation
    reference = _reference(SLOW, [row.config_id for row in record.selected], record.seeds)
    for row in runs.iter_rows(named=True):
        assert row["score"] == pytest.approx(reference[(row["config_id"], row["seed"])], rel=SAME_RUN, abs=0)
    assert Store.open(results_dir).verify().clean


def _stage_frame(scores: dict[str, list[float]], first_seed: int) -> pl.DataFrame:
    """Scores of one stage: one configuration per method, seeds from `first_seed` on (frames only, no store)."""
    rows = [{"task": "linear_tracking", "noise": 1.0, "optimizer": method, "config_id": f"c-{method}",
             "alpha": 0.01, "seed": first_seed + i, "score": score, "diverged": not np.isfinite(score), "wall_seconds": 1.0}
            for method, values in scores.items() for i, score in enumerate(values)]
    return pl.DataFrame(rows)


def test_a_fresh_seed_that_blows_up_is_instability_flagged_and_stated(capsys):
    """The issue's case: idbd's fresh seed 6 scores 37.4 where its others score ~1.46. The table flags it with the
    tuning tables' dagger, calls the gap instability (not selection bias), and says the rank counts that seed."""
    from sweeps.analysis.confirm import GAP_RULE, confirmation_text

    tuning = _stage_frame({"idbd": [1.44, 1.47, 1.46, 1.45, 1.46], "sgd": [1.9, 1.95, 1.92, 1.93, 1.91]}, 0)
    confirmation = _stage_frame({"idbd": [1.46, 37.4, 1.45, 1.47, 1.46], "sgd": [2.0, 1.98, 1.99, 2.01, 2.0],
                                 }, 5)
    table = confirmation_table(tuning, confirmation).sort("optimizer")
    idbd, sgd = table.to_dicts()
    assert idbd["outlier_seeds"] == "6:37.4" and idbd["diverged_seeds"] == 0
    assert idbd["gap_cause"] == "instability" and idbd["gap"] > 7  # the mean, outlier included: stated, not hidden
    assert sgd["gap_cause"] == "selection bias" and sgd["outlier_seeds"] is None
    text = confirmation_text(table, "md")
    idbd_line = next(line for line in text.splitlines() if "| idbd |" in line)
    assert "†" in idbd_line and idbd_line.rstrip(" |").endswith("instability"), idbd_line
    assert "† idbd: outlier seed 6 (37.4)" in text and GAP_RULE in text
    assert "every fresh seed counted (an outlier † included; `--stat median` ranks by a statistic it does not move)" in text
    by_median = confirmation_table(tuning, confirmation, "median").sort("rank")
    assert by_median["optimizer"].to_list() == ["idbd", "sgd"]  # the robust statistic: the outlier does not rank it
    assert by_median.filter(pl.col("optimizer") == "idbd")["gap_cause"].item() == "none"  # median: no gap left
    # a diverged fresh seed is instability too; an outlier on the better side leaves no gap to explain
    diverged = confirmation_table(tuning, _stage_frame({"idbd": [1.46, float("inf"), 1.45, 1.47, 1.46],
                                                        "sgd": [1.2, 1.98, 1.99, 2.01, 2.0]}, 5)).sort("optimizer")
    assert diverged["gap_cause"].to_list() == ["instability", "none"]


def test_a_method_whose_every_configuration_diverged_is_named_not_dropped():
    """`confirm` has nothing to re-run for such a method (the best table lists it as all diverged): it says so in
    one line per (setting, method) instead of leaving it out of the confirmation without a word."""
    from sweeps.analysis.confirm import selected_configs, unconfirmable

    tuning = _stage_frame({"idbd": [1.44, 1.47, 1.46], "sgd": [float("inf"), float("nan"), float("inf")]}, 0)
    assert selected_configs(tuning)["optimizer"].to_list() == ["idbd"]
    assert unconfirmable(tuning) == [
        "sgd on linear_tracking (noise=1.0): not confirmed, every configuration diverged on the tuning seeds"]
    assert unconfirmable(_stage_frame({"idbd": [1.44, 1.47, 1.46]}, 0)) == []
    from sweeps.analysis.confirm import confirmation_table, confirmation_text

    table = confirmation_table(tuning, _stage_frame({"idbd": [1.45, 1.46, 1.44]}, 3))
    for fmt in ("md", "html", "latex"):  # the table of the confirmed methods says which one it lacks
        assert "sgd on linear" in confirmation_text(table, fmt, unconfirmed=unconfirmable(tuning)), fmt
