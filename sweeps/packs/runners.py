"""The runner of each task family, and `make_runner`, which picks a pack's runner and engine."""

from __future__ import annotations

import torch

from fade_core.engines import check_engine
from sweeps.packs.linear import LinearPackRunner
from sweeps.packs.neural import NeuralPackRunner
from sweeps.packs.runner import DEFAULT_CHUNK_STEPS, PackRunner
from sweeps.spec import Pack
from sweeps.spec.engines import experiment_engine
from tasks import get_task

RUNNERS: dict[str, type[PackRunner]] = {"linear": LinearPackRunner, "neural": NeuralPackRunner}  # by task family


def pack_engine(pack: Pack, device: str | torch.device, engine: str | None = None) -> str:
    """The engine a pack runs on `device`: `engine` (the command line's), else its experiment's
    (the sweep file's `engine:`), else the default of fade_core.engines; EngineError (one line)
    if that engine does not run the pack's task there."""
    kind = torch.device(device).type
    chosen = experiment_engine(pack.experiment, kind, engine)
    check_engine(chosen, pack.experiment.task, kind)
    return chosen


def make_runner(pack: Pack, chunk_steps: int = DEFAULT_CHUNK_STEPS, dtype: torch.dtype = torch.float32,
                device: str | torch.device = "cpu", engine: str | None = None) -> PackRunner:
    """The runner of a pack's task family (neural tasks may run on a CUDA device), advanced by
    `pack_engine(pack, device, engine)`."""
    runner = RUNNERS[get_task(pack.experiment.task).family]
    return runner(pack, chunk_steps, dtype, device, pack_engine(pack, device, engine))
