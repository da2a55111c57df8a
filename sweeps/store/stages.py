"""The confirmation stage's record: which configurations were confirmed, on which fresh seeds.

    confirmation.json  {"format": 1, "stat": "mean", "seeds": [10, 11, ...], "tuning_seeds": [0, ..., 9],
                        "selected": [{"task", "optimizer", "config_id", "settings", "hyperparameters"}, ...]}

A store holds two stages of runs (sweeps.spec.STAGES): the sweep's grid on its seeds
(tuning) and each method's selected configuration re-run on fresh seeds (confirmation).
Every manifest names its stage, every data file carries a `stage` column, and readers ask
for one stage: the tuning tables never see a confirmation row. The confirmation runs a
reader counts are the record's selected configurations x its seeds; the record only
selects: the driver rebuilds each configuration from the recorded sweep by its id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sweeps.store.location import StoreLocation, as_location

CONFIRMATION_RECORD = "confirmation.json"
CONFIRMATION_FORMAT = 1


@dataclass(frozen=True)
class ConfirmationRecord:
    """What the confirmation stage runs: `selected` (one dict per (setting, method): task, optimizer,
    config_id, settings, hyperparameters) on `seeds`, chosen by `stat` on `tuning_seeds`."""

    stat: str
    seeds: tuple[int, ...]
    tuning_seeds: tuple[int, ...]
    selected: tuple[dict, ...]

    def pairs(self) -> frozenset[tuple[str, int]]:
        """The (config_id, seed) runs of the stage."""
        return frozenset((row["config_id"], s) for row in self.selected for s in self.seeds)


def write_confirmation(results_dir: str | Path | StoreLocation, record: ConfirmationRecord) -> None:
    """Record the stage (the caller holds the writer lock), before any of its runs is written."""
    document = {"format": CONFIRMATION_FORMAT, "stat": record.stat, "seeds": list(record.seeds),
                "tuning_seeds": list(record.tuning_seeds), "selected": list(record.selected)}
    as_location(results_dir).write_bytes(CONFIRMATION_RECORD, json.dumps(document, indent=1, default=float).encode(),
                                         durable=True)


def read_confirmation(results_dir: str | Path | StoreLocation) -> ConfirmationRecord | None:
    """The recorded confirmation stage; None when the store has none. ValueError if it is damaged."""
    try:
        document = json.loads(as_location(results_dir).read_bytes(CONFIRMATION_RECORD))
    except FileNotFoundError:
        return None
    try:
        if document["format"] != CONFIRMATION_FORMAT:
            raise ValueError(f"format {document['format']!r}, expected {CONFIRMATION_FORMAT}")
        selected = tuple(dict(row) for row in document["selected"])
        if any(not isinstance(row.get("config_id"), str) for row in selected):
            raise ValueError("a selected configuration without a config_id")
        return ConfirmationRecord(str(document["stat"]), tuple(int(s) for s in document["seeds"]),
                                  tuple(int(s) for s in document["tuning_seeds"]), selected)
    except (KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"{CONFIRMATION_RECORD}: damaged record (missing or mistyped {err})") from None
