"""What a sweep's results mean: statistics, tables, comparisons, importance, the report; functions
of polars frames (read through `sweeps.store.Store`), never of paths. No Ray, no torch."""

TABLES = ("best", "sensitivity", "compare", "importance")  # what `table_text` (`fade-sweep table --kind`) renders
