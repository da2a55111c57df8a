"""The results store: the only code that touches a results folder's files (Parquet data,
manifests, the recorded sweep, the writer lock, status.json, verify). No Ray, no torch."""
