"""A racing sweep's settings (`race:` in a sweep file, `fade-sweep run --race`): seeds given in rounds.

    race:
      min_seeds: 3          # round 1: every configuration on the first 3 seeds (default 3)
      max_seeds: 10         # survivors end with the first 10 seeds (default: all the sweep's seeds)
      alpha: 0.05           # level of the elimination test, per round and method (default 0.05)
      seeds_per_round: 1    # seeds added per round after the first (default 1)

Round 1 runs every configuration on the first `min_seeds` of the sweep's seeds; each later round
gives the configurations still in the race `seeds_per_round` more, up to `max_seeds` (the
schedule 3, 4, ..., 10 by default: `Race.schedule`). After each round, within each (task,
settings, optimizer), a configuration worse than that optimizer's current best with confidence
stops getting seeds (the test: `sweeps.analysis.race`). Seeds after the first `max_seeds` of the
sweep's are never run.

Each method (task, settings, optimizer) races on its own: its next round starts once its previous
round is in, all rounds in one Tune experiment (sweeps.tune.racing), so a round costs a pack's
start on a reused trial actor (a fraction of a second), not a Tune experiment's.

Why one seed per round: a configuration kept a round too long costs whole runs, while a round
costs little. Replayed on the full grids (benchmarks/race_replay.py), one seed per round spent
34.1% of the full grid's run-steps on `linear-noise0` (10 seeds) and 33.0% on `nonlinear` at
60,000 steps (10 seeds); two seeds per round 34.4% and 33.0%, with the same answers. Plain data,
no statistics: this layer only says what to run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from sweeps.spec.yamlfile import SweepError

DEFAULT_MIN_SEEDS = 3
DEFAULT_ALPHA = 0.05
DEFAULT_SEEDS_PER_ROUND = 1


@dataclass(frozen=True)
class Race:
    """How seeds are given out in rounds; `max_seeds` None means all the sweep's seeds."""

    min_seeds: int = DEFAULT_MIN_SEEDS
    max_seeds: int | None = None
    alpha: float = DEFAULT_ALPHA
    seeds_per_round: int = DEFAULT_SEEDS_PER_ROUND

    def seeds(self, sweep_seeds: tuple[int, ...]) -> tuple[int, ...]:
        """The seeds a configuration that survives every round ends with: the first `max_seeds`."""
        return sweep_seeds[: self.max_seeds or len(sweep_seeds)]

    def schedule(self, sweep_seeds: tuple[int, ...]) -> tuple[int, ...]:
        """Seeds each configuration in the race holds after each round (cumulative): e.g. 3, 4, ..., 10."""
        top = len(self.seeds(sweep_seeds))
        first = min(self.min_seeds, top)
        return tuple(range(first, top, self.seeds_per_round)) + (top,) if first < top else (top,)

    def document(self, sweep_seeds: tuple[int, ...]) -> dict[str, Any]:
        """The settings as a sweep file's `race:` block, every key explicit (what the store records)."""
        return {"min_seeds": self.min_seeds, "max_seeds": len(self.seeds(sweep_seeds)), "alpha": self.alpha,
                "seeds_per_round": self.seeds_per_round}


def with_race(sweep, race: Race | None = None):
    """`sweep` raced (`fade-sweep run --race`: `race` None means the defaults); a sweep that already has a
    `race:` block is returned as it is. The recorded document gets the explicit block, so the store says how
    its seeds were given out."""
    if sweep.race is not None:
        return sweep
    if race is None and len(sweep.seeds) < 2:
        raise SweepError("--race: a race needs at least 2 seeds (`seeds`); a paired test cannot compare one")
    race = race or Race(min(DEFAULT_MIN_SEEDS, len(sweep.seeds)))
    return dataclasses.replace(sweep, race=race, document={**sweep.document, "race": race.document(sweep.seeds)})


def method_names(labels: list[str]) -> dict[str, str]:
    """Experiment labels ("task[settings] optimizer") as a person reads them in a race's progress: the optimizer
    alone where that tells the methods apart, else the whole label."""
    short = {label: label.rsplit(" ", 1)[-1] for label in labels}
    return short if len(set(short.values())) == len(short) else {label: label for label in labels}
