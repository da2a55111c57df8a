"""The hardware bound of a per-run-step workload on this CPU: compute (FMA peak) and bandwidth (the cache
level holding the state), and the share of it a measured rate reaches. Used by peer_jax.py; the
derivation is in ROOFLINE.md.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

EXP_FLOPS = 10  # what one exp or sqrt (XLA's 'transcendentals') costs in FMA-unit time, in flops


class Bound(NamedTuple):
    """One comparison: XLA's counts per run-step, one run's state, both sides' rates per CPU second."""

    name: str
    flops: float
    exp: float  # transcendentals (exp, sqrt) per run-step
    state_bytes: int
    input_bytes: int  # one step's sample
    runs: int
    itemsize: int
    project: float
    peer: float
    update_only: float | None = None  # update_cap.py's rate (neural learners), else None


def stream_bandwidth(nbytes: int) -> float:
    """Read + write bytes per second of an in-place float32 add over nbytes on one core (best pass)."""
    a = np.ones(nbytes // 4, dtype=np.float32)
    best = np.inf
    for _ in range(max(5, int(4e8 // nbytes))):
        start = time.perf_counter()
        np.add(a, 1.0, out=a)
        best = min(best, time.perf_counter() - start)
    return 2 * nbytes / best


class Machine(NamedTuple):
    cores: int
    ghz: float
    lanes32: int  # float32 lanes of a vector FMA (8: AVX2, 16: AVX-512)
    capacity: dict[str, float]  # bytes per core a working set may use at each level
    bandwidth: dict[str, float]  # read + write bytes/s per core at each level

    @property
    def summary(self) -> str:
        levels = ", ".join(f"{k} {self.capacity[k] / 1024:.0f} KiB {self.bandwidth[k] / 1e9:.0f} GB/s"
                           for k in self.capacity if k != "DRAM")
        return (f"CPU {self.ghz:.2f} GHz, 2 FMA x {self.lanes32} float32 lanes = {4 * self.lanes32} flops/cycle;"
                f" per core: {levels}, DRAM {self.bandwidth['DRAM'] / 1e9:.0f} GB/s (read + write)")

    def level(self, working_set: float) -> str:
        return next(k for k, v in self.capacity.items() if working_set <= v)

    def report(self, bounds: list[Bound]) -> None:
        """Per core: the compute bound, the bandwidth bound where one run's state lives and where the
        peer's pack lives, and the share of min(compute, bandwidth for one run) each side reaches."""
        print(f"{'per core':<26} {'flops':>7} {'exp':>6} {'state':>8} {'1 run':>5} {'JAX pack':>8} {'compute':>8}"
              f" {'BW 1 run':>8} {'BW pack':>8} {'project':>7} {'JAX':>6} {'update only':>11} {'cap/JAX':>7}")
        for b in bounds:
            compute = 4 * self.lanes32 * 4 / b.itemsize * self.ghz * 1e9 / (b.flops + EXP_FLOPS * b.exp)
            traffic = 2 * b.state_bytes + b.input_bytes  # state read and written once per step, one sample read
            one, whole = self.level(b.state_bytes), self.level(b.runs / self.cores * b.state_bytes)
            bw_one, bw_pack = (self.bandwidth[lv] / traffic for lv in (one, whole))
            bound = min(compute, bw_one)
            cap = (f"{si(b.update_only):>11} {b.update_only / b.peer:>6.2f}x" if b.update_only
                   else f"{'-':>11} {'-':>7}")
            print(f"{b.name:<26} {b.flops:>7.0f} {b.exp:>6.0f} {b.state_bytes / 1024:>6.1f}KB {one:>5} {whole:>8}"
                  f" {si(compute):>8} {si(bw_one):>8} {si(bw_pack):>8}"
                  f" {b.project / bound:>7.1%} {b.peer / bound:>6.1%} {cap}")
        print("flops, exp: XLA's count of the peer's step, per run-step. state: one run's. 1 run / JAX pack: the level"
              " holding one run (the project's layout: a thread keeps a run for a segment) / the peer's share of the"
              f" pack (its batched ops stream every run each step). compute: FMA peak / (flops + {EXP_FLOPS} per exp"
              " or sqrt). BW: that level's bandwidth / (2 x state + the sample). project, JAX: rate per CPU second"
              " as a share of min(compute, BW 1 run). update only: run-steps/s of the learner's per-parameter update"
              " alone on one run (update_cap.py: no forward or backward), a cap on any implementation of the same"
              " arithmetic; cap/JAX: the most any such implementation can be ahead of the peer here.")


def si(rate: float) -> str:
    return f"{rate / 1e6:.2f}M" if rate >= 1e6 else f"{rate / 1e3:.1f}K"


def machine(cores: int) -> Machine:
    """Clock, vector width and caches from /proc and sysfs; bandwidths: L1 from the load/store ports
    (32 B stored + 32 B loaded per cycle), the others measured here."""
    info = Path("/proc/cpuinfo").read_text()
    ghz = float(info.split("cpu MHz")[1].split(":")[1].split()[0]) / 1e3
    lanes = 16 if " avx512f" in info else 8
    sizes = {}
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        if (index / "type").read_text().strip() != "Instruction":
            text = (index / "size").read_text().strip()
            sizes[f"L{(index / 'level').read_text().strip()}"] = int(text[:-1]) * {"K": 1024, "M": 1024**2}[text[-1]]
    sizes["L3"] /= cores  # shared
    bandwidth = {"L1": 64 * ghz * 1e9, "L2": stream_bandwidth(int(sizes["L2"]) // 2),
                 "L3": stream_bandwidth(int(sizes["L3"]) // 2), "DRAM": stream_bandwidth(256 * 1024**2)}
    return Machine(cores, ghz, lanes, {**dict(sorted(sizes.items())), "DRAM": np.inf}, bandwidth)


if __name__ == "__main__":  # the GPU kernels' bounds, counted on this CPU: `python benchmarks/roofline.py --gpu-emnist`
    import sys

    if sys.argv[1:2] != ["--gpu-emnist"]:
        sys.exit("usage: python benchmarks/roofline.py --gpu-emnist [--learners ...] (the CPU bounds: peer_jax.py)")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from roofline_gpu import main

    main(sys.argv[2:])
