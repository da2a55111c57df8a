"""Everything that touches Ray Tune: a run as named stages (`stages.py`: `run_sweep`, `confirm_sweep`), the
driver (the stages that need Ray), the trainable (one trial runs one pack), progress and status.json, and what
a sweep asks of the cluster it runs on (`slots.py`: packs at once; `reachable.py`: the store from every node)."""
