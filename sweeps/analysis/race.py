"""The decisions of a racing sweep (sweeps.spec.race), as a function of the per-seed scores alone.

The test, after each round, within each (task, settings, optimizer), on the seeds every
configuration still in the race holds (the same seeds, hence the same streams: paired):

1. A configuration with a diverged (or non-finite) score on any seed is out ("diverged"), as
   the best table never selects a configuration with a diverged seed.
2. The current best is the configuration with the best mean score (lower MSE, higher accuracy;
   a tie goes to the smaller config id, as `sweeps.analysis.queries.best_configs`).
3. Every other configuration c is compared with the best b by a ONE-SIDED PAIRED t-TEST on
   the per-seed differences d_s = x_c(s) - x_b(s) on the test's scale x (`test_scale`): for a
   score that is a positive error, lower is better (MSE), x = log(score), so d_s = log of the
   ratio of c's error to b's; for a score where higher is better (accuracy, in [0, 1]),
   x = -score. H0 mean(d) <= 0 against H1 mean(d) > 0 (c is worse),
   t = mean(d) / (std(d, ddof=1) / sqrt(n)), p = P(T_{n-1} > t) from the exact Student t
   distribution (`student_t_sf`). Differences with no spread decide on their sign (p = 0 when c
   is worse on every seed by the same amount, p = 1 when they are equal). Why logs for errors:
   a learner's errors differ between configurations by factors, not by amounts, and a
   configuration that blows up while staying finite (1e9 to 1e15 times the best's error) has
   raw differences spread over orders of magnitude, so its raw t is small (p ~ 0.2) whatever its
   sign; its log ratios (21 to 35) are consistently positive and it is out at once. Where a
   method's round holds an error score <= 0 (no log), that round tests the raw scores. The
   recorded `difference` stays in score units (the mean raw paired difference).
4. Holm's step-down correction over the m configurations compared with the best in that
   method's round: the i-th smallest p is adjusted to max_{j<=i} min(1, (m - j + 1) p_(j)); a
   configuration whose adjusted p is <= alpha is out ("worse than the best"). The family-wise
   chance of eliminating a configuration that is as good as the best is at most alpha per round
   and method (given the best; the best itself is picked on the same seeds, which makes the
   others look slightly worse: the usual caveat of racing, F-Race and irace alike).

Why a t-test: rank tests (Wilcoxon, Friedman) cannot reach a small p with 3-4 seeds (with 3
seeds the smallest one-sided Wilcoxon p is 1/8), while paired differences on shared streams are
sharp, so a t-test separates clearly worse configurations after the first round. No random
draw is made: the decisions are a deterministic function of the scores, so a resumed race
decides exactly as an uninterrupted one (the scores themselves are pack-invariant).

`replay` plays a whole race on a frame of scores (the driver calls it on what the store holds
after each round; a test or a study calls it on a full grid's scores to see what racing would
have done).

Eliminations are revisited: one made against a best that later diverges or shows an outlier seed
is undone (`replay`), since the full grid would have judged the two on every seed, tail included.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import polars as pl

from sweeps.analysis import stats
from sweeps.analysis.raced import DECISION_SCHEMA, ELIMINATED, SURVIVOR, TEST
from sweeps.spec import Experiment, Sweep
from sweeps.store import Store
from sweeps.store.dataset import SETTING_COLUMNS
from sweeps.store.records import RaceDecision, RaceMethod, RaceRecord, RecordError
from tasks import TASKS

DIVERGED, WORSE = "diverged", "worse than the best"
PER_RUN_COLUMNS = ("config_id", "seed", "score", "diverged", "wall_seconds", "steps", "stage", "race_status",
                   "eliminated_round")
RETESTED = "worse than a clean configuration (re-tested: its best diverged or blew up)"
REVIVED = "back in the race (its best diverged or blew up)"


def student_t_sf(t: np.ndarray, df: int) -> np.ndarray:
    """P(T > t) for T ~ Student t with an integer `df` >= 1 degrees of freedom: the exact finite
    series of Abramowitz & Stegun 26.7.3 (odd df) and 26.7.4 (even df) for A = P(|T| <= |t|)."""
    t = np.asarray(t, dtype=np.float64)
    theta = np.arctan(np.abs(t) / math.sqrt(df))  # |t| = inf: pi / 2
    s, c2 = np.sin(theta), np.cos(theta) ** 2
    term = np.ones_like(theta)
    series = np.ones_like(theta)
    if df % 2:
        for k in range(1, (df - 3) // 2 + 1):
            term = term * (2 * k) / (2 * k + 1) * c2
            series = series + term
        inside = 2 / math.pi * (theta + (s * np.cos(theta) * series if df > 1 else 0.0))
    else:
        for k in range(1, (df - 2) // 2 + 1):
            term = term * (2 * k - 1) / (2 * k) * c2
            series = series + term
        inside = s * series
    upper = (1.0 - inside) / 2.0
    return np.where(t >= 0, upper, 1.0 - upper)


def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values of one family."""
    p = np.asarray(p, dtype=np.float64)
    m = p.size
    order = np.argsort(p, kind="stable")
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * p[order]))
    return adjusted


def paired_p_values(differences: np.ndarray) -> np.ndarray:
    """One-sided paired t-test p-values, H1: mean > 0, one per row of a (k, n) matrix of differences."""
    k, n = differences.shape
    mean = differences.mean(axis=1)
    if n < 2:
        return np.where(mean > 0, 0.5, 1.0)  # no spread to test with: nothing is out
    sd = differences.std(axis=1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = mean / (sd / math.sqrt(n))
    t = np.where(sd > 0, t, np.where(mean > 0, np.inf, -np.inf))
    return student_t_sf(t, n - 1)


def test_scale(loss: np.ndarray, higher_is_better: bool) -> np.ndarray:
    """The scale the paired test runs on (module doc, point 3), from the losses (the score where lower is
    better, minus it where higher is) of one method's round, diverged rows (non-finite) included:
    log(loss) for a positive error, the loss itself for an accuracy or where an error is <= 0."""
    finite = loss[np.isfinite(loss)]
    if higher_is_better or not np.all(finite > 0):
        return loss
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(loss)


def method_columns(scores: pl.DataFrame) -> list[str]:
    """The task, its settings and the optimizer of per-seed scores: what a race compares within (the columns of
    `queries.variant_columns` and the optimizer; this module is below `queries`, whose Analysis replays races)."""
    return [c for c in scores.columns if c not in PER_RUN_COLUMNS and (c in SETTING_COLUMNS or c == "optimizer")]


def decide(scores: pl.DataFrame, alpha: float, round_number: int = 1) -> pl.DataFrame:
    """One round's decisions: one row per configuration of `scores` (columns: the task and its settings,
    optimizer, config_id, seed, score, diverged), of DECISION_SCHEMA. Within each (task, settings,
    optimizer) the configurations are compared on the seeds they all hold."""
    frames = []
    for _, group in scores.sort("config_id", "seed").group_by(method_columns(scores), maintain_order=True):
        frames.append(_decide_method(group, alpha, round_number))
    return pl.concat(frames) if frames else pl.DataFrame(schema=DECISION_SCHEMA)


def _decide_method(group: pl.DataFrame, alpha: float, round_number: int) -> pl.DataFrame:
    ids = group["config_id"].unique(maintain_order=True).to_list()
    shared = set.intersection(*(set(g["seed"]) for _, g in group.group_by("config_id", maintain_order=True)))
    paired = group.filter(pl.col("seed").is_in(sorted(shared)))
    n = len(shared)
    higher = TASKS[group["task"][0]].higher_is_better
    loss = paired["score"].cast(pl.Float64).to_numpy().reshape(len(ids), n) * (-1.0 if higher else 1.0)
    diverged = group.group_by("config_id", maintain_order=True).agg(
        bad=pl.col("diverged").any() | ~pl.col("score").cast(pl.Float64).is_finite().all())["bad"].to_numpy()
    k = len(ids)
    status = np.where(diverged, ELIMINATED, SURVIVOR).astype(object)
    reason = np.where(diverged, DIVERGED, None).astype(object)
    difference, p_value, p_adjusted = np.full(k, np.nan), np.full(k, np.nan), np.full(k, np.nan)
    best = None
    usable = np.flatnonzero(~diverged)
    if usable.size:
        b = usable[np.argmin(loss[usable].mean(axis=1))]  # ids are sorted: a tie goes to the smaller id
        best = ids[b]
        others = usable[usable != b]
        if others.size:
            scale = test_scale(loss[usable], higher)
            tested = dict(zip(usable, scale))
            difference[others] = (loss[others] - loss[b]).mean(axis=1)
            p_value[others] = paired_p_values(np.stack([tested[o] for o in others]) - tested[b])
            p_adjusted[others] = holm(p_value[others])
            out = others[p_adjusted[others] <= alpha]
            status[out], reason[out] = ELIMINATED, WORSE
    return pl.DataFrame({
        "round": [round_number] * k, "config_id": ids, "optimizer": [group["optimizer"][0]] * k,
        "race_status": status.tolist(), "reason": reason.tolist(), "best": [best] * k,
        "difference": difference, "p_value": p_value, "p_adjusted": p_adjusted, "seeds": [n] * k,
    }, schema=DECISION_SCHEMA).with_columns(pl.col("difference", "p_value", "p_adjusted").fill_nan(None))


@dataclass(frozen=True)
class Replay:
    """Where a race stands on some scores: the decisions of every round decided, in order, and the
    configurations still in it (all of them before the first decision)."""

    decisions: pl.DataFrame  # DECISION_SCHEMA, rounds 1..decided
    alive: tuple[str, ...]  # config ids still getting seeds
    decided: int  # rounds decided
    next_seeds: tuple[int, ...] | None  # the seeds the configurations alive hold after the next round; None: finished

    @property
    def finished(self) -> bool:
        return self.next_seeds is None


def replay(scores: pl.LazyFrame | pl.DataFrame | None, configs: Iterable[str], rounds: list[tuple[int, ...]],
           alpha: float) -> Replay:
    """Play the race on `scores` (per-seed rows; other configurations and seeds are ignored): round r
    is decided once every configuration still in the race has a score on every seed of `rounds[r]`
    (the seeds it holds after round r). `configs`: every configuration the race starts with.

    An elimination made against a best that later diverges, or later shows an outlier seed (a
    blow-up that stayed finite: `stats.outlier_mask`), is revisited (`_revisit`): it was judged
    against scores whose tail the first seeds did not show. The configuration stays out only if
    another configuration, clean so far, beats it on its seeds; otherwise it is back in the race and
    from the next round catches up on the seeds it missed. A race whose last round brings one back
    plays that round's seeds again."""
    alive = tuple(sorted(configs))
    decided: list[pl.DataFrame] = []
    frame = None
    if scores is not None:
        columns = [c for c in scores.lazy().collect_schema().names() if c not in ("wall_seconds", "steps", "stage")]
        frame = scores.lazy().filter(pl.col("config_id").is_in(list(configs))).select(columns).collect()
    state = _Standing()
    number, revived = 1, False
    while number <= len(rounds) or revived:
        seeds = rounds[min(number, len(rounds)) - 1]
        now = None if frame is None else frame.filter(pl.col("config_id").is_in(list(alive)) & pl.col("seed").is_in(list(seeds)))
        if now is None or now.select("config_id", "seed").n_unique() < len(alive) * len(seeds):
            return Replay(_concat(decided), alive, number - 1, seeds)
        decisions = decide(now, alpha, number)
        state.held.update(dict.fromkeys(alive, seeds))
        out = decisions.filter(pl.col("race_status") == ELIMINATED)
        state.tainted.update(out.filter(pl.col("reason") == DIVERGED)["config_id"])
        state.tainted.update(_with_outliers(now, alive, seeds))
        state.beaten_by.update(out.filter(pl.col("reason") == WORSE).select("config_id", "best").iter_rows())
        back, kept = _revisit(frame, state, alpha, number)
        decided.extend([decisions, kept])
        alive = tuple(sorted({*decisions.filter(pl.col("race_status") == SURVIVOR)["config_id"], *back}))
        revived = bool(back) and number >= len(rounds)
        number += 1
    return Replay(_concat(decided), alive, number - 1, None)


@dataclass
class _Standing:
    """What `replay` carries from round to round."""

    held: dict[str, tuple[int, ...]] = field(default_factory=dict)  # config -> the seeds it holds
    beaten_by: dict[str, str] = field(default_factory=dict)  # config out as worse -> the best it lost to
    tainted: set[str] = field(default_factory=set)  # configurations that diverged or showed an outlier seed


def _revisit(frame: pl.DataFrame, state: _Standing, alpha: float, number: int) -> tuple[set[str], pl.DataFrame]:
    """The configurations out as worse than a best now tainted: each is tested again (one-sided paired
    t-test on its own seeds, Holm over those revisited per method this round) against the clean
    configuration of its method with the best mean on those seeds, among those holding them all.
    One with no clean rival holding its seeds is back too. Returns those back in the race, and the
    round's decisions about the revisited: out again (RETESTED, against the clean rival) or back (REVIVED)."""
    revisit = sorted(c for c, best in state.beaten_by.items() if best in state.tainted)
    if not revisit:
        return set(), pl.DataFrame(schema=DECISION_SCHEMA)
    method = dict(frame.select("config_id", pl.concat_str(method_columns(frame), separator="|", ignore_nulls=True))
                  .unique().iter_rows())
    tests: dict[str, list[tuple[str, str, float, float, int]]] = {}
    back = set()
    for c in revisit:
        seeds = state.held[c]
        rivals = sorted(r for r, held in state.held.items() if r != c and r not in state.tainted
                        and method[r] == method[c] and len(held) >= len(seeds))
        if not rivals:
            back.add(c)
            continue
        rows = frame.filter(pl.col("config_id").is_in([c, *rivals]) & pl.col("seed").is_in(list(seeds))).sort("config_id", "seed")
        higher = TASKS[rows["task"][0]].higher_is_better
        ids = rows["config_id"].unique(maintain_order=True).to_list()
        loss = (-1.0 if higher else 1.0) * rows["score"].cast(pl.Float64).to_numpy().reshape(len(ids), len(seeds))
        mine = ids.index(c)
        others = [i for i in range(len(ids)) if i != mine]
        best = others[int(np.argmin(loss[others].mean(axis=1)))]
        scale = test_scale(loss[[mine, best]], higher)
        p = float(paired_p_values((scale[0] - scale[1])[None, :])[0])
        tests.setdefault(method[c], []).append((c, ids[best], float((loss[mine] - loss[best]).mean()), p, len(seeds)))
    kept = []
    for group in tests.values():
        adjusted = holm(np.array([t[3] for t in group]))
        for (c, best, difference, p, n), q in zip(group, adjusted):
            if q <= alpha:
                state.beaten_by[c] = best
                kept.append((c, ELIMINATED, RETESTED, best, difference, p, float(q), n))
            else:
                back.add(c)
    kept.extend((c, SURVIVOR, REVIVED, state.beaten_by.pop(c), None, None, None, len(state.held[c])) for c in sorted(back))
    optimizer = dict(frame.select("config_id", "optimizer").unique().iter_rows())
    return back, pl.DataFrame(
        [{"round": number, "config_id": c, "optimizer": optimizer[c], "race_status": status, "reason": why, "best": b,
          "difference": d, "p_value": p, "p_adjusted": q, "seeds": n} for c, status, why, b, d, p, q, n in kept],
        schema=DECISION_SCHEMA,
    )


def _with_outliers(now: pl.DataFrame, configs: tuple[str, ...], seeds: tuple[int, ...]) -> set[str]:
    """The configurations (of a round's complete frame) with an outlier seed."""
    ordered = now.sort("config_id", "seed")["score"].cast(pl.Float64).to_numpy().reshape(len(configs), len(seeds))
    return {configs[i] for i in np.flatnonzero(stats.outlier_mask(ordered).any(axis=1))}


def _concat(frames: list[pl.DataFrame]) -> pl.DataFrame:
    return pl.concat(frames) if frames else pl.DataFrame(schema=DECISION_SCHEMA)


def run_steps(decisions: pl.DataFrame, steps: dict[str, int], configs: Iterable[str], first: int) -> int:
    """Run-steps a race spends: each configuration's seeds (those of its last round decided, `first`
    for a configuration with no decision yet) times its run length (`steps`, per config id)."""
    held = dict(decisions.group_by("config_id").agg(pl.col("seeds").max()).iter_rows())
    return sum(held.get(c, first) * steps[c] for c in configs)


def race_rounds(sweep: Sweep) -> list[tuple[int, ...]]:
    """The seeds every configuration still in `sweep`'s race holds after each round."""
    seeds = sweep.race.seeds(sweep.seeds)
    return [seeds[:n] for n in sweep.race.schedule(sweep.seeds)]


def replay_stored(sweep: Sweep, scores: pl.LazyFrame | None) -> Standing:
    """The race of `sweep` played on a store's committed scores (every stored run, the race's and any other:
    `Store.scan("scores", all_runs=True)`; None before any run): each method on its own (`replay_method`)."""
    frame = None if scores is None else scores.lazy().collect()  # read once for every method
    return Standing(tuple((e.label, replay_method(sweep, e, frame)) for e in sweep.experiments))


def replay_method(sweep: Sweep, experiment: Experiment, scores: pl.LazyFrame | pl.DataFrame | None) -> Replay:
    """One method's race (an experiment of `sweep`: its configurations only) played on `scores`. Methods race
    independently: a round is decided once this method's configurations in the race hold its seeds, whatever
    round another method is in; the test compares configurations of one method only, so each method's
    decisions are those a race of the whole sweep makes on the same scores."""
    return replay(scores, [c.config_id for c in experiment.cells], race_rounds(sweep), sweep.race.alpha)


@dataclass(frozen=True)
class Standing:
    """Where every method of a race stands: (experiment label, its Replay), in the sweep's order."""

    methods: tuple[tuple[str, Replay], ...]

    @property
    def finished(self) -> bool:
        return all(played.finished for _, played in self.methods)

    @property
    def decisions(self) -> pl.DataFrame:
        return _concat([played.decisions for _, played in self.methods])


def stored_race(store: Store) -> RaceRecord | None:
    """race.json of a raced store; where it is damaged, the record rebuilt by replaying the race on the
    stored scores: the decisions are a function of the scores, so it is the record the driver wrote
    (the store's `damage_notice` says so; `run --resume` writes it anew)."""
    try:
        return store.race
    except RecordError:
        return race_record(store.sweep, replay_stored(store.sweep, store.scan("scores", all_runs=True)))


def race_record(sweep: Sweep, standing: Standing) -> RaceRecord:
    """race.json for `sweep`'s race as it stands: every method's decisions and its rounds."""
    race = sweep.race
    methods = tuple(RaceMethod(method=label, rounds=played.decided, finished=played.finished)
                    for label, played in standing.methods)
    return RaceRecord(test=TEST, alpha=race.alpha, schedule=race.schedule(sweep.seeds), seeds=race.seeds(sweep.seeds),
                      decisions=tuple(RaceDecision(**row) for row in standing.decisions.to_dicts()),
                      finished=standing.finished, methods=methods)
