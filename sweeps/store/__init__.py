"""The results store: the only code that touches a results folder's files (Parquet data,
manifests, the recorded sweep, the writer lock, status.json, verify). No Ray, no torch.

    from sweeps.store import Store
    store = Store.open("results/linear-demo")
    scores = store.scan("scores")     # a polars LazyFrame of the committed runs of the recorded sweep

The names below load on first use: importing one module of the store (say `location`, for
an error message) does not load polars and the rest.
"""

import importlib

_NAMES = {
    "Store": "sweeps.store.store",
    "StoreError": "sweeps.store.manifests",
    "RecordError": "sweeps.store.records",
    "StorageError": "sweeps.store.location",
    "StoreLocation": "sweeps.store.location",
}
__all__ = list(_NAMES)


def __getattr__(name: str):
    if name in _NAMES:
        return getattr(importlib.import_module(_NAMES[name]), name)
    raise AttributeError(f"module 'sweeps.store' has no attribute {name!r}")
