"""What every stream shares: counter-based generators, fixed blocks, random-access chunks.

A stream is a pure function of (settings, seed). Each random draw comes from its own
generator keyed by (seed, purpose, index), never from a generator that advances with
use, so the stream can be read from any step: samples are drawn in fixed blocks of
`BLOCK` steps and `chunk(start, n)` slices them. One chunk of 1000 steps therefore equals
chunks of 400 and 600 joined, and resuming at step t needs only t.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:
    import torch

BLOCK = 4096  # steps per block; block indices key the generators, so changing it changes every stream
CACHED_BLOCKS = 4  # blocks kept per stream: consecutive chunks usually share one


class Chunk(NamedTuple):
    """Steps [start, start + n) of one seed's stream, on the CPU.

    linear_tracking: x float64 (n, 20) inputs, y float64 (n,) noisy targets.
    nonlinear_tracking: x float32 (n, 32) inputs, y float32 (n, 20) teacher outputs.
    EMNIST tasks: x int64 (n,) image indices (`inputs` turns them into pixels),
    y int64 (n,) permuted labels.
    """

    x: torch.Tensor
    y: torch.Tensor


def counter_rng(seed: int, purpose: int, index: int = 0) -> np.random.Generator:
    """The generator of draw `index` for `purpose` of `seed`: independent of every other one."""
    return np.random.default_rng(np.random.SeedSequence([seed, purpose, index]))


class CounterStream(ABC):
    """Random-access stream of one seed; subclasses say how block `b` is drawn."""

    def __init__(self, settings: Any, seed: int):
        self.settings = settings  # a task's settings dataclass; `steps` is the stream length
        self.seed = seed
        self._blocks: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()

    @abstractmethod
    def _block(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        """x and y of steps [b * BLOCK, (b + 1) * BLOCK), in the dtypes `Chunk` documents.

        The last block may run past the stream's end; those steps are never returned.
        """

    def chunk(self, start: int, n: int) -> Chunk:
        """Steps [start, start + n), the same whatever chunks were read before."""
        if start < 0 or start + n > self.settings.steps:
            raise ValueError(f"steps [{start}, {start + n}) outside the stream's {self.settings.steps} steps")
        first, last = start // BLOCK, max(start, start + n - 1) // BLOCK
        blocks = [self._cached_block(b) for b in range(first, last + 1)]
        offset = start - first * BLOCK
        # concatenate copies, so a caller never holds (or edits) a cached block
        x = np.concatenate([blk[0] for blk in blocks])[offset : offset + n]
        y = np.concatenate([blk[1] for blk in blocks])[offset : offset + n]
        import torch  # here, not at import time: the task registry is read by commands that never run a stream

        return Chunk(torch.from_numpy(x), torch.from_numpy(y))

    def inputs(self, x: torch.Tensor, device: torch.device | str, dtype: torch.dtype) -> torch.Tensor:
        """The network's inputs for a chunk's `x` (here `x` itself, moved and cast)."""
        return x.to(device, dtype)

    def _cached_block(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        if b in self._blocks:
            self._blocks.move_to_end(b)
        else:
            if len(self._blocks) >= CACHED_BLOCKS:
                self._blocks.popitem(last=False)  # least recently used
            self._blocks[b] = self._block(b)
        return self._blocks[b]
