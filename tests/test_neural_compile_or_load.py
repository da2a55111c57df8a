"""A neural run's numbers do not depend on whether its process compiled the CPU kernel or
loaded it from numba's cache.

They could: numba links a copy of each callee into the caller's build, optimised again there,
and that copy is what its cache keeps, while the process that compiled the caller calls the
callee's own build. Under fast-math 'reassoc' (or 'arcp', 'afn') LLVM may round the two
builds differently (Adam's numbers once differed in the last bits between a first sweep and
its rerun). The kernel is compiled without those flags (fade_core/neural/cpu_elements.py:
FASTMATH), its reductions written as explicit partial sums, so the two builds compute the
same operations in the same order: checked here with two fresh processes on an empty cache,
the first compiling, the second loading, every learner, regression and classification."""

from __future__ import annotations

import numpy as np

from tests.helpers import compiled_then_loaded

PROBE = """
import sys
import numpy as np
import torch
from fade_core.mlp import Architecture
from fade_core.neural import NEURAL_LEARNERS, StepSums, make_runs
from tasks.nonlinear_tracking import STUDENT, NonlinearTrackingSettings, NonlinearTrackingStream

HP = {"alpha": 1e-3, "lambda": 1e-3, "kappa": 2.0, "theta_lambda": 10.0, "gamma0": -6.9}
x, y = NonlinearTrackingStream(NonlinearTrackingSettings(steps=400, score_window=100, bin=100), 0).chunk(0, 400)
gen = torch.Generator().manual_seed(0)
classifier = Architecture((12, 10, 8, 5), negative_slope=0.01)
xc, yc = torch.randn(300, 1, 12, generator=gen), torch.randint(0, 5, (300, 1), generator=gen)
out = {}
for optimizer, spec in NEURAL_LEARNERS.items():
    hp = {k: [HP[k]] for k in spec.hyperparameters}
    for arch, loss, xs, ys in ((STUDENT, "squared_error", x[:, None], y[:, None]), (classifier, "cross_entropy", xc, yc)):
        runs = make_runs(optimizer, arch, [0], hp, loss, dtype=torch.float32, engine="cpu")
        sums = StepSums.zeros(1, arch, loss, "cpu")
        runs.advance(xs, ys, torch.zeros(1, dtype=torch.int64), sums)
        for name, tensor in (*runs.state_dict().items(), *zip(("loss", "sq_error", "correct", "active"), sums.tensors())):
            out[f"{optimizer}/{loss}/{name}"] = tensor.numpy().copy()
np.savez(sys.argv[1], **out)
"""


def test_a_process_that_compiled_the_kernel_and_one_that_loaded_it_agree_to_the_bit(tmp_path):
    compiled, loaded = compiled_then_loaded(PROBE, tmp_path)
    assert any((tmp_path / "numba_cache").rglob("*.nbc"))  # the second process had a cached build to load
    assert len(compiled.files) == 9 * 2 * 10
    for key in compiled.files:
        if key.endswith("/params") or key.endswith("/loss"):
            assert np.isfinite(compiled[key]).all(), key
        assert compiled[key].tobytes() == loaded[key].tobytes(), key  # bytes: -0.0 and 0.0 differ too
