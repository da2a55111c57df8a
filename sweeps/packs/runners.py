"""The runner of each task family, and `make_runner`, which picks a pack's runner and engine."""

from __future__ import annotations

import torch

from sweeps.packs.linear import LinearPackRunner
from sweeps.packs.neural import NeuralPackRunner
from sweeps.packs.runner import DEFAULT_CHUNK_STEPS, PackRunner
from sweeps.plan import Pack
from sweeps.spec.engines import choose_engine
from tasks import get_task

RUNNERS: dict[str, type[PackRunner]] = {"linear": LinearPackRunner, "neural": NeuralPackRunner}  # by task family


def make_runner(pack: Pack, chunk_steps: int = DEFAULT_CHUNK_STEPS, dtype: torch.dtype = torch.float32,
                device: str | torch.device = "cpu", engine: str | None = None) -> PackRunner:
    """The runner of a pack's task family (neural tasks may run on a CUDA device), advanced by the
    engine `choose_engine` picks (EngineError, one line, if it does not run the pack's task there)."""
    runner = RUNNERS[get_task(pack.experiment.task).family]
    return runner(pack, chunk_steps, dtype, device, choose_engine(pack.experiment, torch.device(device).type, engine))
