"""`confirm`: each method's selected configuration on fresh seeds (confirm.py), from the tuning and the
confirmation scores and each store's confirmation.json (which seeds, selected by which statistic)."""

from __future__ import annotations

from sweeps.analysis.confirm import confirmation_table, confirmation_text, unconfirmable
from sweeps.analysis.kinds import TableError, TableSource
from sweeps.plan import CONFIRMATION, TUNING
from sweeps.store import RecordError


def text(source: TableSource, fmt: str) -> str:
    tuning = source.scores(TUNING)
    records = []
    for one in source.stores:
        try:
            record = one.confirmation
        except RecordError as err:
            raise TableError(f"{err}; `fade-sweep confirm {one.location} --seeds N` records the stage again") from None
        if record is None or not one.selection(stage=CONFIRMATION).runs:
            raise TableError(f"{one.location}: no confirmation runs; run `fade-sweep confirm {one.location} --seeds N` first")
        records.append(record)
    table = confirmation_table(tuning, source.scores(CONFIRMATION), source.stat)
    many = len(source.stores) > 1
    seeds = "; ".join(f"{one.location.name + ': ' if many else ''}seeds {_seed_span(r.seeds)}, selected by the {r.stat}"
                      for one, r in zip(source.stores, records))
    return confirmation_text(table, fmt, source.stat, f"; {seeds}", unconfirmable(tuning, records[0].stat))


def _seed_span(seeds: tuple[int, ...]) -> str:
    contiguous = list(seeds) == list(range(seeds[0], seeds[0] + len(seeds))) if seeds else False
    return f"{seeds[0]}-{seeds[-1]}" if contiguous and len(seeds) > 2 else ", ".join(map(str, seeds))
