"""How a pack runs: the PackRunner loop and one runner per task family. No Ray here, so a
notebook can run a pack directly:

    from sweeps.spec import resolve_sweep, plan_packs
    from sweeps.packs import make_runner
    pack = plan_packs(resolve_sweep("linear-demo"), cpus=1)[0]
    runner = make_runner(pack)
    for progress in runner.run():
        pass
    outcome = runner.outcome()      # per-run scores and per-(run, bin) curves
"""

from __future__ import annotations

import torch

from sweeps.packs.linear import LinearPackRunner
from sweeps.packs.neural import NeuralPackRunner
from sweeps.packs.outcome import ChunkProgress, PackOutcome
from sweeps.packs.runner import DEFAULT_CHUNK_STEPS, Checkpoint, PackRunner
from sweeps.spec import Pack
from tasks import get_task

RUNNERS: dict[str, type[PackRunner]] = {"linear": LinearPackRunner, "neural": NeuralPackRunner}  # by task family


def make_runner(pack: Pack, chunk_steps: int = DEFAULT_CHUNK_STEPS, dtype: torch.dtype = torch.float32,
                device: str | torch.device = "cpu") -> PackRunner:
    """The runner of a pack's task family (neural tasks may run on a CUDA device)."""
    return RUNNERS[get_task(pack.experiment.task).family](pack, chunk_steps, dtype, device)


__all__ = [
    "DEFAULT_CHUNK_STEPS",
    "Checkpoint",
    "ChunkProgress",
    "LinearPackRunner",
    "NeuralPackRunner",
    "PackOutcome",
    "PackRunner",
    "RUNNERS",
    "make_runner",
]
