"""Two packs reading the same seeds at once, as a race's round or a grid's first packs do: the streams drawn
through the node's board (each segment once between the two workers) against each worker drawing alone, and
(with --base) another checkout drawing alone.

    python benchmarks/bench_stream_share.py [--seeds 7] [--steps 2000000] [--base /tmp/race-base]

Each variant starts its own embedded Ray (2 CPUs) and runs two Ray tasks, each reading every seed's linear
stream chunk by chunk (10,000 steps, `tasks.stream.stacked`, as a pack does); it prints each task's wall and CPU
seconds. On a shared machine run it more than once: the load moves.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def read(board: str | None, seeds: int, steps: int, chunk: int = 10_000) -> tuple[float, float]:
    """One worker's reads (a Ray task's body): wall and CPU seconds."""
    from tasks import make_stream
    from tasks.stream import stacked

    if board:
        from sweeps.tune.stream_share import attach

        attach(board)
    streams = [make_stream("linear_tracking", {"noise": 1.0, "steps": steps, "bin": steps // 10}, s) for s in range(seeds)]
    wall, cpu = time.perf_counter(), time.process_time()
    for start in range(0, steps, chunk):
        stacked(streams, start, min(chunk, steps - start))
    return time.perf_counter() - wall, time.process_time() - cpu


def variant(tree: Path, shared: bool, seeds: int, steps: int) -> None:
    """In a fresh interpreter with `tree` first on the path: two tasks at once, through a board or alone."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(tree)}})
    board, boards = None, []
    if shared:
        from sweeps.tune.stream_share import node_boards

        board, boards = node_boards()
    task = ray.remote(num_cpus=1)(read)
    start = time.perf_counter()
    results = ray.get([task.remote(board, seeds, steps) for _ in range(2)])
    print(f"{'board' if shared else 'alone':>6} {str(tree):<24} " + "  ".join(f"task wall {w:5.2f} s, CPU {c:5.2f} s"
          for w, c in results) + f"  (both {time.perf_counter() - start:.2f} s; load {os.getloadavg()[0]:.1f})", flush=True)
    ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=2_000_000)
    parser.add_argument("--base", type=Path, help="another checkout, drawing alone (its tasks/stream.py)")
    parser.add_argument("--variant", nargs=2, metavar=("TREE", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        variant(Path(args.variant[0]), args.variant[1] == "board", args.seeds, args.steps)
        return
    runs = [(ROOT, "board"), (ROOT, "alone")] + ([(args.base.resolve(), "alone")] if args.base else [])
    for tree, mode in runs:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        env.pop("RAY_ADDRESS", None)
        subprocess.run([sys.executable, str(Path(__file__).resolve()), "--variant", str(tree), mode, "--seeds",
                        str(args.seeds), "--steps", str(args.steps)], env=env, check=True, cwd=tree)


if __name__ == "__main__":
    main()
