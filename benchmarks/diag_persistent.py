"""Which of a persistent-engine run's values change when it is stepped in other segments, by segmenting,
the stream's pointer alignment and fp_fusion (benchmarks/PERSISTENT.md: Adam's family on an H200).

    python benchmarks/diag_persistent.py fused adam,adamw      # or: unfused (KernelConfig(fp_fusion=False))

Run 2 of tests/test_persistent.py's four-run pack, stepped through 16 steps in one segment inside the pack,
against the same run alone in each segmenting below; prints the keys that differ and by how much.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

os.environ.setdefault("TRITON_INTERPRET", "0" if torch.cuda.is_available() else "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fade_core.neural import StepSums, persistent  # noqa: E402
from tests.test_persistent import DEVICE, ODD, _advance, _everything, _runs, _stream  # noqa: E402

# (segment lengths, whether each segment reads a fresh copy of its slice: 16-byte aligned)
SEGMENTINGS = [([16], False), ([1, 5, 10], False), ([6, 10], False), ([1, 5, 10], True), ([2, 4, 10], False)]


def _alone(learner: str, x: torch.Tensor, y: torch.Tensor, segments: list[int], fresh: bool,
           config: persistent.KernelConfig) -> dict[str, torch.Tensor]:
    nets = _runs(learner, ODD, [2])
    if not fresh:
        return _everything(nets, _advance(nets, x, y, [2], segments=segments, config=config))
    sums = StepSums.zeros(1, ODD, "squared_error", DEVICE)
    slot, t = torch.tensor([0], device=DEVICE), 0
    for n in segments:
        persistent.advance(nets.learner, ODD, nets.state_dict(), nets.hp, x[t:t + n].clone(), y[t:t + n].clone(), slot,
                           sums.tensors(), config)
        t += n
    return _everything(nets, sums)


def main(fusion: str, learners: list[str]) -> None:
    config = persistent.KernelConfig(fp_fusion=fusion == "fused")
    x, y = _stream(ODD, 16)
    for learner in learners:
        pack = _runs(learner, ODD, [0, 1, 2, 3])
        whole = _everything(pack, _advance(pack, x, y, [0, 1, 2, 3], config=config))
        for segments, fresh in SEGMENTINGS:
            got = _alone(learner, x, y, segments, fresh, config)
            wanted = {k: whole[k] if v.dim() == 0 else whole[k][2:3] for k, v in got.items()}
            differ = [f"{k}:{(v.double() - wanted[k].double()).abs().max().item():.2e}"
                      for k, v in got.items() if not torch.equal(v, wanted[k])]
            print(f"{fusion:8s} {learner:10s} segments={segments} fresh={fresh}: {' '.join(differ) or 'equal'}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2].split(","))
