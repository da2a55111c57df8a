"""The packs of a stage handed to Tune as a `Searcher`: one Tune experiment, however many rounds.

Tune asks the searcher for a trial whenever a slot can take one (`suggest`) and tells it when a
trial ends (`on_trial_complete`). A grid hands out its packs and is done; a race (racing.py) hands
out a round, and when a method's round is in, the packs of that method's next round, all within the
same experiment: Ray, Tune and the trial actors (reused, with their imports and compiled kernels)
start once per run, not once per round.

A trial's config is the pack as plain data (`pack_config`: its config ids, seeds and stage); the
trainable rebuilds the pack from the sweep's own configurations (`pack_of`), so nothing but ids
travels through Tune's experiment state. Packs are handed out longest first by the cost model, as
the planner assumes (sweeps.plan.packing.makespan). Every pack is handed out once (`handed`); the
packs record of the experiment (tune-*/packs.json, which a resume reads) names each before Tune sees it.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Callable

from ray.tune.search import ConcurrencyLimiter, Searcher

from sweeps.plan import Pack
from sweeps.spec import Config, Experiment

Next = Callable[[Pack], list[Pack]]  # a pack's trial ended (written or not) -> the packs that follow it


def pack_config(pack: Pack) -> dict:
    """A pack as a trial's config: plain ids, what the trainable rebuilds it from."""
    return {"pack_id": pack.pack_id, "configs": [c.config_id for c in pack.configs], "seeds": list(pack.seeds),
            "stage": pack.stage}


def pack_of(config: dict, index: dict[str, tuple[Experiment, Config]]) -> Pack:
    """The pack a trial's config names (`pack_config`), rebuilt from the sweep's configurations (`index`:
    config id -> (experiment, config))."""
    ids = config["configs"]
    return Pack(index[ids[0]][0], tuple(index[i][1] for i in ids), tuple(config["seeds"]), config["stage"])


class PackSearcher(Searcher):
    """Hands out `packs`, longest first, then what `after` adds as trials end; finished when nothing is
    queued, nothing runs and nothing more follows."""

    def __init__(self, packs: list[Pack], seconds: Callable[[Pack], float], handed: Callable[[Pack], None],
                 after: Next | None = None):
        """`seconds`: a pack's modelled seconds (the order); `handed`: told of each pack before Tune gets it
        (the packs record); `after`: the packs that follow a pack's trial (None: a fixed list)."""
        super().__init__(metric=None, mode=None)
        self._seconds, self._handed, self._after = seconds, handed, after
        self._order = itertools.count()
        self._queue: list[tuple[float, int, Pack]] = []
        self._running: dict[str, Pack] = {}  # trial id -> its pack
        self.handed: list[str] = []  # pack ids, in the order handed out
        self.add(packs)

    @property
    def finished(self) -> bool:
        """Whether Tune ran the searcher to its end: every pack handed out and every trial's end told. After an
        interrupt it may not be: packs still queued (a race's next round, decided as a trial ended, or a grid's
        packs beyond the limiter), or a trial whose end Tune never reported (a round may follow it)."""
        return not self._queue and not self._running

    @property
    def queued(self) -> list[Pack]:
        """The packs not handed out yet."""
        return [pack for _, _, pack in self._queue]

    def add(self, packs: list[Pack]) -> None:
        for pack in packs:
            heapq.heappush(self._queue, (-self._seconds(pack), next(self._order), pack))

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        return True  # no metric to optimise: the packs are given, not searched

    def save(self, checkpoint_path: str) -> None:
        """Nothing to save: a resume replans from the store and the packs records, never from Tune's state."""

    def restore(self, checkpoint_path: str) -> None:
        """Never called: Tuner.restore is not used (see `save`)."""

    def suggest(self, trial_id: str) -> dict | str | None:
        if self._queue:
            pack = heapq.heappop(self._queue)[2]
            if pack.pack_id in self.handed:
                raise RuntimeError(f"pack {pack.pack_id} handed out twice")  # a planner's bug, never a rerun
            self._handed(pack)
            self.handed.append(pack.pack_id)
            self._running[trial_id] = pack
            return pack_config(pack)
        return None if self._running else Searcher.FINISHED  # None: a running pack may bring more

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        pack = self._running.pop(trial_id, None)
        if pack is not None and self._after is not None:
            self.add(self._after(pack))


def search(searcher: PackSearcher, slots: int) -> ConcurrencyLimiter:
    """The searcher as Tune takes it: at most two trials per slot at once, one running and one staged to take
    the actor its predecessor leaves (a plain searcher gets one pending trial at a time, so slots would start
    one by one and wait between packs); packs beyond wait in the searcher, where a longer pack of a round
    decided later still goes first."""
    return ConcurrencyLimiter(searcher, max_concurrent=2 * max(1, slots))
