"""The stages of a run that come before Ray, each written once; no Ray here (the command line imports it first).

`resolve` (the command line's: a SWEEP argument and --storage into the sweep and its store), `check` (what the
sweep asks for can run here; `run_sweep` and `confirm_sweep` ask it too, sweeps/tune/stages.py) and `ask_lock`
(the lock stage asked before anything slow: a refusal takes well under a second, before Ray loads or a job is
submitted). The order they run in is stages.py's.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from sweeps.spec import PackResources, Sweep, SweepError, check_task_data, gpus_unusable, resolve_sweep, with_race
from sweeps.spec.engines import check_engines
from sweeps.store.race import recorded_race
from sweeps.store.store import Store

__all__ = ["ask_lock", "check", "resolve"]


def resolve(target: str, storage: str | os.PathLike, race: bool, resume: bool,
            notify: Callable[[str], None]) -> tuple[Sweep, Store]:
    """The resolve stage: the sweep `target` names (raced by `race`) and its store under `storage`, opened once.
    A resume of a store written by a race keeps racing as recorded (`notify` says so) unless the sweep file
    says `race:` itself (`race: false` un-races on purpose)."""
    sweep = resolve_sweep(target)
    if race:
        sweep = with_race(sweep)
    store = Store.of_sweep(sweep, storage)  # a storage the store cannot serve (`--storage ""`): one line
    if resume and sweep.race is None and "race" not in sweep.document:
        recorded = recorded_race(store.location, lambda: store.sweep)
        if recorded is not None:
            notify(f"{store.location} was raced: --resume keeps racing as recorded (put `race: false` in the sweep "
                   "file to give every configuration every seed)")
            sweep = with_race(sweep, recorded)
    return sweep, store


def check(sweep: Sweep, resources: PackResources, engine: str | None) -> None:
    """The check stage: every refusal about the sweep itself (SweepError, one line, exit 2), before the plan is
    printed and before Ray: a task's data missing, GPUs asked for where every task runs on CPUs only, an engine
    that cannot run its task on its device."""
    check_task_data(sweep)
    if problem := gpus_unusable(sweep.experiments, resources.gpus):
        raise SweepError(f"--gpus-per-pack: {problem}; drop it")
    check_engines(sweep.experiments, resources.gpus, engine)


def ask_lock(store: Store, sweep: Sweep | None = None, dtype: str = "float32", resume: bool = False) -> None:
    """The lock stage asked before anything slow (the run takes it again for its whole length). Of a run of
    `sweep`: the writer lock taken and released (a storage that cannot be written, another writer, a resume that
    would change what stored runs mean: `Store.writing`). Without a sweep (`confirm`, whose checks read the
    tuning runs under the lock; `submit`): whether the store is reachable and no other process writes it."""
    if sweep is None:
        store.refuse_if_locked()
        return
    with store.writing(sweep, dtype, resume):
        pass
