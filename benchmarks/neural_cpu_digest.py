"""A digest of what the neural CPU engine computes, per learner and dtype: to tell whether two
checkouts give bit-identical results (e.g. a change against main, in one command).

    python benchmarks/neural_cpu_digest.py                       # this checkout
    python benchmarks/neural_cpu_digest.py --tree /tmp/main-copy # another checkout's fade_core
    diff <(python benchmarks/neural_cpu_digest.py --tree A) <(python benchmarks/neural_cpu_digest.py --tree B)

Each line: learner, dtype, network, and the SHA-256 of the final state (weights, Adam moments,
FADE's gamma and trace) and of every step's loss, after STEPS steps of four runs (two
configurations x two seeds) on a regression and a classification stream. The learners are the
registered nine and two that combine FADE with weight decay and clipping (a
tree that refuses those says so in their line).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

STEPS = 200
NETWORKS = {"regression": ((32, 64, 20), "squared_error"), "classification": ((50, 30, 20, 10), "cross_entropy")}
HP = {"alpha": [0.01, 0.003], "lambda": [0.01, 0.1], "kappa": [1.0, 0.5], "theta_lambda": [0.5, 2.0], "gamma0": [-4.6, -2.3]}


def digests(steps: int) -> list[str]:
    import torch

    from fade_core.mlp import Architecture
    from fade_core.neural import NEURAL_LEARNERS, NeuralLearner, StepSums, make_runs

    combined = {"fade_sgd_wd_clip": ("sgd", "coupled", "head"), "fade_adamw_clip_all": ("adam", "decoupled", "all")}
    learners, lines = dict(NEURAL_LEARNERS), []
    for name, (base, decay, fade) in combined.items():
        try:
            learners[name] = NeuralLearner(name, base, weight_decay=decay, clip=True, fade=fade)
        except ValueError as err:  # a tree from before FADE combined with weight decay and clipping
            lines.append(f"{name:<20} refused: {err}")
    for network, (sizes, loss) in NETWORKS.items():
        arch = Architecture(sizes, negative_slope=0.01)
        gen = torch.Generator().manual_seed(5)
        x = torch.randn(steps, 2, sizes[0], generator=gen, dtype=torch.float64)
        y = (torch.randint(0, sizes[-1], (steps, 2), generator=gen) if loss == "cross_entropy"
             else torch.randn(steps, 2, sizes[-1], generator=gen, dtype=torch.float64))
        for name, learner in learners.items():
            for dtype in (torch.float32, torch.float64):
                hp = {k: [v for v in HP[k] for _ in range(2)] for k in learner.hyperparameters}
                given = name if name in NEURAL_LEARNERS else learner  # (a tree from before learners as objects takes names)
                runs = make_runs(given, arch, [0, 1, 0, 1], hp, loss, "cpu", dtype, engine="cpu")
                sums = StepSums.zeros(4, arch, loss, "cpu")
                digest = hashlib.sha256()
                slot = torch.tensor([0, 1, 0, 1])
                for t in range(steps):
                    sums.reset()
                    runs.advance(x[t : t + 1].to(dtype), y[t : t + 1] if loss == "cross_entropy" else y[t : t + 1].to(dtype),
                                 slot, sums)
                    digest.update(sums.loss.numpy().tobytes())
                for key, value in sorted(runs.state_dict().items()):
                    digest.update(key.encode() + value.contiguous().numpy().tobytes())
                lines.append(f"{name:<20} {str(dtype)[6:]:<8} {network:<15} {digest.hexdigest()[:32]}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default=str(Path(__file__).resolve().parents[1]), help="the checkout whose fade_core runs")
    parser.add_argument("--steps", type=int, default=STEPS)
    args = parser.parse_args()
    sys.path.insert(0, args.tree)
    import fade_core

    if Path(fade_core.__file__).resolve().parents[1] != Path(args.tree).resolve():
        sys.exit(f"neural_cpu_digest: fade_core came from {fade_core.__file__}, not --tree {args.tree}; unset PYTHONPATH")
    print("\n".join(digests(args.steps)))


if __name__ == "__main__":
    main()
