"""Every built-in learner's results on the CPU engines (linear cpu and reference, neural cpu and
torch; float32 and float64), saved to an .npz for a bitwise A/B of two trees: a refactoring that
changes no arithmetic must give the same bits.

    PYTHONPATH=/path/to/main python benchmarks/learner_bits.py main.npz
    PYTHONPATH=$PWD python benchmarks/learner_bits.py new.npz
    python benchmarks/learner_bits.py --compare main.npz new.npz
"""
import sys
import numpy as np
import torch

from fade_core.linear import LINEAR_LEARNERS, run_linear
from fade_core.mlp import Architecture
from fade_core.neural import NEURAL_LEARNERS, StepSums, make_runs

if sys.argv[1] == "--compare":
    a, b = np.load(sys.argv[2]), np.load(sys.argv[3])
    differ = [k for k in a if k not in b or a[k].tobytes() != b[k].tobytes()]
    print(f"{len(a)} results compared; bitwise differing: {differ or 'none'}")
    sys.exit(1 if differ or set(a) != set(b) else 0)
out = {}
g = torch.Generator().manual_seed(0)
x = torch.randn(400, 6, 5, generator=g, dtype=torch.float64)
y = torch.randn(400, 6, generator=g, dtype=torch.float64)
HP = {"alpha": 0.01, "lambda": 1e-3, "theta_alpha": 1e-3, "beta0": -4.0, "theta_lambda": 1e-2, "gamma0": -6.0, "theta": 1e-3,
      "kappa": 2.0}
for name, learner in LINEAR_LEARNERS.items():
    for engine in ("cpu", "reference"):
        for dtype in (torch.float32, torch.float64):
            hp = {n: HP[n] for n in learner.hyperparameters}
            run = run_linear(name, hp, x, y, torch.full((6, 5), 0.1), dtype=dtype, engine=engine, gamma_bounds=(-15.0, 0.0))
            out[f"linear/{name}/{engine}/{dtype}"] = np.concatenate([run.losses.numpy().ravel().astype(np.float64),
                                                                     *[t.numpy().ravel().astype(np.float64) for t in run.state]])
arch = Architecture((5, 16, 3))
xs = torch.randn(60, 4, 5, generator=g, dtype=torch.float64)
ts = torch.randn(60, 4, 3, generator=g, dtype=torch.float64)
for name, learner in NEURAL_LEARNERS.items():
    for engine in ("cpu", "torch"):
        for dtype in (torch.float32, torch.float64):
            hp = {n: [HP[n]] * 4 for n in learner.hyperparameters}
            runs = make_runs(name, arch, [0, 1, 2, 3], hp, "squared_error", dtype=dtype, engine=engine)
            sums = StepSums.zeros(4, arch, "squared_error", "cpu")
            runs.advance(xs.to(dtype), ts.to(dtype), torch.arange(4), sums)
            out[f"neural/{name}/{engine}/{dtype}"] = np.concatenate([runs.net.flat.numpy().ravel().astype(np.float64),
                                                                     sums.loss.numpy()])
np.savez(sys.argv[1], **out)
print(len(out), "results")
