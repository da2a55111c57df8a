"""The table kinds, one registry: `fade-sweep table --kind NAME`, the tables `run` and `confirm` close
with, and the report's tables all come from here.

A kind is one module of this package, named as the kind, with one function,

    def text(source: TableSource, fmt: str) -> str

that takes what it needs from the stores through `source` (an `Analysis`, the tuning scores, a
stage's scores, the stores' own records) and renders through the shared `tables.Grid` (`tables.render`;
CSV: the table's frame). A table the stores cannot give is a `TableError`, one line naming the fix.
A new kind is a module here and its name in `KINDS`; nothing else changes (the parser offers `KINDS`).
Importing this package loads no polars: the parser reads `KINDS`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import polars as pl

    from sweeps.analysis.queries import Analysis
    from sweeps.store import Store

KINDS = ("best", "sensitivity", "compare", "importance", "confirm", "robustness")  # `table --kind`, in this order
FORMATS = ("md", "latex", "csv", "html")


class TableError(ValueError):
    """A table the stores cannot give (no confirmation runs, a statistic the kind does not offer): one line."""


@dataclass
class TableSource:
    """What a table is made from: the stores (several: sweeps of the same task settings compared), the
    statistic, and `reference` (compare's). Each part a kind asks for is read on first use, once."""

    stores: list[Store]
    stat: str = "mean"
    reference: str | None = None
    given: Analysis | None = None  # an Analysis the caller already has (then `stores` may be empty)

    @cached_property
    def analysis(self) -> Analysis:
        """The tuning runs' cells, of one store or of the sweeps compared (`across.combined_analysis`)."""
        if self.given is not None:
            return self.given
        from sweeps.analysis.across import combined_analysis
        from sweeps.analysis.queries import Analysis

        return Analysis.of(self.stores[0], self.stat) if len(self.stores) == 1 else combined_analysis(self.stores, self.stat)

    def scores(self, stage: str) -> pl.LazyFrame | None:
        """Every store's scores of `stage`, labelled by sweep where several are compared (None: none)."""
        from sweeps.analysis.across import combined_scan

        return combined_scan(self.stores, "scores", stage)


class TableKind(Protocol):
    """A kind's module (see the package docstring)."""

    def text(self, source: TableSource, fmt: str) -> str: ...


def kind(name: str) -> TableKind:
    """The module of the kind `name` (ValueError naming the kinds, for a name not in `KINDS`)."""
    if name not in KINDS:
        raise ValueError(f"unknown table kind {name!r}; choose one of {', '.join(KINDS)}")
    return importlib.import_module(f"{__name__}.{name}")


def kind_text(source: TableSource, name: str = "best", fmt: str = "md") -> str:
    """The table `name` of `source`, rendered as Markdown, LaTeX (booktabs), HTML or CSV."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown table format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return kind(name).text(source, fmt)


def table_text(analysis: Analysis, name: str = "best", fmt: str = "md", reference: str | None = None) -> str:
    """A table of an `Analysis` in hand (the kinds made from the tuning cells: best, sensitivity, compare,
    importance); its statistic is shown and selects the best configurations."""
    return kind_text(TableSource([], analysis.stat, reference, given=analysis), name, fmt)
