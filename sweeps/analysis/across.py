"""Several sweeps read as one: `fade-sweep table A B` and `report A B` compare the methods of sweeps
run on the same task and task settings (a new learner's sweep against stored baselines).

Their frames are stacked with a `sweep` column (the results folder's name). A method name found in
more than one sweep is labelled by its sweep, "fade [A]", and so are its config ids ("A/<id>": the
same configuration run by two sweeps is two cells, each with its own seeds), so every table and
figure made from one `Analysis` works across sweeps unchanged: the best, sensitivity and compare
tables, importance, the report's figures. Sweeps of different tasks or task settings are refused
(`NotComparable`, a SweepError: exit 2) naming the setting that differs: their scores do not mean
the same thing.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import polars as pl

from sweeps.analysis.queries import Analysis, own_hyperparameters
from sweeps.analysis.raced import SURVIVOR
from sweeps.plan import TUNING
from sweeps.spec import LOCATION_SETTINGS, Sweep, SweepError
from sweeps.store import Store

SWEEP = "sweep"  # the column naming each row's sweep


class NotComparable(SweepError):
    """The sweeps differ in their task or task settings (or are not sweeps at all)."""


def _variants(sweep: Sweep) -> set[tuple[str, tuple[tuple[str, object], ...]]]:
    """The sweep's (task, settings) pairs, less where the data lives."""
    return {(e.task, tuple(sorted((k, v) for k, v in dataclasses.asdict(e.settings).items() if k not in LOCATION_SETTINGS)))
            for e in sweep.experiments}


def check_comparable(stores: list[Store]) -> None:
    """NotComparable naming the first task or task setting in which a sweep differs from the first one."""
    names = [s.location.name for s in stores]
    if len(set(names)) < len(names):
        twice = next(n for n, k in Counter(names).items() if k > 1)
        raise NotComparable(f"{twice}: named twice; compare results folders of different sweeps")
    sweeps = []
    for store in stores:
        if store.sweep is None:
            raise NotComparable(f"{store.location}: no recorded sweep (sweep.yaml) to compare; give STORAGE/<sweep name>")
        sweeps.append(store.sweep)
    first, reference = names[0], _variants(sweeps[0])
    for name, sweep in zip(names[1:], sweeps[1:]):
        variants = _variants(sweep)
        if variants == reference:
            continue
        tasks, theirs = {t for t, _ in reference}, {t for t, _ in variants}
        if tasks != theirs:
            raise NotComparable(f"{name} runs task {', '.join(sorted(theirs))}, {first} runs {', '.join(sorted(tasks))}: "
                                "compare sweeps of the same task and task settings")
        raise NotComparable(f"{name} and {first} differ in task setting {_differing(reference, variants)}: "
                            "compare sweeps of the same task and task settings")


def _differing(a: set, b: set) -> str:
    """`key: values in a vs values in b` for the first setting whose values differ."""
    values_a: dict[str, set] = {}
    values_b: dict[str, set] = {}
    for variants, values in ((a, values_a), (b, values_b)):
        for _, settings in variants:
            for key, value in settings:
                values.setdefault(key, set()).add(value)
    for key in sorted(set(values_a) | set(values_b)):
        if values_a.get(key) != values_b.get(key):
            shown = [", ".join(map(str, sorted(v, key=str))) if v else "none" for v in (values_b.get(key), values_a.get(key))]
            return f"{key} ({shown[0]} against {shown[1]})"
    return "combinations (each value is used, but not together)"


def clashing(stores: list[Store]) -> set[str]:
    """Method names run by more than one of the sweeps: these are labelled by sweep."""
    if len(stores) < 2:
        return set()
    counts = Counter(o for s in stores for o in {e.optimizer for e in s.sweep.experiments})
    return {o for o, n in counts.items() if n > 1}


def labelled(frame: pl.LazyFrame | pl.DataFrame, sweep: str, clash: set[str]):
    """`frame` with its sweep column, its clashing methods named "method [sweep]" and their config ids "sweep/id"."""
    if "optimizer" not in frame.collect_schema().names():
        return frame.with_columns(pl.lit(sweep).alias(SWEEP))
    mine = pl.col("optimizer").is_in(list(clash))
    return frame.with_columns(
        pl.when(mine).then(pl.col("optimizer") + f" [{sweep}]").otherwise(pl.col("optimizer")).alias("optimizer"),
        pl.when(mine).then(pl.lit(f"{sweep}/") + pl.col("config_id")).otherwise(pl.col("config_id")).alias("config_id"),
        pl.lit(sweep).alias(SWEEP),
    )


def _stacked(frames: list, how: str = "diagonal_relaxed"):
    return frames[0] if len(frames) == 1 else pl.concat(frames, how=how)


def combined_analysis(stores: list[Store], stat: str = "mean") -> Analysis:
    """One Analysis of the tuning runs of every sweep (checked comparable first); no race summary
    across sweeps (each race's cells keep their race columns)."""
    check_comparable(stores)
    clash = clashing(stores)
    parts = [(s.location.name, Analysis.of(s, stat)) for s in stores]
    scores = _stacked([labelled(a.scores, name, clash) for name, a in parts])
    if "race_status" in scores.collect_schema().names():  # a raced sweep beside an unraced one: all of its cells run on
        scores = scores.with_columns(pl.col("race_status").fill_null(SURVIVOR))
    return Analysis(
        scores,
        _stacked([labelled(a.expected, name, clash) for name, a in parts]),
        _stacked([labelled(a.missing, name, clash) for name, a in parts]),
        stat,
        left_out=tuple(f for _, a in parts for f in a.left_out),
        repair="`; `".join(a.repair for _, a in parts if a.repair),  # the note quotes it: `one`; `another`
    )


def combined_scan(stores: list[Store], kind: str, stage: str = TUNING) -> pl.LazyFrame | None:
    """The rows of `kind` and `stage` of every sweep that has some, labelled (None: none has any); sweeps
    checked comparable first."""
    if len(stores) > 1:
        check_comparable(stores)
    clash = clashing(stores)
    frames = []
    for store in stores:
        own_hyperparameters(store)  # a table read from these rows alone (confirm, robustness) shows the own columns
        try:
            frames.append(labelled(store.scan(kind, stage=stage), store.location.name, clash))
        except FileNotFoundError:  # this sweep has none of that stage
            continue
    return _stacked(frames) if frames else None


def report_frames(stores: list[Store], stat: str) -> tuple[Analysis, pl.LazyFrame, pl.LazyFrame | None]:
    """What the report reads of one sweep or several: (the tuning analysis, the curves, the confirmation
    stage's scores or None where no sweep has one). A damaged confirmation.json counts as no stage (the
    command says once what it skipped: Store.damage_notice)."""
    from sweeps.plan import CONFIRMATION
    from sweeps.store.records import RecordError

    if len(stores) == 1:
        store = stores[0]
        analysis, curves = Analysis.of(store, stat), store.scan("curves")
        try:
            confirmed = store.selection(stage=CONFIRMATION).runs
        except RecordError:
            confirmed = None
        return analysis, curves, store.scan("scores", stage=CONFIRMATION) if confirmed else None
    analysis = combined_analysis(stores, stat)
    try:
        confirmation = combined_scan(stores, "scores", CONFIRMATION)
    except RecordError:
        confirmation = None
    return analysis, combined_scan(stores, "curves"), confirmation
