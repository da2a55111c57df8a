"""A raced tuning stage (sweeps.spec.race): each method's rounds handed out within ONE Tune experiment.

Methods race independently: a method's next round is planned the moment its previous round's packs
are in (`RaceRounds.after`, called by the searcher as each trial ends), so a slot never waits for
another method's round, and Ray, Tune and the trial actors start once per run. Each decision is
`sweeps.analysis.race.replay_method` on the scores the store holds (a pure function of the scores),
recorded in race.json (`Store.record_race`) before the round it opens runs. A resumed race therefore
starts by replaying what the store holds and decides exactly as an uninterrupted one: the decisions
draw nothing at random and a run's score does not depend on its pack or on when it ran.

A round's runs are cut into packs by the planner's cost model (`plan_round`) for the method's share
of the slots (all of them once it races alone), so a few survivors on a new seed fill the slots. After
its first round, a method whose configurations still in the race would cost less kernel time on all
their remaining seeds than its remaining rounds' packs cost in fixed time (`CostModel.at_once`), or that
is down to one configuration, gets all its remaining seeds at once, and `replay` decides its remaining
rounds together once the runs are in: the same decisions (a function of the scores, not of when the runs
ran), one pack's fixed costs instead of one per round. Why: a late round is a few runs on one new seed,
whose pack costs far more in fixed costs (its start, the seed's stream, its chunk reports and
checkpoints) than in run-steps, and a method's rounds run one after another. The price: where a later
round still puts one of them out, its seeds after that round are run-steps a round-by-round race would
not have spent (stored, read and counted like any other run: sweeps.store.race).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import polars as pl

from sweeps.analysis.race import Replay, Standing, race_record, replay_method, replay_stored
from sweeps.plan import TUNING, CostModel, Pack, plan_round
from sweeps.spec import Experiment, Sweep
from sweeps.spec.race import method_names
from sweeps.store.race import set_aside_damaged
from sweeps.store.records import RACE_FILE
from sweeps.store.store import Store
from sweeps.tune.metrics import gauge_start
from sweeps.tune.options import ExecutionOptions, SweepInterrupted
from sweeps.tune.progress import SweepProgress
from sweeps.tune.resume import StageStart, covered, finished_recorded, recorded_packs, resumable


@dataclass
class _Method:
    """One method's race: its standing and the packs of its round still out."""

    experiment: Experiment
    played: Replay
    out: set[str] = field(default_factory=set)  # pack ids of the round under way not ended yet
    given: set[str] = field(default_factory=set)  # configurations given every seed at once


class RaceRounds:
    """Every method's rounds: the first packs (`start`) and each next round as a method's round is in (`after`)."""

    def __init__(self, sweep: Sweep, store: Store, plan_options: dict,
                 on_change: Callable[[RaceRounds], None] = lambda rounds: None):
        """`plan_options`: the slots and cost model, as `plan_round` takes them; `on_change`: told whenever a
        round is decided (the progress display)."""
        self.sweep, self.store, self._options, self.on_change = sweep, store, plan_options, on_change
        self._methods: dict[str, _Method] = {}

    def start(self, resume: bool, dtype: str, notify: Callable[[str], None] | None = None) -> StageStart:
        """Replay the race on the store, record it, and plan each method's round under way (packs of an
        interrupted run continue from their checkpoints). A damaged race.json is set aside first (`notify`
        says so): the replay writes it anew."""
        aside = set_aside_damaged(self.store.location)
        if aside and notify is not None:
            notify(f"{self.store.location.url(RACE_FILE)} was damaged: set aside as {aside}; the race's decisions are "
                   "replayed from the stored scores and recorded anew")
        reader = self.store.reopened()
        standing = replay_stored(self.sweep, _stored_scores(reader))
        self._methods = {e.label: _Method(e, played) for e, (_, played) in zip(self.sweep.experiments, standing.methods)}
        self._record()
        finished = self._finished_runs(reader)
        recorded = recorded_packs(self.store, self.sweep, TUNING, None, notify) if resume else {}
        wanted = set().union(*(self._wanted(m) for m in self._methods.values()))  # a resumed pack: of a round under way
        resumed, resume_from = resumable(self.store, {pid: p for pid, p in recorded.items() if set(p.pairs()) <= wanted},
                                         finished, dtype)
        packs = list(resumed)
        for label, method in self._methods.items():
            packs += self._round(method, reader, [p for p in resumed if p.experiment.label == label])
        self.on_change(self)
        return StageStart(packs, resume_from, finished_recorded(recorded, finished))

    def after(self, pack: Pack) -> list[Pack]:
        """A pack's trial ended (written, failed or stopped): once its method's round is all in, the next round."""
        method = self._methods[pack.experiment.label]
        method.out.discard(pack.pack_id)
        if method.out or method.played.finished:
            return []
        decided = method.played.decided
        reader = self.store.reopened()  # what the trials committed
        method.played = replay_method(self.sweep, method.experiment, _stored_scores(reader))
        if method.played.decided == decided and not method.played.finished:
            return []  # a pack of the round failed or was stopped: the method waits for --resume
        self._record()
        packs = self._round(method, reader)
        self.on_change(self)
        return packs

    def _round(self, method: _Method, reader: Store, resumed: list[Pack] = ()) -> list[Pack]:
        """The new packs of the method's next round: its runs but those `reader` holds and those of its
        `resumed` packs (which continue from checkpoints), deciding again where the store holds the round."""
        done = covered(self._finished_runs(reader), list(resumed))
        while not method.played.finished:
            packs = plan_round(self.sweep, set(method.played.alive), self._seeds(method), done=done,
                               **self._share())
            if packs or resumed:
                method.out = {p.pack_id for p in [*resumed, *packs]}
                return packs
            method.played = replay_method(self.sweep, method.experiment, _stored_scores(reader))
            self._record()
        return []

    def _share(self) -> dict:
        """The plan options with this method's share of the CPU slots: those of the methods still racing."""
        racing = sum(not m.played.finished for m in self._methods.values())
        return {**self._options, "cpus": max(1, round(self._options["cpus"] / max(1, racing)))}

    def _seeds(self, method: _Method) -> tuple[int, ...]:
        """The seeds a method's next packs give its configurations in the race: the next round's, or every seed
        of the race where they are better run at once (the module docstring; their rounds are decided together
        once their runs are in, as `replay` decides any round whose runs the store holds)."""
        played, every = method.played, self.sweep.race.seeds(self.sweep.seeds)
        if played.finished or played.decided == 0:
            return played.next_seeds
        schedule = self.sweep.race.schedule(self.sweep.seeds)
        costs = self._options.get("costs") or CostModel()
        left = len(every) - schedule[min(played.decided, len(schedule)) - 1]
        if len(played.alive) > 1 and not costs.at_once(method.experiment, len(played.alive), left,
                                                        len(schedule) - played.decided):
            return played.next_seeds
        method.given |= set(played.alive)
        return every

    def _wanted(self, method: _Method) -> set[tuple[str, int]]:
        return set() if method.played.finished else {(c, s) for c in method.played.alive for s in self._seeds(method)}

    def _finished_runs(self, reader: Store) -> set[tuple[str, int]]:
        return set(reader.finished_runs() & self.sweep.pairs)

    def _record(self) -> None:
        self.store.record_race(race_record(self.sweep, self.standing))

    @property
    def standing(self) -> Standing:
        return Standing(tuple((label, m.played) for label, m in self._methods.items()))

    @property
    def rounds(self) -> dict[str, tuple[int, bool]]:
        """method label -> (its round under way, or its last once finished; whether it is finished)."""
        return {label: (m.played.decided + (not m.played.finished), m.played.finished) for label, m in self._methods.items()}

    @property
    def most_run_steps(self) -> int:
        """The most run-steps the race can need, as it stands: a configuration out keeps its seeds (every seed
        where it was given them at once), one in the race gets every seed of the race."""
        top, first = len(self.sweep.race.seeds(self.sweep.seeds)), self.sweep.race.schedule(self.sweep.seeds)[0]
        total = 0
        for m in self._methods.values():
            every, held = m.given | set(m.played.alive), _held(m.played)
            total += m.experiment.settings.steps * sum(
                top if c.config_id in every else held.get(c.config_id, first) for c in m.experiment.cells)
        return total


def race_progress(sweep: Sweep, start: StageStart, store: Store, options: ExecutionOptions,
                  rounds: RaceRounds) -> SweepProgress:
    """The progress callback of a race: run-steps done of the most the race can need, and each method's round
    (kept up to date as rounds are decided)."""
    progress = SweepProgress(sweep.name, start.packs, store.location, finished=start.earlier, display=options.display,
                             gauges=gauge_start(sweep, store, TUNING))
    most = len(sweep.race.schedule(sweep.seeds))

    def changed(race: RaceRounds) -> None:
        progress.race(race.rounds, max([most, *(n for n, _ in race.rounds.values())]), race.most_run_steps)

    rounds.on_change = changed
    changed(rounds)
    return progress


class RoundInterrupted(SweepInterrupted):
    """A race stopped: the packs counted are this run's, and the message names each method's round."""

    def __init__(self, err: SweepInterrupted, rounds: RaceRounds):
        super().__init__(err.packs_done, err.packs_total, err.results_dir)
        names = method_names(list(rounds.rounds))
        racing = {label: n for label, (n, done) in rounds.rounds.items() if not done}
        where = ", ".join(f"{names[label]} in round {n}" for label, n in racing.items()) or "all methods decided"
        most = len(rounds.sweep.race.schedule(rounds.sweep.seeds))
        self.args = (f"interrupted in the race ({where}; at most {most} rounds): {err.packs_done} of "
                     f"{err.packs_total} packs done",)


def _held(played: Replay) -> dict[str, int]:
    return dict(played.decisions.group_by("config_id").agg(pl.col("seeds").max()).iter_rows())


def _stored_scores(reader: Store) -> pl.LazyFrame | None:
    """Every committed tuning score `reader` sees (newest copy of each run), the race's own and any other."""
    return reader.scan("scores", all_runs=True) if reader.finished_runs() else None
