"""A raced sweep as the tables see it: each configuration's place in the race (`race_status`,
`eliminated_round`) and what the race cost, from race.json (records.RaceRecord). The decisions
themselves are race.py's; this module imports nothing of the analysis, so `queries.Analysis` can
join the race's columns into the scores every table is made of.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from sweeps.spec import Sweep
from sweeps.store.records import RaceRecord

TEST = ("one-sided paired t-test on log errors (on accuracies as they are) against the method's current best, "
        "Holm's correction")
SURVIVOR, ELIMINATED = "survivor", "eliminated"
DECISION_SCHEMA = {
    "round": pl.UInt32, "config_id": pl.String, "optimizer": pl.String, "race_status": pl.String, "reason": pl.String,
    "best": pl.String, "difference": pl.Float64, "p_value": pl.Float64, "p_adjusted": pl.Float64, "seeds": pl.UInt32,
}


def race_status(decisions: pl.DataFrame) -> pl.DataFrame:
    """config_id, race_status ("survivor" | "eliminated") and eliminated_round (UInt32, null for survivors):
    each configuration's place in the race after the rounds in `decisions` (its last decision)."""
    last = decisions.sort("round", maintain_order=True).group_by("config_id").agg(pl.all().last())
    return last.select(
        "config_id", "race_status",
        eliminated_round=pl.when(pl.col("race_status") == ELIMINATED).then(pl.col("round")).cast(pl.UInt32),
    ).sort("config_id")


def decisions_frame(record: RaceRecord | None) -> pl.DataFrame:
    """race.json's decisions as a frame of DECISION_SCHEMA (empty before the first decision)."""
    if record is None or not record.decisions:
        return pl.DataFrame(schema=DECISION_SCHEMA)
    return pl.DataFrame([{k: getattr(d, k) for k in DECISION_SCHEMA} for d in record.decisions], schema=DECISION_SCHEMA)


def raced_scores(scores: pl.LazyFrame, record: RaceRecord | None) -> pl.LazyFrame:
    """A raced sweep's per-seed scores with each configuration's `race_status` and `eliminated_round`
    (queries.RACE_COLUMNS): "survivor" (null round) until a decision puts it out."""
    status = race_status(decisions_frame(record))
    return scores.join(status.lazy(), on="config_id", how="left").with_columns(
        pl.col("race_status").fill_null(SURVIVOR), pl.col("eliminated_round").cast(pl.UInt32))


@dataclass(frozen=True)
class RaceSummary:
    """What a race did and cost, for the tables' notes and the report."""

    alpha: float
    schedule: tuple[int, ...]
    rounds: int  # rounds decided
    finished: bool
    configs: int
    eliminated: int
    run_steps: int  # what the race asks for so far (its runs x their steps)
    full_run_steps: int  # every configuration on every seed of the race

    @property
    def saved(self) -> float:
        """Share of the full grid's run-steps the race did not spend."""
        return 1.0 - self.run_steps / self.full_run_steps if self.full_run_steps else 0.0

    def sentence(self) -> str:
        state = f"after {self.rounds} rounds" if self.finished else f"{self.rounds} rounds decided so far (unfinished)"
        return (f"Raced ({TEST}, alpha={self.alpha:g}; seeds per round {', '.join(map(str, self.schedule))}): "
                f"{self.eliminated} of {self.configs} configurations eliminated {state}; each method's best is chosen "
                f"among the survivors, which hold every seed. Run-steps: {self.run_steps:.3e} of the full grid's "
                f"{self.full_run_steps:.3e} ({100 * self.saved:.0f}% saved).")


def race_summary(sweep: Sweep, record: RaceRecord | None, expected: pl.DataFrame) -> RaceSummary:
    """The summary of `sweep`'s race from its record and the runs it asks for so far (`expected`: the
    store's race-aware expected runs, with their `steps`)."""
    race = sweep.race
    schedule = race.schedule(sweep.seeds)
    status = race_status(decisions_frame(record))
    spent = int(expected["steps"].sum()) if expected.height and "steps" in expected.columns else 0
    full = sum(e.size * e.settings.steps for e in sweep.experiments) * len(race.seeds(sweep.seeds))
    return RaceSummary(race.alpha, schedule, max((d.round for d in record.decisions), default=0) if record else 0,
                       bool(record and record.finished), sum(e.size for e in sweep.experiments),
                       status.filter(pl.col("race_status") == ELIMINATED).height, spent, full)
