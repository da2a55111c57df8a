"""R independent MLPs at once: weights [R, out, in], biases [R, out], no loop over runs.

Forward and backward are written out by hand (one sample per run per step), because
the learners need the layer inputs, the head's softmax and the per-layer deltas
anyway, and autograd would only add overhead to a batched matrix-vector product.

Run r's weights are an ordinary `torch.nn.Sequential` of Linear layers and activations:
`run_state_dict(r)` exports them, `load_run_state_dict(r, ...)` imports them, and
`default_init` reproduces PyTorch's default Linear initialisation for a seed exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fade_core.architecture import Architecture


def default_init(arch: Architecture, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(weight, bias) of each layer exactly as `torch.manual_seed(seed); arch.module()` makes them.

    The global RNG is forked, so the caller's random state is untouched.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = arch.module()
    state = module.state_dict()
    return [(state[f"{n}.weight"], state[f"{n}.bias"]) for n in arch.linear_names()]


def _matvec(w: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """w[r] @ h[r] for every run. On CPU a batch of one takes BLAS's gemv path, which
    rounds differently; it runs as a batch of two so that a run's numbers never depend on
    how many runs share its batch."""
    if w.shape[0] == 1:
        return torch.bmm(w.expand(2, -1, -1), h.unsqueeze(2).expand(2, -1, -1))[:1].squeeze(2)
    return torch.bmm(w, h.unsqueeze(2)).squeeze(2)


@dataclass
class ForwardCache:
    """What backward and the learners need from one forward pass."""

    inputs: list[torch.Tensor]  # input of each layer, [R, fan_in]
    preactivations: list[torch.Tensor]  # hidden layers' pre-activations, [R, width]
    output: torch.Tensor  # [R, out]: prediction (regression) or logits (classification)


class BatchedMLP:
    """R runs of one architecture. All of a run's parameters live in one row of `flat`
    ([R, n], in `Architecture.offsets` order); `weights` ([R, out, in]) and `biases`
    ([R, out]) are views of it, so a learner may update either."""

    def __init__(self, arch: Architecture, flat: torch.Tensor):
        self.arch = arch
        self.flat = flat
        views = arch.views(flat)
        self.weights = views[0::2]
        self.biases = views[1::2]

    @classmethod
    def from_seeds(cls, arch: Architecture, seeds: list[int], device: torch.device | str = "cpu",
                   dtype: torch.dtype = torch.float32) -> BatchedMLP:
        """Run r starts from PyTorch's default initialisation with seed `seeds[r]`."""
        per_seed = {s: torch.cat([t.reshape(-1) for pair in default_init(arch, s) for t in pair]) for s in set(seeds)}
        return cls(arch, torch.stack([per_seed[s] for s in seeds]).to(device, dtype))

    @property
    def runs(self) -> int:
        return self.weights[0].shape[0]

    def parameters(self) -> list[torch.Tensor]:
        """Weight and bias of each layer, in layer order: [W0, b0, W1, b1, ...]."""
        return [p for pair in zip(self.weights, self.biases) for p in pair]

    def forward(self, x: torch.Tensor, first: torch.Tensor | None = None) -> ForwardCache:
        """x: [R, in]. Hidden layers apply the activation; the head is linear. `first`: the first
        layer's W x + b where it is already computed (the fused CUDA step forms it in the pass
        that updates that layer)."""
        inputs, pre = [], []
        h = x
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            inputs.append(h)
            z = first if i == 0 and first is not None else _matvec(w, h) + b
            if i == self.arch.layers - 1:
                return ForwardCache(inputs, pre, z)
            pre.append(z)
            h = torch.nn.functional.leaky_relu(z, self.arch.negative_slope) if self.arch.negative_slope else torch.relu(z)
        raise AssertionError("unreachable")

    def backward(self, cache: ForwardCache, output_delta: torch.Tensor) -> list[torch.Tensor]:
        """dJ/dz of every layer ([R, out_l]) given dJ/d(output), through the weights as they stand."""
        deltas = [output_delta]
        for i in range(self.arch.layers - 1, 0, -1):
            back = torch.bmm(deltas[0].unsqueeze(1), self.weights[i]).squeeze(1)
            # As torch's leaky_relu backward: the slope in the run's dtype (a float64 run's 0.01,
            # not the float32 0.0099999998 a Python-scalar torch.where would make).
            deltas.insert(0, torch.where(cache.preactivations[i - 1] > 0, back, back * self.arch.negative_slope))
        return deltas

    def run_state_dict(self, run: int) -> dict[str, torch.Tensor]:
        """Run `run` as the state dict of `arch.module()` (CPU copies)."""
        state = {}
        for name, w, b in zip(self.arch.linear_names(), self.weights, self.biases):
            state[f"{name}.weight"] = w[run].detach().cpu().clone()
            state[f"{name}.bias"] = b[run].detach().cpu().clone()
        return state

    def load_run_state_dict(self, run: int, state: dict[str, torch.Tensor]) -> None:
        """Set run `run` from a state dict of `arch.module()` (e.g. one edited in plain PyTorch)."""
        for name, w, b in zip(self.arch.linear_names(), self.weights, self.biases):
            w[run].copy_(state[f"{name}.weight"])
            b[run].copy_(state[f"{name}.bias"])
