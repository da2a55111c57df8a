"""A raced tuning stage (sweeps.spec.race): rounds of packs, each decided on what the store holds.

The loop: play the race on the stored scores (sweeps.analysis.race.replay: a pure function of
the scores), record its decisions so far (race.json), and if it is not finished, run the next
round's missing (config, seed) runs as packs like any other (the driver's `_execute`: resume,
Ctrl-C, checkpoints, verify and object stores work unchanged), then play again. A resumed race
therefore starts by replaying what the store holds and decides exactly as an uninterrupted one:
the decisions draw nothing at random and a run's score does not depend on its pack.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import polars as pl

from sweeps.analysis.race import race_record, race_rounds, replay_stored
from sweeps.spec import Pack, Sweep, plan_round
from sweeps.store.race import race_round, set_aside_damaged
from sweeps.store.records import RACE_FILE
from sweeps.store.store import Store
from sweeps.tune.options import SweepInterrupted, SweepRun

# (seeds of the round, whether to continue recorded packs, the round's planner: runs covered -> packs) -> what it ran
RunRound = Callable[[tuple[int, ...], bool, Callable[[set], list[Pack]]], SweepRun]


def _stored_scores(store: Store) -> pl.LazyFrame | None:
    """Every committed tuning score (newest copy of each run), the race's own and any other."""
    reader = store.reopened()
    return reader.scan("scores", all_runs=True) if reader.finished_runs() else None


def run_race(sweep: Sweep, store: Store, resume: bool, plan_options: dict, run_round: RunRound,
             notice: Callable[[str], None]) -> SweepRun:
    """Run the rounds a raced sweep still needs (the caller holds the writer lock); returns what this
    run did, summed over its rounds. `plan_options`: the slots and cost model, as `plan_packs` takes them. SweepInterrupted from a round leaves the decided rounds recorded."""
    rounds = race_rounds(sweep)
    skipped = len(store.finished_runs() & sweep.pairs) if resume else 0
    aside = set_aside_damaged(store.location)
    if aside:
        notice(f"{store.location.url(RACE_FILE)} was damaged: set aside as {aside}; the race's decisions are "
               "replayed from the stored scores and recorded anew")
    runs: list[SweepRun] = []
    while True:
        played = replay_stored(sweep, _stored_scores(store))
        record = race_record(sweep, played)
        store.record_race(record)
        if played.finished:
            break
        alive = set(played.alive)

        def plan(done: set, alive=alive, round_seeds=played.next_seeds) -> list[Pack]:
            return plan_round(sweep, alive, round_seeds, done=done, **plan_options)

        number, most, _ = race_round(sweep, record)
        configs = sum(e.size for e in sweep.experiments)
        notice(f"Race round {number} of at most {most}: {len(alive)} of {configs} configurations in the race, "
               f"on {len(played.next_seeds)} seeds")
        try:
            runs.append(run_round(played.next_seeds, resume or bool(runs), plan))
        except SweepInterrupted as err:
            raise RoundInterrupted(err, number, most) from None
    if not runs:  # decided already (a resume after the last round): nothing to run, but a run's numbers
        runs.append(run_round(rounds[-1], False, lambda done: []))
    return _summed(runs, skipped)


class RoundInterrupted(SweepInterrupted):
    """A race stopped in a round: the packs counted are the round's, and the message names the round."""

    def __init__(self, err: SweepInterrupted, number: int, most: int):
        super().__init__(err.packs_done, err.packs_total, err.results_dir)
        self.args = (f"interrupted in race round {number} of at most {most}: {err.packs_done} of "
                     f"{err.packs_total} packs done",)


def _summed(runs: list[SweepRun], skipped: int) -> SweepRun:
    """One SweepRun for the rounds of this run: counts summed, times from the first round's start."""
    return dataclasses.replace(
        runs[-1],
        packs=sum(r.packs for r in runs),
        run_steps=sum(r.run_steps for r in runs),
        skipped_runs=skipped,
        compute_seconds=sum(r.compute_seconds for r in runs),
        nodes=frozenset().union(*(r.nodes for r in runs)),
        resumed_packs=sum(r.resumed_packs for r in runs),
    )
