"""The EMNIST kernel's bounds on a GPU, counted without one (`python benchmarks/roofline.py --gpu-emnist`).

Per learner, one run-step of the "cuda" engine's EMNIST kernel (fade_core/neural/emnist_source.py):
  bytes      read + written from and to global memory, counted by running the kernel's own source on
             the CPU with every global access counted (tests/emnist_emulation.bytes_per_run_step: a
             3-step segment less a 2-step one), never typed in
  HBM bound  bandwidth / bytes (run-steps/s; at --bandwidth, an H100 SXM's ~3.0 TB/s by default), and at
             2,000 runs the same times the last wave's loss (runs / (waves x SMs), one run per SM)
  warp-instr the step's warp-instructions at most, from the sm_90 SASS (fade_core/neural/emnist_count.py)
  issue bound the chip's issue rate / warp-instructions (--issue-rate: 132 SMs x 4 schedulers x 1.755 GHz)
and the issue's target beside them: a target must lie inside both bounds.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGETS = {"fade_sgd": 1.2e6, "adam": 0.42e6, "fade_adam": 0.42e6}  # issue 40, one H100, 2,000 runs
SMS = 132  # an H100 SXM's


def rows(learners: list[str], bandwidth: float, issue_rate: float, runs: int = 2000) -> list[dict]:
    """The counts and bounds of each learner (compiles and emulates: about a minute each on a busy CPU)."""
    from fade_core.neural import NEURAL_LEARNERS, cuda_compile, cuda_sass
    from fade_core.neural.emnist_count import instructions_per_run_step
    from fade_core.neural.emnist_source import EmnistShape, kernel_source
    from tasks.emnist import STUDENT
    from tests.emnist_emulation import bytes_per_run_step

    waves = math.ceil(runs / SMS)
    wave_share = runs / (waves * SMS)
    found = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in learners:
            learner = NEURAL_LEARNERS[name]
            shape = EmnistShape(learner, STUDENT.sizes, STUDENT.negative_slope)
            sass = cuda_sass.sass(cuda_compile.cubin(kernel_source(shape), 90, f"emnist_{name}.cu"))
            read, written = bytes_per_run_step(learner, STUDENT, Path(tmp))
            instructions = instructions_per_run_step(sass, shape)
            found.append({"learner": name, "threads": shape.threads, "read": read, "written": written,
                          "hbm_bound": bandwidth / (read + written), "wave_share": wave_share,
                          "instructions": instructions, "issue_bound": issue_rate / instructions,
                          "target": TARGETS.get(name)})
    return found


def report(found: list[dict], bandwidth: float, issue_rate: float) -> None:
    print(f"EMNIST kernel, one run-step (784-300-150-47, float32, sm_90); HBM {bandwidth / 1e12:.2f} TB/s, issue "
          f"{issue_rate / 1e12:.3f}T warp-instructions/s, {SMS} SMs")
    print(f"{'learner':<13} {'threads':>7} {'MB read':>8} {'MB written':>10} {'HBM bound':>10} {'at 2,000':>9}"
          f" {'warp-instr':>10} {'issue bound':>11} {'target':>7} {'inside':>6}")
    for r in found:
        at_2000 = r["hbm_bound"] * r["wave_share"]
        target = r["target"]
        inside = "-" if target is None else "yes" if target <= min(at_2000, r["issue_bound"]) else "NO"
        print(f"{r['learner']:<13} {r['threads']:>7} {r['read'] / 1e6:>8.3f} {r['written'] / 1e6:>10.3f}"
              f" {r['hbm_bound'] / 1e6:>9.3f}M {at_2000 / 1e6:>8.3f}M {r['instructions']:>10,}"
              f" {r['issue_bound'] / 1e6:>10.2f}M {'-' if target is None else f'{target / 1e6:.2f}M':>7} {inside:>6}")
    print("bytes: counted by the emulated kernel (every LD/ST of its source); at 2,000: the HBM bound times the share"
          " of the last wave's SMs in use (one run per SM); warp-instr: the step loop's longest path x warps (SASS);"
          " inside: the target is under both bounds.")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="roofline.py --gpu-emnist", description=__doc__.splitlines()[0])
    parser.add_argument("--learners", default="fade_sgd,adam,fade_adam,sgd,sgd_wd,adamw,sgd_wclip,adam_wclip,fade_sgd_all")
    parser.add_argument("--bandwidth", type=float, default=3.0e12, help="HBM bytes/s (default 3.0e12, an H100 SXM)")
    parser.add_argument("--issue-rate", type=float, default=132 * 4 * 1.755e9, help="warp-instructions/s of the chip")
    args = parser.parse_args(argv)
    report(rows(args.learners.split(","), args.bandwidth, args.issue_rate), args.bandwidth, args.issue_rate)


if __name__ == "__main__":
    main(sys.argv[1:])
