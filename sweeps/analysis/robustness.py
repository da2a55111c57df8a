"""Does a method need retuning per setting? Cross-setting sensitivity (Adkins, Bowling and White,
"A Method for Evaluating Hyperparameter Sensitivity in Reinforcement Learning", NeurIPS 2024).

For a method run in two or more settings of one sweep (e.g. linear tracking at noise 0 and
1; EMNIST full and partial), on normalised scores:

- normalisation, per setting: p_lo and p_hi are the 5th and 95th percentiles (numpy's linear
  interpolation) of the scores of ALL runs of that setting (every method, configuration and
  seed; diverged runs left out) on the seeds every configuration of the setting holds (every
  seed; of a raced sweep, round 1's, as an eliminated configuration holds no more: the
  percentiles then describe the same population as the full grid's); a run's normalised score
  is (x - p_lo) / (p_hi - p_lo) where
  higher is better (accuracy) and (p_hi - x) / (p_hi - p_lo) where lower is better (MSE), so 1
  is always good. Not clipped.
- per-setting tuned score: in each setting, the best configuration's mean normalised score;
  averaged over the settings (each setting tuned on its own).
- cross-setting tuned score: the single configuration (hyperparameter values present in every
  setting) with the best mean normalised score averaged over the settings.
- gap = per-setting - cross-setting >= 0: what the method loses when not retuned per setting.
- 95% CIs: percentile bootstrap over seeds (stats.BOOTSTRAP_RESAMPLES resamples, the same
  resampled seeds in every setting and configuration, selection redone in each resample; the
  percentiles that normalise are held fixed).

A configuration with a diverged (not finite) seed in a setting is never selected there, and only
configurations holding every seed are tuned over: in a raced sweep, the race's survivors (an
eliminated configuration's mean over its first seeds is never compared with a survivor's).
Functions of frames (tuning scores), never of paths.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from sweeps.analysis import queries, stats, tables

PERCENTILES = (5.0, 95.0)
NORMALISATION = ("per setting: (score - p5) / (p95 - p5), p5 and p95 the 5th and 95th percentiles of all runs "
                 "of that setting (every method) on the seeds every configuration holds (of a raced sweep, round 1's), "
                 "reversed where lower is better (1 is good); only configurations with every seed (a race's "
                 "survivors) are tuned over")
ROBUSTNESS_COLUMNS = ("settings", "per_setting", "per_setting_ci_low", "per_setting_ci_high", "cross_setting",
                      "cross_setting_ci_low", "cross_setting_ci_high", "gap", "gap_ci_low", "gap_ci_high",
                      "cross_setting_config", "per_setting_configs", "seeds", "normalisation")


def normalised(tuning: pl.LazyFrame | pl.DataFrame) -> pl.DataFrame:
    """The tuning runs with `normalised` (see the module docstring) and the setting's `p_lo`, `p_hi`."""
    frame = tuning.collect() if isinstance(tuning, pl.LazyFrame) else tuning
    variant = queries.variant_columns(frame.lazy())
    finite = pl.col("score").is_finite()
    configs = pl.col("config_id").n_unique().over(variant)
    shared = pl.col("config_id").n_unique().over([*variant, "seed"]) == configs  # a seed every configuration holds
    flagged = frame.with_columns(_shared=shared)  # no seed shared (an interrupted grid's ragged seeds): every run
    kept = flagged.filter(finite & (pl.col("_shared") | ~pl.col("_shared").any().over(variant)))
    bounds = kept.group_by(variant).agg(
        p_lo=pl.col("score").quantile(PERCENTILES[0] / 100, interpolation="linear"),
        p_hi=pl.col("score").quantile(PERCENTILES[1] / 100, interpolation="linear"),
    )
    span = pl.col("p_hi") - pl.col("p_lo")
    return frame.join(bounds, on=variant, how="left", nulls_equal=True).with_columns(
        normalised=pl.when(queries.higher_is_better()).then((pl.col("score") - pl.col("p_lo")) / span)
        .otherwise((pl.col("p_hi") - pl.col("score")) / span)
    )


def _config_label(row: dict) -> str:
    return tables.selected_hyperparameters(row)


def _method_row(runs: pl.DataFrame, settings: list[str], hyper: list[str]) -> dict:
    """The robustness of one method: `runs` are its normalised runs in every setting."""
    seeds = sorted(set.intersection(*(set(g["seed"].to_list()) for _, g in runs.group_by(settings))))
    n = len(seeds)
    counts = np.zeros((stats.BOOTSTRAP_RESAMPLES + 1, n))  # row 0: the sample itself; then the resamples
    counts[0] = 1.0
    idx = stats.resample_indices(n)
    np.add.at(counts[1:], (np.repeat(np.arange(len(idx)), n), idx.ravel()), 1.0)
    weights = counts.T / n  # (n, B + 1): a matrix product gives every resample's mean
    per_setting, labels, by_config = [], [], []
    wide = (runs.filter(pl.col("seed").is_in(seeds)).sort("seed").group_by([*settings, *hyper], maintain_order=True)
            .agg(pl.col("normalised")).filter(pl.col("normalised").list.len() == n))  # configs with every seed
    for key, group in wide.group_by(settings, maintain_order=True):
        matrix = np.array(group["normalised"].to_list(), dtype=float)  # (configs, n)
        usable = np.isfinite(matrix).all(axis=1)
        means = np.where(usable[:, None], np.nan_to_num(matrix) @ weights, -np.inf)  # (configs, B + 1)
        best = int(np.argmax(means[:, 0]))
        per_setting.append(means.max(axis=0))
        configs = group.select(hyper).to_dicts()
        labels.append(f"{', '.join(f'{k}={v}' for k, v in zip(settings, key))}: "
                      f"{_config_label(configs[best])} ({means[best, 0]:.3g})")
        by_config.append({tuple(c.values()): means[i] for i, c in enumerate(configs)})
    per = np.mean(per_setting, axis=0)
    common = [c for c in by_config[0] if all(c in other for other in by_config[1:])]
    if common:
        averaged = np.array([np.mean([other[c] for other in by_config], axis=0) for c in common])
    else:  # no configuration holds every seed in every setting (a race whose survivors differ per setting)
        averaged = np.full((1, per.size), -np.inf)
    choice = int(np.argmax(averaged[:, 0]))
    cross = averaged.max(axis=0)
    gap = per - cross

    def ci(values: np.ndarray) -> tuple[float | None, float | None]:
        finite = values[1:][np.isfinite(values[1:])]
        if n < 2 or finite.size < values.size - 1:
            return None, None
        low, high = np.quantile(finite, [(1 - stats.CI_LEVEL) / 2, (1 + stats.CI_LEVEL) / 2])
        return float(low), float(high)

    def finite(x: float) -> float | None:
        return float(x) if np.isfinite(x) else None

    return {
        "settings": len(per_setting), "per_setting": finite(per[0]), **_ci("per_setting", ci(per)),
        "cross_setting": finite(cross[0]), **_ci("cross_setting", ci(cross)), "gap": finite(gap[0]), **_ci("gap", ci(gap)),
        "cross_setting_config": _config_label(dict(zip(hyper, common[choice]))) if np.isfinite(cross[0]) else None,
        "per_setting_configs": "; ".join(labels), "seeds": n, "normalisation": NORMALISATION,
    }


def _ci(name: str, bounds: tuple[float | None, float | None]) -> dict:
    return {f"{name}_ci_low": bounds[0], f"{name}_ci_high": bounds[1]}


def robustness_table(tuning: pl.LazyFrame | pl.DataFrame) -> pl.DataFrame:
    """One row per (task, method) run in two or more settings: per-setting and cross-setting tuned
    scores on normalised scores, their gap, each with a 95% bootstrap CI over seeds, and the
    configurations chosen. Empty when no method runs in two settings."""
    runs = normalised(tuning)
    variant = queries.variant_columns(runs.lazy().drop("p_lo", "p_hi", "normalised"))
    settings = [c for c in variant if c != "task"]
    rows = []
    for (task, optimizer), method in runs.sort(*settings, "optimizer").group_by("task", "optimizer", maintain_order=True):
        varied = [c for c in settings if method[c].n_unique() > 1]  # what tells this method's settings apart
        if not varied:
            continue
        hyper = [h for h in queries.hyperparameter_columns(method.columns) if method[h].null_count() < method.height]
        rows.append({"task": task, "optimizer": optimizer, **_method_row(method, varied, hyper)})
    schema = {"task": pl.String, "optimizer": pl.String}
    return pl.DataFrame(rows).sort("task", "optimizer") if rows else pl.DataFrame(schema=schema)


def robustness_text(table: pl.DataFrame, fmt: str) -> str:
    """The robustness table rendered (md, latex, html) or as CSV."""
    if fmt == "csv":
        return tables.csv_text(table)
    grids = []
    for (task,), group in table.group_by("task", maintain_order=True):
        rows = [[r["optimizer"], f"{tables.number(r['per_setting'])} {tables.interval(r['per_setting_ci_low'], r['per_setting_ci_high'])}",
                 f"{tables.number(r['cross_setting'])} {tables.interval(r['cross_setting_ci_low'], r['cross_setting_ci_high'])}",
                 f"{tables.number(r['gap'])} {tables.interval(r['gap_ci_low'], r['gap_ci_high'])}",
                 r["cross_setting_config"] or "none usable in every setting", r["per_setting_configs"]]
                for r in group.to_dicts()]
        note = (f"Normalised scores, {NORMALISATION}. Per-setting: each setting tuned on its own (best configuration's mean "
                "normalised score, averaged over the settings); cross-setting: one configuration for every setting "
                "(best average); gap = per-setting - cross-setting, what not retuning per setting costs (Adkins, "
                f"Bowling and White, NeurIPS 2024). 95% CIs: percentile bootstrap over seeds ({stats.BOOTSTRAP_RESAMPLES} "
                "resamples, selection redone in each, normalisation fixed).")
        grids.append(tables.Grid(f"{task}: sensitivity across settings", note,
                                 ("method", "per-setting tuned", "cross-setting tuned", "gap", "cross-setting configuration",
                                  "per-setting configurations (score)"), rows, set()))
    return tables.render(grids, fmt)
