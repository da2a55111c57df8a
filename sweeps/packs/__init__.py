"""How a pack runs: the PackRunner loop and one runner per task family. No Ray here, so a
notebook can run a pack directly:

    from sweeps.plan import plan_packs
    from sweeps.spec import resolve_sweep
    from sweeps.packs import make_runner
    pack = plan_packs(resolve_sweep("linear-demo"), cpus=1)[0]
    runner = make_runner(pack)
    for progress in runner.run():
        pass
    outcome = runner.outcome()      # per-run scores and per-(run, bin) curves

Names load their module on first access: the driver of a sweep reads the checkpoint files'
names (`checkpoint_files`) without loading torch and numba, which only the workers need.
"""

from fade_core._lazy import lazy_exports

_EXPORTS = {
    **dict.fromkeys(["DEFAULT_CHUNK_STEPS", "Checkpoint", "PackRunner"], "sweeps.packs.runner"),
    **dict.fromkeys(["ChunkProgress", "PackOutcome"], "sweeps.packs.outcome"),
    "LinearPackRunner": "sweeps.packs.linear",
    "NeuralPackRunner": "sweeps.packs.neural",
    **dict.fromkeys(["RUNNERS", "make_runner"], "sweeps.packs.runners"),
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
