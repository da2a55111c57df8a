"""What a sweep's results mean: statistics, tables, comparisons, importance, the report; functions
of polars frames (read through `sweeps.store.Store`), never of paths. No Ray, no torch."""

# Names the command line offers, here so that building its parser loads no statistics code.
STATS = ("mean", "median", "iqm")  # the statistics `--stat` may choose (stats.py computes them)
