"""Diagnose test_persistent's adamw segment-invariance failure on a GPU: which keys differ under which
segmenting, pointer alignment and fp_fusion."""
import os, sys
import torch
os.environ["TRITON_INTERPRET"] = "0" if torch.cuda.is_available() else "1"
DEV = "cuda" if torch.cuda.is_available() else "cpu"
sys.path.insert(0, ".")
import torch
from tests.test_persistent import _runs, _stream, _advance, _everything, ODD
from fade_core.neural import persistent

cfg_name = sys.argv[1]
learners = sys.argv[2].split(",")
config = persistent.KernelConfig(fp_fusion=(cfg_name == "fused"))
for learner in learners:
    x, y = _stream(ODD, 16)
    full = _runs(learner, ODD, [0, 1, 2, 3])
    whole = _everything(full, _advance(full, x, y, [0, 1, 2, 3], config=config))
    def alone(segments, clone=False):
        nets = _runs(learner, ODD, [2])
        if clone:
            sums = None
            from fade_core.neural import StepSums
            sums = StepSums.zeros(1, ODD, "squared_error", DEV)
            slot = torch.tensor([0], device=DEV)
            t = 0
            for n in segments:
                persistent.advance(nets.learner, ODD, nets.state_dict(), nets.hp, x[t:t+n].clone(), y[t:t+n].clone(), slot, sums.tensors(), config)
                t += n
        else:
            sums = _advance(nets, x, y, [2], segments=segments, config=config)
        got = _everything(nets, sums)
        bad = []
        for k, v in got.items():
            want = whole[k] if v.dim() == 0 else whole[k][2:3]
            if not torch.equal(v, want):
                d = (v.double() - want.double()).abs().max().item()
                bad.append(f"{k}:{d:.2e}")
        return " ".join(bad) or "equal"
    for segs, clone in [([16], False), ([1, 5, 10], False), ([6, 10], False), ([1, 5, 10], True), ([2, 4, 10], False)]:
        print(f"{cfg_name:8s} {learner:10s} segments={segs} clone={clone}: {alone(segs, clone)}", flush=True)
