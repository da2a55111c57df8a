"""The EMNIST segment kernel as CUDA C++ source: a whole segment of steps of a two-hidden-layer
classification network (the EMNIST student, 784-300-150-47), one block per run, the small layers on chip.

Why this layout (issue 40): a run's W0 (784 x 300, 941 KB) cannot stay on chip, W1 (300 x 150, 180 KB)
and W2 (150 x 47, 28 KB) can. So W1 and W2 live in shared memory for the whole segment (dynamic
shared memory: 208 KB of the 227 KB an sm_90 block may have), the head's FADE gamma and trace (56 KB)
in registers (thread (g, j) of the head pass owns W2[k, j] for k = g, g + G2, ...: R2 values each),
and W0 with its optimizer state is streamed from HBM once per step: the pass that updates W0 with
step t's gradient also forms step t + 1's first-layer pre-activation from the new weights, so W0 is
read once and written once a step. Adam's moments of W1 and W2 and every bias's values and state
stream too (they do not fit beside W1); every global access is `LD`/`ST`, so an emulation counts the
bytes a run-step moves (tests/emnist_emulation.py) from this very source.

A step, NT threads (NW warps), one barrier between phases:
  1 h1 = leaky(z0) (z0 from the last step's W0 pass); the next sample into the other half of sx; the label
  2 z1 = W1 h1 + b1, a warp per row (lanes over the row, a shuffle sum)
  3 logits = W2 h2 + b2, a warp per row
  4 warp 0: softmax, loss, argmax, delta = p - onehot, p(1 - p) (FADE's head curvature); b2's update
  5 thread (g, j): back2[j] partial over rows k = g + r G2 of W2[k, j] delta[k], and W2[k, j]'s update
  6 thread j: dz1[j] (the G2 partials summed in order), b1's update
  7 thread (g, i): back1[i] partial over rows j = g + r G1 of W1[j, i] dz1[j], and W1[j, i]'s update
  8 thread i: dz0[i]
  9 a warp per row i of W0: each element updated (dz0[i] x[t]) and stored, its new value times x[t + 1]
    summed into z0 of the next step; lane 0 updates b0[i]
Where a pass streams state from HBM (Adam's moments, FADE's on every layer), a thread loads a batch of
parameters' state (9 W0 columns, 10 W1 rows, 8 W2 rows) before updating any: the compiler may not move a
load above a store that may alias, so without the batches each load would wait for the last store.
The update of every parameter is `cuda_rule.apply_rule`, printed from fade_core/neural/parts.py.

Each run's numbers come from its own block only (bitwise independent of the pack, the run's position
and the segment lengths); a run that overflows turns inf/NaN alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fade_core.architecture import Architecture
from fade_core.neural.c_source import c_literal
from fade_core.neural.emnist_cu import HELPERS, KERNEL, PRELUDE
from fade_core.neural.cuda_rule import rule_source
from fade_core.neural.rules import NeuralLearner

KERNEL_NAME = "emnist_segment"
THREADS = 512  # 16 warps: 128 registers a thread under __launch_bounds__(512, 1)
FEW_THREADS = 384  # 12 warps: 168 registers, for the learners that spill at 128 (threads_for)
SHARED_LIMIT = 227 * 1024  # an sm_90 block's most shared memory (static + dynamic)
_FADE_MODES = {"none": 0, "head": 1, "all": 2}
W1_BATCH = 10  # W1's rows a thread updates per batch (CH1: their state's loads in flight together)


@dataclass(frozen=True)
class EmnistShape:
    """What a compiled kernel is specialised to: the learner, the layer sizes (in, h1, h2, out), the hidden
    activation's slope and the threads of a block."""

    learner: NeuralLearner
    sizes: tuple[int, int, int, int]
    negative_slope: float = 0.0
    threads: int = 0  # 0: threads_for(learner)

    def __post_init__(self) -> None:
        if not self.threads:
            object.__setattr__(self, "threads", threads_for(self.learner))

    @property
    def dynamic_shared(self) -> int:
        """Bytes of dynamic shared memory a block takes: W1 and W2."""
        _, h1, h2, out = self.sizes
        return 4 * (h1 * h2 + h2 * out)

    @property
    def static_shared(self) -> int:
        """Bytes of the static shared arrays (the kernel's `__shared__` declarations, counted as declared)."""
        n_in, h1, h2, out = self.sizes
        return 4 * (2 * n_in + 3 * h1 + 3 * h2 + 3 * out + self.threads + 3) + 4 + 16

    def loop_trips(self) -> tuple[int, ...]:
        """Per step, the most iterations a thread makes of each `#pragma unroll 1` loop of the step, in the
        order the loops stand in the source (what cuda_sass-style counting multiplies their bodies by)."""
        n_in, h1, h2, out = self.sizes
        warps, g1 = self.threads // 32, self.threads // h1
        ceil = lambda a, b: -(-a // b)  # noqa: E731
        return (ceil(n_in, self.threads), ceil(h2, warps), ceil(out, warps), ceil(h2, g1 * W1_BATCH), ceil(h1, warps))


def threads_for(learner: NeuralLearner) -> int:
    """A block's threads for `learner`: 512, or 384 where 128 registers a thread spill (checked for sm_90 by
    tests/test_emnist_kernel.py): fade_adam (the head's gamma and trace, 2 x 16 registers, beside Adam's
    batches) and fade_sgd_all (FADE's state of W0 streamed beside it)."""
    heavy = learner.fade == "all" or (learner.fade == "head" and learner.base == "adam")
    return FEW_THREADS if heavy else THREADS


def unsupported(learner: NeuralLearner, arch: Architecture, loss: str, dtype: str = "float32") -> str | None:
    """Why the EMNIST kernel cannot run a pack of these (None: it can)."""
    if arch.layers != 3:
        return f"the emnist kernel runs networks with two hidden layers, not {arch.layers - 1}"
    if loss != "cross_entropy":
        return f"the emnist kernel runs the classification loss (cross_entropy), not {loss}"
    if dtype != "float32":
        return f"the emnist kernel runs float32, not {dtype}"
    n_in, h1, h2, out = arch.sizes
    threads = threads_for(learner)
    if not (h1 <= threads and h2 <= threads and 2 <= out <= 64):
        return f"the emnist kernel needs hidden widths up to {threads} and 2 to 64 classes, not {arch.sizes}"
    shape = EmnistShape(learner, arch.sizes, arch.negative_slope, threads)
    if shape.dynamic_shared + shape.static_shared > SHARED_LIMIT:
        return (f"the emnist kernel keeps the two small layers in shared memory: {arch.sizes} needs "
                f"{shape.dynamic_shared + shape.static_shared} bytes, over {SHARED_LIMIT}")
    return None


def kernel_source(shape: EmnistShape) -> str:
    """The whole translation unit NVRTC compiles for `shape` (entry point `KERNEL_NAME`)."""
    learner = shape.learner
    n_in, h1, h2, out = shape.sizes
    defines = {
        "NI": n_in, "NH1": h1, "NH2": h2, "NO": out, "NT": shape.threads,
        "ADAM": int(learner.base == "adam"), "FADE": _FADE_MODES[learner.fade],
        "SLOPE": c_literal(shape.negative_slope, np.float32), "CH1": W1_BATCH,
    }
    header = "\n".join(f"#define {name} {value}" for name, value in defines.items())
    return (f"// fade-sweep EMNIST kernel: {learner.name}, network {n_in}-{h1}-{h2}-{out} "
            f"(fade_core/neural/emnist_source.py)\n{header}\n{PRELUDE}\n{rule_source(learner)}\n{HELPERS}\n{KERNEL}")
