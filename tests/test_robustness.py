"""Cross-setting sensitivity (Adkins et al. 2024) and performance profiles, against hand computations."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from sweeps.analysis.profiles import performance_profile
from sweeps.analysis.robustness import robustness_table, robustness_text


def _runs(task: str, cells: dict[tuple[float, float], list[float]], sign: float = 1.0) -> pl.DataFrame:
    """Scores frame: cells[(noise, alpha)] = one score per seed, method sgd."""
    rows = [{"task": task, "noise": noise, "optimizer": "sgd", "config_id": f"{noise}-{alpha}", "alpha": alpha,
             "seed": seed, "score": sign * score, "diverged": False, "wall_seconds": 1.0}
            for (noise, alpha), scores in cells.items() for seed, score in enumerate(scores)]
    return pl.DataFrame(rows)


# noise 0: alpha 0.1 is best; noise 1: alpha 0.01 is best. MSE (lower is better).
CELLS = {(0.0, 0.1): [1.0, 1.2], (0.0, 0.01): [2.0, 2.2], (1.0, 0.1): [3.0, 3.4], (1.0, 0.01): [2.0, 2.4]}


def _hand() -> dict[str, float]:
    # 5th / 95th percentiles, linear interpolation over the 4 sorted runs of a setting: position 0.05 * 3 = 0.15, 2.85
    lo0, hi0 = 1.0 + 0.15 * (1.2 - 1.0), 2.0 + 0.85 * (2.2 - 2.0)
    lo1, hi1 = 2.0 + 0.15 * (2.4 - 2.0), 3.0 + 0.85 * (3.4 - 3.0)

    def norm0(x: float) -> float:
        return (hi0 - x) / (hi0 - lo0)  # lower is better: reversed

    def norm1(x: float) -> float:
        return (hi1 - x) / (hi1 - lo1)

    per = (norm0(1.1) + norm1(2.2)) / 2  # each setting tuned alone: alpha 0.1, then alpha 0.01
    cross_01, cross_001 = (norm0(1.1) + norm1(3.2)) / 2, (norm0(2.1) + norm1(2.2)) / 2
    assert cross_01 > cross_001  # one configuration for both: alpha 0.1
    return {"per_setting": per, "cross_setting": cross_01, "gap": per - cross_01}


@pytest.mark.parametrize("task, sign", [("linear_tracking", 1.0), ("emnist_label_permuted", -1.0)])
def test_two_settings_by_hand(task, sign):
    """Negated scores where higher is better give the same normalised scores: the direction is respected."""
    table = robustness_table(_runs(task, CELLS, sign))
    assert table.height == 1
    row = table.row(0, named=True)
    for name, value in _hand().items():
        assert row[name] == pytest.approx(value, rel=1e-12), name
    assert row["cross_setting_config"] == "alpha=0.1" and row["settings"] == 2 and row["seeds"] == 2
    assert row["per_setting_configs"].startswith("noise=0.0: alpha=0.1") and "noise=1.0: alpha=0.01" in row["per_setting_configs"]
    assert row["gap_ci_low"] <= row["gap_ci_high"] and "5th and 95th percentiles" in row["normalisation"]
    assert "gap" in robustness_text(table, "md")


def test_a_diverged_configuration_is_never_chosen_and_one_setting_is_no_table():
    cells = {**CELLS, (0.0, 0.1): [1.0, float("nan")]}
    row = robustness_table(_runs("linear_tracking", cells)).row(0, named=True)
    assert row["cross_setting_config"] == "alpha=0.01"  # alpha 0.1 diverged at noise 0
    single = {k: v for k, v in CELLS.items() if k[0] == 0.0}
    assert robustness_table(_runs("linear_tracking", single)).height == 0


def test_identical_seeds_give_a_point_confidence_interval():
    cells = {k: [v[0], v[0]] for k, v in CELLS.items()}
    row = robustness_table(_runs("linear_tracking", cells)).row(0, named=True)
    assert row["gap_ci_low"] == pytest.approx(row["gap"]) and row["gap_ci_high"] == pytest.approx(row["gap"])


def test_performance_profile_against_a_hand_count():
    runs = pl.DataFrame({
        "task": ["linear_tracking"] * 7, "noise": [0.0] * 7, "optimizer": ["sgd"] * 4 + ["fade"] * 3,
        "config_id": ["a"] * 4 + ["b"] * 3, "seed": [0, 1, 2, 3, 0, 1, 2],
        "score": [1.0, 2.0, 3.0, float("nan"), 0.5, 1.5, 2.5], "diverged": [False] * 3 + [True] + [False] * 3,
    })
    profile = performance_profile(runs, np.array([1.0, 2.0, 2.75]))
    fraction = {(r["optimizer"], r["tau"]): r["fraction"] for r in profile.iter_rows(named=True)}
    # MSE: better than tau means below it; the diverged run is never better
    assert fraction[("sgd", 1.0)] == 0 / 4 and fraction[("sgd", 2.0)] == 1 / 4 and fraction[("sgd", 2.75)] == 2 / 4
    assert fraction[("fade", 1.0)] == 1 / 3 and fraction[("fade", 2.0)] == 2 / 3 and fraction[("fade", 2.75)] == 3 / 3
    accuracy = performance_profile(runs.with_columns(task=pl.lit("emnist_label_permuted")), np.array([2.0]))
    assert dict(zip(accuracy["optimizer"], accuracy["fraction"])) == {"sgd": 1 / 4, "fade": 1 / 3}  # above tau


def test_a_race_whose_survivors_differ_per_setting_has_no_cross_setting_configuration():
    """Raced: each setting's eliminated configuration holds only round 1's seeds (0, 1), so no
    configuration holds every seed in both settings; per-setting tuning still runs on the survivors."""
    cells = {(0.0, 0.1): [1.0, 1.2, 1.4], (0.0, 0.01): [2.0, 2.2], (1.0, 0.1): [3.0, 3.4], (1.0, 0.01): [2.0, 2.4, 2.6]}
    table = robustness_table(_runs("linear_tracking", cells))
    row = table.row(0, named=True)
    lo0, hi0 = 1.0 + 0.15 * (1.2 - 1.0), 2.0 + 0.85 * (2.2 - 2.0)  # percentiles on seeds 0, 1 (as in _hand)
    lo1, hi1 = 2.0 + 0.15 * (2.4 - 2.0), 3.0 + 0.85 * (3.4 - 3.0)
    per = ((hi0 - 1.2) / (hi0 - lo0) + (hi1 - 7.0 / 3.0) / (hi1 - lo1)) / 2  # survivors' means over seeds 0-2
    assert row["per_setting"] == pytest.approx(per, rel=1e-12) and row["seeds"] == 3
    assert row["cross_setting"] is None and row["gap"] is None and row["cross_setting_config"] is None
    assert "none usable in every setting" in robustness_text(table, "md")
