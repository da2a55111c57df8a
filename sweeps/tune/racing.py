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

from sweeps.analysis.race import race_record, replay
from sweeps.spec import Pack, Sweep, plan_round
from sweeps.store.store import Store
from sweeps.tune.options import SweepRun

# (seeds of the round, whether to continue recorded packs, the round's planner: runs covered -> packs) -> what it ran
RunRound = Callable[[tuple[int, ...], bool, Callable[[set], list[Pack]]], SweepRun]


def _stored_scores(store: Store) -> pl.LazyFrame | None:
    """Every committed tuning score (newest copy of each run), the race's own and any other."""
    reader = store.reopened()
    return reader.scan("scores", all_runs=True) if reader.finished_runs() else None


def run_race(sweep: Sweep, store: Store, resume: bool, plan_options: dict, run_round: RunRound) -> SweepRun:
    """Run the rounds a raced sweep still needs (the caller holds the writer lock); returns what this
    run did, summed over its rounds. `plan_options`: the slots and cost model, as `plan_packs` takes them. SweepInterrupted from a round leaves the decided rounds recorded."""
    race = sweep.race
    seeds = race.seeds(sweep.seeds)
    rounds = [seeds[:n] for n in race.schedule(sweep.seeds)]
    configs = [c.config_id for e in sweep.experiments for c in e.cells]
    skipped = len(store.finished_runs() & sweep.pairs) if resume else 0
    runs: list[SweepRun] = []
    while True:
        played = replay(_stored_scores(store), configs, rounds, race.alpha)
        store.record_race(race_record(sweep, played))
        if played.finished:
            break
        alive = set(played.alive)

        def plan(done: set, alive=alive, round_seeds=played.next_seeds) -> list[Pack]:
            return plan_round(sweep, alive, round_seeds, done=done, **plan_options)

        runs.append(run_round(played.next_seeds, resume or bool(runs), plan))
    if not runs:  # decided already (a resume after the last round): nothing to run, but a run's numbers
        runs.append(run_round(rounds[-1], False, lambda done: []))
    return _summed(runs, skipped)


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
