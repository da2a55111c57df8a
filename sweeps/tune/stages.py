"""A run as one sequence of named stages, each written once; no Ray here.

    resolve   the sweep and its store                           the CLI (`running._resolve`), or the caller
    check     what the sweep asks for can run here              `check`: task data, GPUs, engines
    lock      the store is free and allows the run              `Store.writing(sweep, dtype, resume)`:
                                                                reachable, no other writer, the writer
                                                                lock, what is stored (`Store.check_run`)
    plan      where it runs and which packs                     driver.py: connect, resume, plan
    execute   the packs on Ray Tune                             driver.py, wiring.py (racing.py: a race's rounds)
    record    what the store keeps of the run                   `record`: the sweep or confirmation recorded,
                                                                damaged packs set aside; `finish`: again at the end
    report    what the command prints                           the CLI

`run` and `confirm` (the command line, before Ray loads: a refusal takes well under a second), and
`run_sweep` and `confirm_sweep` (driver.py, for a library caller too) go through the same stages; a
race's rounds run inside `execute`, on the store the earlier stages checked and locked. Each stage
asks the store once, for what that stage needs.
"""

from __future__ import annotations

from collections.abc import Callable

from sweeps.spec import PackResources, Sweep, SweepError, check_task_data, gpus_unusable
from sweeps.spec.engines import check_engines
from sweeps.store.store import Store

Notify = Callable[[str], None]


def check(sweep: Sweep, resources: PackResources, engine: str | None) -> None:
    """Every refusal about the sweep itself (SweepError, one line, exit 2), before the plan is printed and
    before Ray: a task's data missing, GPUs asked for where every task runs on CPUs only, an engine that
    cannot run its task on its device."""
    check_task_data(sweep)
    if problem := gpus_unusable(sweep.experiments, resources.gpus):
        raise SweepError(f"--gpus-per-pack: {problem}; drop it")
    check_engines(sweep.experiments, resources.gpus, engine)


def record(store: Store, notify: Notify, notices: list[str]) -> None:
    """After the sweep (or the confirmation stage) is recorded, under the lock: its `notices` said, damaged
    packs set aside (they run again) and orphans of interrupted writes removed."""
    for line in notices:
        notify(line)
    damaged, removed = store.tidy()
    if damaged:
        files = f"{len(damaged)} damaged file{'s' if len(damaged) > 1 else ''}"
        notify(f"Set aside {files} of committed packs ({', '.join(map(str, damaged[:3]))}"
               f"{', ...' if len(damaged) > 3 else ''}); their packs run again (manifests kept in history/)")
    if removed:
        notify(f"Removed {len(removed)} orphan files of interrupted writes from {store.location}")


def finish(store: Store, notify: Notify) -> Store:
    """The end of the packs: tidied again (a Ray worker of a killed earlier writer may have written data files
    after the first tidy, its commit refused: commit.write_pack; by now it is gone), and the store as readers
    now see it."""
    record(store, notify, [])
    return store.reopened()
