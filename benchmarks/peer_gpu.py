"""The nonlinear task on one GPU: the persistent or the cuda engine against the JAX peer (jit(vmap) + lax.scan), same
process, same data, same GPU; run by `peer_jax.py --device cuda` (or `--device cpu --dry-run`: Triton's
interpreter and JAX on the CPU at toy sizes, so this code is tested without a GPU).

Per (learner, pack size): both sides get the nonlinear stream of 5 seeds (configs x seeds runs, each
config's hyperparameters from bench_neural's published grid), the same initial weights. Guard first:
GUARD steps of per-step losses from both, `max rel diff` as in peer_jax.py. Then repeats alternate
engine, peer; the best of each is kept. The engine advances in segments of `--segment` steps (the
runner's chunk: its state loaded and stored once per segment); JAX's scan covers the whole stream.
XLA_PYTHON_CLIENT_PREALLOCATE=false keeps JAX from taking the GPU's memory from torch.

Bound per run-step (printed with the rates): flops as bench_neural's model counts them (forward and
backward products, the update's arithmetic; exp and divisions as a few flops), over the fp32 peak
(`--peak-tflops`, default 60: an H100's FMA units); bytes the engine must move: the step's input
and target (I + O floats), the Adam moments it streams (read and written each step, `stream` of
the kernel's config), and its state once per segment; over the HBM peak (bench_neural.PEAK_GBS).
`bound` is the larger of the two times; `of bound` the share of that rate reached.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_neural import FADE_FLOPS, PEAK_GBS, UPDATE_FLOPS, experiment  # noqa: E402
from jax_peer import NEURAL_PEERS, peer_program  # noqa: E402

from fade_core.neural import NEURAL_LEARNERS, StepSums, make_runs, persistent  # noqa: E402
from tasks import get_task  # noqa: E402

SEEDS = 5


def nonlinear_data(learner: str, runs: int, steps: int, device: str) -> dict:
    """The stream, grid and initial weights both sides read (run r = config r // 5, seed r % 5)."""
    exp = experiment("nonlinear", learner, max(steps, 8), "")
    task = get_task(exp.task)
    seeds = min(SEEDS, runs)
    configs = max(1, runs // seeds)
    streams = [task.make_stream(exp.settings, s) for s in range(seeds)]
    chunks = [stream.chunk(0, steps) for stream in streams]
    x = torch.stack([st.inputs(c.x, "cpu", torch.float32) for st, c in zip(streams, chunks)], dim=1)
    y = torch.stack([c.y for c in chunks], dim=1).to(torch.float32)
    grid = (exp.configs() * configs)[:configs]
    hp = {n: np.array([c[n] for c in grid], dtype=np.float32) for n in grid[0]}
    slot = torch.arange(configs * seeds) % seeds
    per_run = {n: list(np.repeat(v, seeds)) for n, v in hp.items()}
    return {"arch": task.architecture, "x": x, "y": y, "hp": hp, "per_run": per_run, "slot": slot,
            "runs": configs * seeds, "seeds": seeds, "device": device}


def segment_call(engine: str, config: persistent.KernelConfig) -> Callable:
    """The engine's advance over one segment, as persistent.advance takes it (its result: the launch
    handle of the persistent engine, None for cuda)."""
    if engine == "cuda":
        from fade_core.neural import cuda_engine

        return cuda_engine.advance
    return lambda *args: persistent.advance(*args, config)


def engine_side(learner: str, data: dict, config: persistent.KernelConfig, engine: str = "persistent"
                ) -> tuple[Callable, Callable]:
    """(timed call over n steps from a fresh state, guard: per-step losses of the first n steps)."""
    arch, device = data["arch"], data["device"]
    x, y, slot = data["x"].to(device), data["y"].to(device), data["slot"].to(device)
    advance = segment_call(engine, config)

    def fresh():
        nets = make_runs(learner, arch, data["slot"].tolist(), data["per_run"], "squared_error", device)
        return nets, StepSums.zeros(data["runs"], arch, "squared_error", device)

    def segments(nets, sums, n: int, length: int) -> object:
        for t in range(0, n, length):
            handle = advance(nets.learner, arch, nets.state_dict(), nets.hp, x[t : min(n, t + length)],
                             y[t : min(n, t + length)], slot, sums.tensors())
        return handle

    def timed(n: int, segment: int) -> tuple[float, object]:
        """(seconds, the last launch's handle: registers and spills once compiled)."""
        nets, sums = fresh()
        sync()
        start = time.perf_counter()
        handle = segments(nets, sums, n, segment)
        sync()
        return time.perf_counter() - start, handle

    def guard(n: int) -> np.ndarray:
        nets, sums = fresh()
        totals = []
        for t in range(n):  # one step per segment: the per-step loss is the step's increment of the sum
            advance(nets.learner, arch, nets.state_dict(), nets.hp, x[t : t + 1], y[t : t + 1], slot, sums.tensors())
            totals.append(sums.loss.clone())
        return np.diff(torch.stack(totals, dim=1).cpu().numpy(), axis=1, prepend=0.0)

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    return timed, guard


def peer_side(learner: str, data: dict) -> tuple[Callable, Callable]:
    """(timed call over n steps, per-step losses of n steps) of the jitted JAX pack."""
    arch = data["arch"]
    nets = make_runs(learner, arch, list(range(data["seeds"])), {k: v[: data["seeds"]] for k, v in data["per_run"].items()},
                     "squared_error", "cpu")
    n = arch.offsets()[-1]
    meta = {"workload": "nonlinear", "learner": learner, "sizes": list(arch.sizes), "slope": arch.negative_slope,
            "classification": False, "parameters": n}
    program, init = peer_program(meta, nets.net.flat.numpy())
    p = {k: jnp.asarray(v) for k, v in data["hp"].items()}
    x, y = jnp.asarray(data["x"].numpy()), jnp.asarray(data["y"].numpy())

    def timed(steps: int) -> float:
        xs, ys = x[:steps], y[:steps]
        jax.block_until_ready(xs)
        start = time.perf_counter()
        jax.block_until_ready(program(p, init, xs, ys))
        return time.perf_counter() - start

    def losses(steps: int) -> np.ndarray:  # (C, S, T) -> run order r = c * S + s
        return np.asarray(program(p, init, x[:steps], y[:steps])).reshape(-1, steps)

    return timed, losses


def bound(learner: str, arch, config: persistent.KernelConfig, segment: int, peak_flops: float, peak_bytes: float):
    """(flops, bytes per run-step, bound in run-steps/s, which limit)."""
    per_layer = [i * o + o for i, o in zip(arch.sizes[:-1], arch.sizes[1:])]
    total, head = sum(per_layer), per_layer[-1]
    spec = NEURAL_LEARNERS[learner]
    covered = {"none": 0, "head": head, "all": total}[spec.fade]
    flops = 2 * total + 2 * head + UPDATE_FLOPS[spec.base] * total + FADE_FLOPS * covered
    adam = spec.base == "adam"
    streamed = {0: 0, 1: per_layer[0], 2: total - arch.sizes[1] - arch.sizes[-1]}[config.stream] if adam else 0
    state = total * (1 + 2 * adam) + 2 * covered
    moved = 4 * (arch.sizes[0] + arch.sizes[-1] + 4 * streamed + 2 * state / segment)
    by_flops, by_bytes = peak_flops / flops, peak_bytes / moved
    return flops, moved, min(by_flops, by_bytes), "flops" if by_flops < by_bytes else "memory"


def describe(engine: str, learner: str, config: persistent.KernelConfig, handle: object, arch) -> str:
    """The config column: the persistent kernel's knobs and Triton's registers and spills, or the cuda
    kernel's registers and local memory (the driver's attributes of the loaded kernel)."""
    if engine == "cuda":
        from fade_core.neural import cuda_engine

        regs, local = cuda_engine.kernel_resources(NEURAL_LEARNERS[learner], arch, torch.device("cuda"))
        return f"cuda: {regs} regs, {local} B local"
    return (f"warps {config.num_warps} stream {config.stream}{'' if config.exact else ' approx'}"
            f"{f' maxnreg {config.maxnreg}' if config.maxnreg else ''}, {getattr(handle, 'n_regs', '-')} regs,"
            f" spills {getattr(handle, 'n_spills', '-')}")


def max_rel_diff(project: np.ndarray, peer: np.ndarray) -> float:
    diff = np.abs(project - peer) / np.nanmean(np.abs(project), axis=1, keepdims=True)
    return float(np.max(np.where(np.isnan(project) & np.isnan(peer), 0.0, diff)))


def compare(learners: list[str], sizes: list[int], steps: int, segment: int, guard_steps: int, repeats: int,
            device: str, peak_tflops: float, configs: dict[str, persistent.KernelConfig], with_peer: bool = True,
            engine: str = "persistent", results: Path | None = None) -> list[str]:
    """Prints one line per (learner, runs) as it goes; returns them. Without the peer (or for a learner the
    peer lacks) its columns are nan. `results`: each row also appended to this file as it ends, one JSON
    object a line (engine, learner, runs, engine_rate, jax_rate, max_rel_diff), for gpu_figures.py."""
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU (Triton interpreter, JAX on CPU)"
    peak_bytes = next((v for k, v in PEAK_GBS.items() if k in name), 3350) * 1e9
    print(f"{name}; engine {engine}; jax {jax.__version__} on {jax.default_backend()}, torch {torch.__version__}; {steps} steps timed,"
          f" engine segments of {segment}; peak {peak_tflops:g} TFLOP/s fp32, {peak_bytes / 1e9:,.0f} GB/s")
    header = (f"{'learner':<10} {'runs':>5} {'engine/s':>9} {'JAX/s':>9} {'ratio':>6} {'flop/rs':>8} {'B/rs':>7}"
              f" {'bound/s':>9} {'by':>6} {'of bound':>8} {'JAX of':>7} {'max rel diff':>12}  config")
    print(header, flush=True)
    lines = [header]
    for learner in learners:
        config = configs.get(learner) or persistent.default_config(NEURAL_LEARNERS[learner])
        for runs in sizes:
            data = nonlinear_data(learner, runs, steps, device)
            timed, engine_guard = engine_side(learner, data, config, engine)
            diff = theirs = np.nan
            peer_too = with_peer and learner in NEURAL_PEERS
            if peer_too:
                peer, peer_losses = peer_side(learner, data)
                diff = max_rel_diff(engine_guard(guard_steps), peer_losses(guard_steps))
                peer(steps)  # compile, warm
            timed(min(steps, segment), segment)  # compile, warm
            mine, handle = min((timed(steps, segment) for _ in range(repeats)), key=lambda timing: timing[0])
            if peer_too:
                theirs = min(peer(steps) for _ in range(repeats))
            rate, peer_rate = data["runs"] * steps / mine, data["runs"] * steps / theirs
            flops, moved, limit, by = bound(learner, data["arch"], config, segment, peak_tflops * 1e12, peak_bytes)
            line = (f"{learner:<10} {data['runs']:>5} {rate:>9.3g} {peer_rate:>9.3g} {rate / peer_rate:>5.2f}x"
                    f" {flops:>8.3g} {moved:>7.3g} {limit:>9.3g} {by:>6} {rate / limit:>8.1%} {peer_rate / limit:>7.1%}"
                    f" {diff:>12.1e}  {describe(engine, learner, config, handle, data['arch'])}")
            print(line, flush=True)
            lines.append(line)
            if results is not None:
                with open(results, "a") as out:
                    out.write(json.dumps({"engine": engine, "learner": learner, "runs": data["runs"], "engine_rate": rate,
                                          "jax_rate": None if np.isnan(peer_rate) else peer_rate,
                                          "max_rel_diff": None if np.isnan(diff) else diff}) + "\n")
    return lines
