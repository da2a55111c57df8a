"""The results store: the only code that touches a results folder's files (Parquet data,
manifests, the recorded sweep, the writer lock, status.json, verify). No Ray, no torch.

    from sweeps.store import Store
    store = Store.open("results/linear-demo")
    scores = store.scan("scores")     # a polars LazyFrame of the committed runs of the recorded sweep

The names below load on first use: importing one module of the store (say `location`, for
an error message) does not load polars and the rest.
"""

from fade_core._lazy import lazy_exports

_EXPORTS = {
    "Store": "sweeps.store.store",
    "RecordError": "sweeps.store.records",
    "StorageError": "sweeps.store.location",
    "StoreLocation": "sweeps.store.location",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
