"""The results store: the only code that touches a results folder's files (Parquet data,
manifests, the recorded sweep, the writer lock, status.json, verify). No Ray, no torch.

    from sweeps.store import Store
    store = Store.open("results/linear-demo")
    scores = store.scan("scores")     # a polars LazyFrame of the committed runs of the recorded sweep
"""

from sweeps.store.dataset import StoreError
from sweeps.store.location import StorageError, StoreLocation
from sweeps.store.records import RecordError
from sweeps.store.store import Store

__all__ = ["RecordError", "StorageError", "Store", "StoreError", "StoreLocation"]
