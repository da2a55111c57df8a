"""A pack of a neural task (nonlinear tracking, label-permuted EMNIST) on CPU or CUDA.

All R = configs x seeds runs advance together through `NeuralRuns.advance`, by the
engine the pack was built with (fade_core.engines: the compiled kernel "cpu", the torch
ops "torch", "triton"'s fused updates on CUDA, ...). Metrics are accumulated per step
into float64 per-bin sums on the device, in step order, so binned values do not depend
on chunking; a bin's summary (group MSE, accuracy, decay rates, dead units, weight
norms) is taken when the bin ends.

On CUDA, blocks of GRAPH_STEPS steps are captured once as a CUDA graph and replayed,
so the step loop is not bound by kernel-launch overhead.
"""

from __future__ import annotations

import copy
import functools
import warnings

import numpy as np
import torch

from fade_core.engines import CPU, get_engine
from fade_core.neural import NeuralRuns, StepSums, get_neural_learner, make_runs
from sweeps.packs.outcome import PackOutcome
from sweeps.packs.runner import DEFAULT_CHUNK_STEPS, PackRunner
from sweeps.packs.rowwise import row_means, trailing_sums
from sweeps.plan import Pack
from sweeps.spec.own import load_rule
from tasks.stream import stacked

GRAPH_STEPS = 50  # steps per captured CUDA graph


def use_tf32(enabled: bool) -> None:
    """Whether float32 matrix products on CUDA may use TF32 (10-bit mantissa inputs, ~1e-3
    relative error). Set explicitly for every pack, whatever the process had: float32 means
    float32 unless the user asks (`fade-sweep run --tf32`)."""
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


class NeuralPackRunner(PackRunner):
    """Runs a pack of a neural task on the CPU or one CUDA device."""

    def __init__(self, pack: Pack, chunk_steps: int = DEFAULT_CHUNK_STEPS, dtype: torch.dtype = torch.float32,
                 device: str | torch.device = "cpu", engine: str = CPU):
        super().__init__(pack, chunk_steps, dtype, engine)
        self.device = torch.device(device)
        self.run_slot = self.run_slot.to(self.device)
        own = pack.experiment.learner  # a researcher's base step: imported where the run took it, its source checked
        learner = load_rule(own) if own is not None else get_neural_learner(pack.experiment.optimizer)
        seeds = [pack.seeds[r % len(pack.seeds)] for r in range(pack.runs)]
        self.runs: NeuralRuns = make_runs(learner, self.task.architecture, seeds,
                                          self.hyperparameter_columns(learner.hyperparameters), self.task.loss,
                                          self.device, dtype, engine)
        self.regression = self.task.loss == "squared_error"
        self.sums = StepSums.zeros(pack.runs, self.task.architecture, self.task.loss, self.device)
        self.curves = self._empty_curves()
        self._graph: tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor] | None = None  # graph, its inputs
        # (an engine that runs a whole segment in one launch, persistent and cuda: nothing for a graph to save)
        self._use_graphs = self.device.type == "cuda" and not get_engine(engine, "neural").segments

    # -- metrics -------------------------------------------------------------------------
    def curve_names(self) -> list[str]:
        layers = self.task.architecture.layers
        names = ["mse", *[f"mse_{g}" for g in self.task.output_groups]] if self.regression else ["accuracy", "loss"]
        names += [f"decay_{g}" for g in (self.task.output_groups if self.regression else ("head",))]
        names += [f"dead_units_layer{i}" for i in range(1, layers)]
        names += ["weight_norm", *[f"weight_norm_layer{i}" for i in range(1, layers + 1)]]
        return names

    def _empty_curves(self) -> dict[str, np.ndarray]:
        shape = (self.pack.runs, len(self.bin_end))
        curves = {name: np.full(shape, np.nan) for name in self.curve_names()}
        if self.regression:
            curves["output_mse"] = np.full((*shape, self.task.architecture.sizes[-1]), np.nan)
        return curves

    @functools.cached_property
    def _group_masks(self) -> dict[str, np.ndarray]:
        """[R, out] 0/1 masks of each output group (groups are drawn per seed)."""
        out = self.task.architecture.sizes[-1]
        slots = self.run_slot.cpu().numpy()
        masks = {}
        for group in self.task.output_groups:
            per_seed = np.zeros((len(self.streams), out))
            for s, stream in enumerate(self.streams):
                per_seed[s, stream.groups[group]] = 1.0
            masks[group] = per_seed[slots]
        return masks

    def close_bin(self, bin_index: int) -> None:
        """Summaries at a bin's end, per run (row-wise reductions, see `_sums`)."""
        c, b, steps_in_bin = self.curves, bin_index, int(self.bin_len[bin_index])
        if self.regression:
            out_mse = self.sums.sq_error.cpu().numpy() / steps_in_bin
            c["output_mse"][:, b] = out_mse
            c["mse"][:, b] = row_means(out_mse)
            for group, mask in self._group_masks.items():
                c[f"mse_{group}"][:, b] = trailing_sums(out_mse * mask) / trailing_sums(mask)
        else:
            c["accuracy"][:, b] = self.sums.correct.cpu().numpy() / steps_in_bin
            c["loss"][:, b] = self.sums.loss.cpu().numpy() / steps_in_bin
        decay = self.runs.head_decay()
        if decay is not None:
            weight, bias = decay  # [R, C, H], [R, C]
            row = weight.shape[2] + 1  # each output's row: H weights and its bias
            if self.regression:
                row_mean = (self._sums(weight, (2,)) + bias.double().cpu().numpy()) / row  # [R, C]
                for group, mask in self._group_masks.items():
                    c[f"decay_{group}"][:, b] = trailing_sums(row_mean * mask) / trailing_sums(mask)
            else:
                c["decay_head"][:, b] = (self._sums(weight, (1, 2)) + self._sums(bias, (1,))) / (row * bias.shape[1])
        fired = self.sums.active.cpu().numpy()
        first = 0
        for i, width in enumerate(self.task.architecture.sizes[1:-1], start=1):
            c[f"dead_units_layer{i}"][:, b] = 1.0 - row_means(fired[:, first : first + width])
            first += width
        flat, starts = self.runs.net.flat, self.task.architecture.offsets()
        squares = [self._sums(flat[:, starts[2 * i] : starts[2 * i + 2]], (1,), square=True)
                   for i in range(self.task.architecture.layers)]
        for i, sq in enumerate(squares, start=1):
            c[f"weight_norm_layer{i}"][:, b] = np.sqrt(sq)
        c["weight_norm"][:, b] = np.sqrt(np.sum(squares, axis=0))
        self.sums.reset()

    def _sums(self, tensor: torch.Tensor, dims: tuple[int, ...], square: bool = False) -> np.ndarray:
        """float64 sums over `dims` (the trailing axes) of every run's slice (of its squares). On the
        CPU one 1-D sum per row (rowwise.py), so a run's value never depends on how many runs share
        its pack; on a GPU on the device, so only the [R, ...] summaries cross to the host (a whole
        EMNIST pack's weights are gigabytes)."""
        values = tensor.double()
        values = values * values if square else values
        if values.device.type == "cpu":
            return trailing_sums(values.numpy(), len(dims))  # `dims` are always the trailing axes
        return values.sum(dim=dims).cpu().numpy()

    # -- stepping ------------------------------------------------------------------------
    def load(self, start: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Every seed's chunk as the streams give it ([n, S, ...]: inputs, or image indices for
        EMNIST); targets on the device. Inputs are made per piece in `advance`."""
        x, y = (torch.from_numpy(a) for a in stacked(self.streams, start, n))
        y = y.to(self.device)
        return x, (y.to(self.dtype) if self.regression else y)

    def advance(self, batch: tuple[torch.Tensor, torch.Tensor], lo: int, hi: int, bin_index: int) -> None:
        raw, y = batch
        x = torch.stack([s.inputs(raw[lo:hi, i], self.device, self.dtype) for i, s in enumerate(self.streams)], dim=1)
        y = y[lo:hi]
        t, n = 0, hi - lo
        if self._use_graphs:
            try:
                while n - t >= GRAPH_STEPS:
                    self._graph_steps(x[t : t + GRAPH_STEPS], y[t : t + GRAPH_STEPS])
                    t += GRAPH_STEPS
            except RuntimeError as err:  # e.g. an op the installed CUDA cannot capture
                warnings.warn(f"CUDA graph capture failed ({err}); stepping eagerly", stacklevel=2)
                self._use_graphs = False
        self._steps(x[t:], y[t:])

    def _steps(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.runs.advance(x, y, self.run_slot, self.sums)

    def _graph_steps(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """GRAPH_STEPS steps by replaying a captured CUDA graph (captured on first use)."""
        if self._graph is None:
            self._capture(x, y)
        graph, x_static, y_static = self._graph
        x_static.copy_(x)
        y_static.copy_(y)
        graph.replay()

    def _capture(self, x: torch.Tensor, y: torch.Tensor) -> None:
        # Warm-up and capture run real steps: save everything they touch and put it back,
        # also when capturing fails (the caller then steps eagerly from the same state).
        saved = copy.deepcopy((self.runs.state_dict(), self.sums.tensors()))
        try:
            x_static, y_static = x.clone(), y.clone()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self._steps(x_static, y_static)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self._steps(x_static, y_static)
            self._graph = (graph, x_static, y_static)
        finally:
            self.runs.load_state_dict(saved[0])
            for mine, old in zip(self.sums.tensors(), saved[1]):
                mine.copy_(old)

    def loss_curve(self) -> np.ndarray:
        return self.curves["mse" if self.regression else "loss"]

    # -- results and checkpoints ---------------------------------------------------------
    def outcome(self) -> PackOutcome:
        """Scores and curves; call after `run` is exhausted."""
        bin_len = self.bin_len
        if self.regression:
            first = (self.settings.steps - self.settings.score_window) // self.settings.bin
            mse = self.curves["mse"][:, first:]
            score = trailing_sums(mse * bin_len[first:]) / bin_len[first:].sum()
        else:
            score = trailing_sums(self.curves["accuracy"] * bin_len) / self.settings.steps
        curves: dict[str, np.ndarray | None] = dict(self.curves)
        if self.runs.head_decay() is None:
            curves.update({k: None for k in curves if k.startswith("decay_")})
        return PackOutcome(score=score, diverged=self.diverged(), bin_end=self.bin_end, curves=curves,
                           wall_seconds=self.wall_seconds, engine=self.engine)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        return {
            **{f"runs.{k}": v for k, v in self.runs.state_dict().items()},
            **{f"sums.{i}": v for i, v in enumerate(self.sums.tensors())},
            **{f"curve.{k}": torch.from_numpy(v) for k, v in self.curves.items()},
        }
