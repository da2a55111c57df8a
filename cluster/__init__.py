"""Bringing up and reaching Ray: attach to a cluster or start an embedded one (`connect.py`), a local
multi-node cluster for tests and laptops (`local.py`), the layer's one error (`errors.py`), the image and
cluster configs. It knows nothing of sweeps and imports nothing from `sweeps` (docs/architecture.md):
what a sweep asks of a cluster (submitting it as a Ray Job, pack slots, a store every node reaches)
lives in `sweeps/`."""
