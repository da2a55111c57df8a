"""A network's shape as plain data: the task registry names its student network without loading torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch import nn


@dataclass(frozen=True)
class Architecture:
    """Layer widths (input first, output last) and the hidden activation's negative slope
    (0: ReLU, 0.01: LeakyReLU(0.01))."""

    sizes: tuple[int, ...]
    negative_slope: float = 0.0

    @property
    def layers(self) -> int:
        return len(self.sizes) - 1

    def module(self) -> nn.Sequential:
        """The single-run PyTorch network this architecture describes."""
        from torch import nn

        parts: list[nn.Module] = []
        for i, (fan_in, fan_out) in enumerate(zip(self.sizes[:-1], self.sizes[1:])):
            parts.append(nn.Linear(fan_in, fan_out))
            if i < self.layers - 1:
                parts.append(nn.LeakyReLU(self.negative_slope) if self.negative_slope else nn.ReLU())
        return nn.Sequential(*parts)

    def linear_names(self) -> list[str]:
        """State-dict prefixes of the Linear layers in `module()` ("0", "2", ...)."""
        return [str(2 * i) for i in range(self.layers)]

    def offsets(self) -> list[int]:
        """Start of each parameter [W0, b0, W1, b1, ...] in a run's flat parameter vector, then its length."""
        starts = [0]
        for fan_in, fan_out in zip(self.sizes[:-1], self.sizes[1:]):
            starts += [starts[-1] + fan_in * fan_out, starts[-1] + fan_in * fan_out + fan_out]
        return starts

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """[W0, b0, W1, b1, ...] as views of `flat` ([R, n]), which may start at any parameter
        boundary (e.g. only the head's parameters)."""
        starts = self.offsets()
        first = starts.index(starts[-1] - flat.shape[1])
        shapes = [s for fan_in, fan_out in zip(self.sizes[:-1], self.sizes[1:]) for s in ((fan_out, fan_in), (fan_out,))]
        return [flat[:, a - starts[first] : b - starts[first]].view(flat.shape[0], *shape)
                for a, b, shape in zip(starts[first:-1], starts[first + 1 :], shapes[first:])]
