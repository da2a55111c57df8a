"""EMNIST on one GPU: one large pack streamed from HBM against small packs that stay in L2, and the JAX peer.

    python benchmarks/bench_gpu_packs.py                                  # fade_sgd and adam, every layout below
    python benchmarks/bench_gpu_packs.py --learners fade_sgd --steps 100 --layouts 2000x1,40x1,20x2 --no-peer

A run's EMNIST state is 1.15 MB (3.45 MB with Adam's moments): a pack of 2,000 runs streams it from
HBM every step, while a pack of ~40 SGD runs (46 MB) fits the H100's 50 MB L2 (the H200's 60 MB), so
its steps read the weights from L2 if the pack runs many steps before the next pack's state comes in.
A layout `NxK` runs packs of N runs K at a time, each on its own CUDA stream, in waves; every pack
has its own state (a wave starts from HBM, as a real pack's does), and each pack's steps are a
captured CUDA graph of GRAPH steps of `NeuralRuns.advance` on the engine --engine names
(default triton_step, the fused step), replayed. Rates are run-steps per wall second
over WAVES waves after one warm wave; the stream is random EMNIST-shaped data on the device (the
kernels' cost does not depend on the pixels).

The peer: benchmarks/peer_jax.py's EMNIST program (jit(vmap) + lax.scan, jax_peer.py) on JAX's
default device, at the pack sizes of the one-pack layouts, best of three after compiling.
The last table is the summary: each layout's rate, its state in MB, and rate / the peer's rate
at the same number of runs in flight where the peer ran one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fade_core.neural import StepSums, get_neural_learner, make_runs  # noqa: E402
from tasks import get_task  # noqa: E402

GRAPH = 25  # steps per captured graph
WAVES = 3  # timed waves per layout
SEEDS = 5  # streams per pack (runs share them as a sweep's configurations do)
LAYOUTS = "2000x1,100x1,40x1,32x1,20x2,16x2,40x2,10x4"
HP = {"alpha": 0.01, "theta_lambda": 0.1, "gamma0": -4.6, "lambda": 0.01, "kappa": 2.0}


def _pack(learner: str, runs: int, engine: str) -> tuple[torch.cuda.CUDAGraph, int, tuple]:
    """A pack's graph of GRAPH steps (captured after a warm-up), its state in bytes, and the tensors
    the graph reads and writes (kept alive with it)."""
    task = get_task("emnist_label_permuted")
    arch = task.architecture
    hp = {k: [HP[k]] * runs for k in get_neural_learner(learner).hyperparameters}
    nets = make_runs(learner, arch, [r % SEEDS for r in range(runs)], hp, task.loss, "cuda", engine=engine)
    sums = StepSums.zeros(runs, arch, task.loss, "cuda")
    x = torch.randn(GRAPH, SEEDS, arch.sizes[0], device="cuda")
    y = torch.randint(0, arch.sizes[-1], (GRAPH, SEEDS), device="cuda")
    slot = torch.arange(runs, device="cuda") % SEEDS
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        nets.advance(x, y, slot, sums)  # warm-up: Triton's compilation, the allocator
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        nets.advance(x, y, slot, sums)
    state = sum(t.numel() * t.element_size() for t in nets.state_dict().values())
    return graph, state, (nets, sums, x, y, slot)


def layout_rate(learner: str, runs: int, streams: int, steps: int, engine: str, timed: int = WAVES) -> tuple[float, float]:
    """(run-steps/s, MB of state in flight) of packs of `runs` runs, `streams` at a time, over `timed` waves."""
    waves = [[_pack(learner, runs, engine) for _ in range(streams)] for _ in range(timed + 1)]
    lanes = [torch.cuda.Stream() for _ in range(streams)]
    replays = max(1, steps // GRAPH)

    def wave(packs) -> None:
        for lane, (graph, _, _) in zip(lanes, packs):
            lane.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(lane):
                for _ in range(replays):
                    graph.replay()
        for lane in lanes:
            torch.cuda.current_stream().wait_stream(lane)

    wave(waves[0])
    torch.cuda.synchronize()
    start = time.perf_counter()
    for packs in waves[1:]:
        wave(packs)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    in_flight = sum(state for _, state, _ in waves[0]) / 1e6
    return timed * streams * runs * replays * GRAPH / seconds, in_flight


def peer_rate(learner: str, runs: int, steps: int, data_dir: str) -> float:
    """peer_jax.py's EMNIST program at `runs` runs on JAX's default device (run-steps/s, best of 3)."""
    import jax
    import jax.numpy as jnp
    from jax_peer import peer_program
    from peer_jax import PACKS, neural_case

    seeds = PACKS["emnist"][1]
    case = neural_case("emnist", learner, steps, torch.float32, data_dir, configs=max(1, runs // seeds))
    program, init = peer_program(case.meta, case.arrays["init"])
    p = {k[3:]: jnp.asarray(v) for k, v in case.arrays.items() if k.startswith("hp_")}
    x, y = jnp.asarray(case.arrays["x"]), jnp.asarray(case.arrays["y"])
    jax.block_until_ready(program(p, init, x, y))  # compile
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        jax.block_until_ready(program(p, init, x, y))
        best = min(best, time.perf_counter() - start)
    return max(1, runs // seeds) * seeds * steps / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learners", default="fade_sgd,adam")
    parser.add_argument("--layouts", default=LAYOUTS, help=f"NxK,...: packs of N runs, K at a time (default {LAYOUTS})")
    parser.add_argument("--steps", type=int, default=200, help="steps per pack and wave (a multiple of 25)")
    parser.add_argument("--peer-steps", type=int, default=200)
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument("--waves", type=int, default=WAVES, help=f"timed waves per layout (default {WAVES}), after a warm one")
    parser.add_argument("--engine", default="triton_step", help="the neural engine (fade_core.engines) the packs run on")
    parser.add_argument("--data-dir", default=os.environ.get("FADE_EMNIST_DIR", ""))
    parser.add_argument("--results", type=Path, help="append each one-pack layout's row to this file as JSON (gpu_figures.py)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_gpu_packs: needs a CUDA GPU (none here)", file=sys.stderr)
        sys.exit(2)
    try:
        layouts = [tuple(int(v) for v in item.split("x")) for item in args.layouts.split(",")]
    except ValueError:
        print(f"bench_gpu_packs: --layouts {args.layouts!r}: write NxK,... (e.g. 2000x1,40x1)", file=sys.stderr)
        sys.exit(2)
    props = torch.cuda.get_device_properties(0)
    print(f"{props.name}, L2 {props.L2_cache_size / 2**20:.0f} MiB, {props.multi_processor_count} SMs; torch"
          f" {torch.__version__}; engine {args.engine}", flush=True)
    rows = []
    for learner in args.learners.split(","):
        peers = {}
        if not args.no_peer:
            with tempfile.TemporaryDirectory() as tmp:
                from peer_jax import emnist_dir

                data = args.data_dir or emnist_dir(Path(tmp))
                for runs in sorted({n for n, k in layouts if k == 1 and n >= 100}):
                    try:
                        peers[runs] = peer_rate(learner, runs, args.peer_steps, data)
                    except Exception as err:  # noqa: BLE001 - the peer is a comparison, not the subject
                        print(f"peer {learner} {runs}: {type(err).__name__}: {err}", flush=True)
        for runs, streams in layouts:
            rate, mb = layout_rate(learner, runs, streams, args.steps, args.engine, args.waves)
            peer = peers.get(runs * streams)
            rows.append((learner, f"{runs}x{streams}", mb, rate, peer))
            print(f"  {learner} {runs}x{streams}: {rate:,.0f} run-steps/s", flush=True)
            if args.results and streams == 1:
                with args.results.open("a") as out:
                    out.write(json.dumps({"engine": args.engine, "learner": learner, "runs": runs,
                                          "engine_rate": rate, "jax_rate": peer}) + "\n")
    print(f"\n{'learner':<9} {'layout':>8} {'MB in flight':>12} {'run-steps/s':>12} {'JAX peer':>10} {'ratio':>6}")
    for learner, layout, mb, rate, peer in rows:
        ratio = f"{rate / peer:5.2f}x" if peer else "-"
        print(f"{learner:<9} {layout:>8} {mb:>12,.0f} {rate:>12,.0f} {peer or 0:>10,.0f} {ratio:>6}")


if __name__ == "__main__":
    main()
