"""Statistics, tables, comparisons, importance and the report, computed from the store's frames. No Ray, no torch."""
