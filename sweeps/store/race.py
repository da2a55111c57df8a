"""A raced sweep's runs as the store counts them: which (config, seed) pairs the race asks for.

A raced sweep (sweeps.spec.race) does not run every configuration on every seed: a configuration
out of the race holds the seeds of its last decision (race.json, records.RaceRecord), one still in
it the seeds of the round under way (all the race's seeds once the race is finished). Readers
count those pairs and the race's runs stored beyond them (a method's last configurations may be given
every seed at once: sweeps.tune.racing) (the tables, `missing_runs`, `status`), and `verify` calls only
the pairs asked for "missing": an eliminated configuration's unrun seeds are not missing runs. Plain Python (no polars): `verify`
and `status` read it too.

A damaged race.json is handled as other damaged records: readers answer from the rest (the
stored runs of the sweep; the tables replay the decisions from their scores,
`sweeps.analysis.race.stored_race`, which rebuilds the record exactly) and say so in one line
(`race_damage`); `run --resume` sets it aside as history/damaged-race.json (`set_aside_damaged`)
and the driver writes it anew by replaying the race on the stored scores.
"""

from __future__ import annotations

from typing import Callable

from sweeps.spec import Race, Sweep, SweepError
from sweeps.store.location import StoreLocation
from sweeps.store.records import RACE_FILE, RaceRecord, RecordError, read_record

DAMAGED_RACE = f"history/damaged-{RACE_FILE}"


def read_race(location: StoreLocation, sweep: Sweep | None) -> RaceRecord | None:
    """race.json, if the recorded sweep is raced and the record is of its race (the same seeds, schedule
    and level: a record of an earlier race setting is not this race's; the driver writes it anew).
    RecordError naming the file if it is damaged."""
    if sweep is None or sweep.race is None:
        return None
    record = read_record(location, RACE_FILE, RaceRecord)
    return record if record is not None and matches(record, sweep) else None


def matches(record: RaceRecord, sweep: Sweep) -> bool:
    race = sweep.race
    return (race is not None and record.alpha == race.alpha and record.schedule == race.schedule(sweep.seeds)
            and record.seeds == race.seeds(sweep.seeds))


def method_rounds(sweep: Sweep, record: RaceRecord | None) -> dict[str, int]:
    """experiment label -> the rounds of that method decided (methods race independently). Read from the
    decisions, so a record written before race.json listed its methods reads the same."""
    rounds = {e.label: 0 for e in sweep.experiments}
    if record is not None:
        method = {c.config_id: e.label for e in sweep.experiments for c in e.cells}
        for d in record.decisions:
            if d.config_id in method:
                rounds[method[d.config_id]] = max(rounds[method[d.config_id]], d.round)
    return rounds


def raced_pairs(sweep: Sweep, record: RaceRecord | None) -> frozenset[tuple[str, int]]:
    """The (config_id, seed) pairs the race asks for so far (see the module doc); `record` None: before
    the first decision, every configuration on the first round's seeds. Each method asks for the seeds of
    its own next round."""
    race = sweep.race
    seeds, schedule = race.seeds(sweep.seeds), race.schedule(sweep.seeds)
    held: dict[str, int] = {}
    out: dict[str, int] = {}
    if record is not None:
        held, out = record.held(), record.eliminated()
    rounds = method_rounds(sweep, record)
    pairs = set()
    for e in sweep.experiments:
        upcoming = len(seeds) if record is not None and record.finished else schedule[min(rounds[e.label] + 1, len(schedule)) - 1]
        for c in e.cells:
            held_now = held[c.config_id] if c.config_id in out else max(upcoming, held.get(c.config_id, 0))
            pairs.update((c.config_id, s) for s in seeds[:held_now])
    return frozenset(pairs)


def wanted_pairs(sweep: Sweep | None, record: Callable[[], RaceRecord | None],
                 finished: Callable[[], set[tuple[str, int]]]) -> frozenset[tuple[str, int]] | None:
    """The tuning pairs readers count: None when no sweep is recorded, the sweep's pairs, or for a race
    those it asks for so far (`record`: race.json as read) and every stored run (`finished`) of its
    configurations on its seeds: a method's last configurations may be given every seed at once
    (sweeps.tune.racing), and a later round may still have put one out; its runs are real results.
    With race.json damaged: the first round's and every stored run of the sweep, all the race can have
    asked for."""
    if sweep is None:
        return None
    if sweep.race is None:
        return sweep.pairs
    try:
        asked = raced_pairs(sweep, record())
    except RecordError:
        return raced_pairs(sweep, None) | (frozenset(finished()) & sweep.pairs)
    seeds = set(sweep.race.seeds(sweep.seeds))
    return asked | frozenset((c, s) for c, s in finished() if s in seeds and (c, s) in sweep.pairs)


def missing_count(location: StoreLocation, sweep: Sweep, finished: set[tuple[str, int]]) -> int:
    """How many runs the recorded sweep still lacks (`status` with no status.json): of a race, only the
    runs it asks for so far, never an eliminated configuration's unrun seeds."""
    return len(wanted_pairs(sweep, lambda: read_race(location, sweep), lambda: finished) - finished)


def race_damage(location: StoreLocation, sweep: Sweep | None) -> RecordError | None:
    """The error of a damaged race.json of a raced sweep (None: readable, absent or not a race)."""
    try:
        read_race(location, sweep)
    except RecordError as err:
        return err
    return None


def set_aside_damaged(location: StoreLocation) -> str | None:
    """Under the writer lock: a damaged race.json moves to history/damaged-race.json (the driver then
    writes it anew from the stored scores). Returns where it went, or None if it was readable."""
    try:
        read_record(location, RACE_FILE, RaceRecord)
    except RecordError:
        location.write_bytes(DAMAGED_RACE, location.read_bytes(RACE_FILE), durable=True)
        location.delete(RACE_FILE)
        return location.url(DAMAGED_RACE)
    return None


def was_raced(location: StoreLocation) -> bool:
    """Whether the store was written by a race: race.json is written before the first round runs."""
    return location.exists(RACE_FILE)


def recorded_race(location: StoreLocation, recorded: Callable[[], Sweep | None]) -> Race | None:
    """How a raced store gave out its seeds, for a `--resume` that forgot `--race`: the recorded sweep's
    (`recorded`: Store.sweep) `race:` block, else race.json's settings (sweep.yaml damaged), else the
    defaults (both damaged); None for a store that was not raced."""
    if not was_raced(location):
        return None
    try:
        sweep = recorded()
        if sweep is not None and sweep.race is not None:
            return sweep.race
    except SweepError:  # damaged sweep.yaml: race.json says how
        pass
    try:
        record = read_record(location, RACE_FILE, RaceRecord)
    except RecordError:
        record = None
    if record is None:
        return Race()
    step = record.schedule[1] - record.schedule[0] if len(record.schedule) > 1 else 1
    return Race(record.schedule[0], len(record.seeds), record.alpha, step)


def race_round(sweep: Sweep, record: RaceRecord | None) -> tuple[int, int, bool]:
    """(the furthest round under way of a method still racing, or the last one decided once finished; the
    most rounds the race can take; whether it is finished): what `status` says of a race."""
    finished = bool(record and record.finished)
    rounds = method_rounds(sweep, record)
    racing = [n for label, n in rounds.items() if label not in finished_methods(record)]
    now = max(rounds.values(), default=0) if finished or not racing else max(racing) + 1
    return now, max(now, len(sweep.race.schedule(sweep.seeds))), finished  # a revived configuration replays the last


def finished_methods(record: RaceRecord | None) -> set[str]:
    """The labels of the methods whose race is over (none from a record written before methods raced apart,
    unless the whole race is)."""
    if record is None:
        return set()
    return {m.method for m in record.methods if m.finished}
