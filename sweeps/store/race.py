"""A raced sweep's runs as the store counts them: which (config, seed) pairs the race asks for.

A raced sweep (sweeps.spec.race) does not run every configuration on every seed: a configuration
out of the race holds the seeds of its last decision (race.json, records.RaceRecord), one still in
it the seeds of the round under way (all the race's seeds once the race is finished). Readers
count those pairs (the tables, `missing_runs`) and `verify` calls only those "missing": an
eliminated configuration's unrun seeds are not missing runs. Plain Python (no polars): `verify`
and `status` read it too.
"""

from __future__ import annotations

from sweeps.spec import Sweep
from sweeps.store.location import StoreLocation
from sweeps.store.records import RACE_FILE, RaceRecord, read_record


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


def raced_pairs(sweep: Sweep, record: RaceRecord | None) -> frozenset[tuple[str, int]]:
    """The (config_id, seed) pairs the race asks for so far (see the module doc); `record` None: before
    the first decision, every configuration on the first round's seeds."""
    race = sweep.race
    seeds, schedule = race.seeds(sweep.seeds), race.schedule(sweep.seeds)
    held: dict[str, int] = {}
    out: dict[str, int] = {}
    upcoming = schedule[0]
    if record is not None:
        held, out = record.held(), record.eliminated()
        rounds = max((d.round for d in record.decisions), default=0)
        upcoming = len(seeds) if record.finished else schedule[min(rounds + 1, len(schedule)) - 1]
    return frozenset(
        (c.config_id, s)
        for e in sweep.experiments for c in e.cells
        for s in seeds[: held[c.config_id] if c.config_id in out else max(upcoming, held.get(c.config_id, 0))]
    )
