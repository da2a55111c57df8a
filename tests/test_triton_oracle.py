"""Every Triton engine ("triton", "triton_step", "persistent") against the plain one-run loop of
tests/test_neural_learners.py (`torch.optim` base steps, FADE written out per parameter, float64):
an oracle not derived from the rule the engines print (fade_core/neural/parts.py through
triton_rule), for all nine learners and the combined ones (FADE with weight decay and clipping),
in float32 and float64, at the tolerances docs/engines.md states for an engine against that loop
(float64: rtol 1e-7, atol 1e-8; float32: rtol 2e-4, atol 2e-5).

Without a GPU the kernels run in Triton's interpreter (TRITON_INTERPRET=1, numpy on the CPU), at a
small network and STEPS steps (each step a whole rule applied to every element: what differs is
the number of steps, not the code); with one, compiled.
"""

from __future__ import annotations

import importlib
import os

import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
os.environ.setdefault("TRITON_INTERPRET", "0" if DEVICE == "cuda" else "1")  # before triton.jit defines the kernels
pytest.importorskip("triton", reason="Triton does not import here (torch ships it on Linux x86-64)")

from fade_core.mlp import Architecture  # noqa: E402
from fade_core.neural import persistent, triton_fused_step, triton_rule, triton_update  # noqa: E402
from tests.test_neural_learners import LEARNERS, SEEDS, check_against_reference  # noqa: E402

if triton_rule.INTERPRET != (os.environ["TRITON_INTERPRET"] == "1"):  # imported earlier in the other mode
    for module in (triton_rule, triton_update, triton_fused_step, persistent):
        importlib.reload(module)

# In Triton's interpreter every launch costs ~20 ms of Python per program: 12 steps there (each part of every
# rule runs from the first step; FADE's trace and Adam's moments carry over the other 11), 300 compiled.
STEPS = 300 if DEVICE == "cuda" else 12
# "triton" and "triton_step" on a two-hidden-layer classifier (the head's p(1-p) in FADE's
# curvature); "persistent" runs one hidden layer under the regression loss only.
NETWORKS = {"triton": (Architecture((5, 7, 6, 4), negative_slope=0.01), "cross_entropy"),
            "triton_step": (Architecture((5, 7, 6, 4), negative_slope=0.01), "cross_entropy"),
            "persistent": (Architecture((7, 40, 5), negative_slope=0.01), "squared_error")}
TOLERANCES = {torch.float64: {"rtol": 1e-7, "atol": 1e-8}, torch.float32: {"rtol": 2e-4, "atol": 2e-5}}


def _stream(arch: Architecture, loss: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """STEPS inputs and targets of one seed's stream (labels for classification)."""
    gen = torch.Generator().manual_seed(100 + seed)
    x = torch.randn(STEPS, arch.sizes[0], generator=gen, dtype=torch.float64)
    if loss == "cross_entropy":
        return x, torch.randint(0, arch.sizes[-1], (STEPS,), generator=gen)
    return x, torch.randn(STEPS, arch.sizes[-1], generator=gen, dtype=torch.float64)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("learner", LEARNERS)
@pytest.mark.parametrize("engine", sorted(NETWORKS))
def test_every_triton_engine_matches_the_plain_one_run_loop(engine, learner, dtype):
    """Losses of every step and every parameter and gamma of every run at the end (two
    configurations x two seeds in one pack) against one run at a time of the plain loop."""
    arch, loss = NETWORKS[engine]
    data = {seed: _stream(arch, loss, seed) for seed in SEEDS}
    check_against_reference(learner, arch, data, dtype, compiled=engine, device=DEVICE, **TOLERANCES[dtype])
