"""Where a pack's compiled kernel spends its time: perf samples mapped onto numba's machine code.

    python benchmarks/profile_jit.py nonlinear fade_sgd          # or: linear fade, emnist adam, ...
    python benchmarks/profile_jit.py linear sgd --dtype float64 --seconds 10 --show 3

perf cannot name numba's JIT code (no symbols, no perf map), so this runs the workload of
peer_jax.py (same packs, one thread), has it copy its executable anonymous memory (the JIT
code) to files once the kernels are compiled, attaches `perf record` to it for `--seconds`
(set-up and compilation stay out), attributes the samples to 256-byte windows of that code
and prints the hottest ranges of windows with their share of all samples, and the disassembly (objdump) of the `--show` hottest with a
per-instruction share. Samples outside JIT code are Python, numpy and the allocator.
Needs Linux `perf` (allowed to sample this user's processes) and binutils' objdump.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's packages, installed or not

WINDOW = 256


def worker(workload: str, learner: str, dtype: str, seconds: float, folder: Path) -> None:
    """The profiled process: build the pack, compile, dump the JIT code, run the kernel for `seconds`."""
    import ctypes

    import numba
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import peer_jax

    numba.set_num_threads(1)
    torch.set_num_threads(1)
    steps = {"linear": 4000, "nonlinear": 500, "emnist": 100}[workload]
    case = (peer_jax.linear_case(learner, steps, getattr(torch, dtype)) if workload == "linear" else
            peer_jax.neural_case(workload, learner, steps, getattr(torch, dtype),
                                 peer_jax.emnist_dir(folder) if workload == "emnist" else ""))
    case.prepare(steps)()  # compiles (or loads) every kernel the pack uses
    regions = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split()
        if "x" in fields[1] and len(fields) < 6:  # executable and anonymous: JIT code
            lo, hi = (int(v, 16) for v in fields[0].split("-"))
            (folder / f"{lo:x}.bin").write_bytes(ctypes.string_at(lo, hi - lo))
            regions.append((lo, hi))
    (folder / "regions.json").write_text(json.dumps(regions))
    print("ready", flush=True)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds + 5:  # until the parent's perf is done and kills it
        run = case.prepare(steps)  # a fresh state now and then (allocating it is not what we profile)
        for _ in range(10):
            run()



def disassembly(binary: Path, base: int) -> list[tuple[int, str]]:
    """(address, instruction) of a whole region: objdump sweeps from its start, where a function
    begins, so it stays on instruction boundaries."""
    text = subprocess.run(["objdump", "-D", "-b", "binary", "-m", "i386:x86-64", f"--adjust-vma={base:#x}", str(binary)],
                          capture_output=True, text=True, check=True).stdout
    lines = (re.match(r"\s+([0-9a-f]+):\s+(?:[0-9a-f]{2} )+\s*(.*)", line) for line in text.splitlines())
    return [(int(m.group(1), 16), m.group(2)) for m in lines if m and m.group(2)]


def hot_ranges(windows: collections.Counter, total: int) -> list[tuple[int, int, int, int]]:
    """Runs of neighbouring windows holding at least 0.3% of the samples each, as (samples,
    region base, start, end), most samples first: a hot loop, whichever windows it straddles."""
    ranges: list[list[int]] = []
    for base, window in sorted(w for w, count in windows.items() if count >= 0.003 * total):
        if ranges and ranges[-1][1] == base and ranges[-1][3] == window:
            ranges[-1][3] += WINDOW
            ranges[-1][0] += windows[(base, window)]
        else:
            ranges.append([windows[(base, window)], base, window, window + WINDOW])
    return sorted(map(tuple, ranges), reverse=True)


def report(folder: Path, show: int) -> None:
    regions = json.loads((folder / "regions.json").read_text())
    script = subprocess.run(["perf", "script", "-i", str(folder / "perf.data"), "-F", "ip"],
                            capture_output=True, text=True, check=True).stdout
    samples = collections.Counter(int(v, 16) for v in script.split())
    total = sum(samples.values())
    base_of = {ip: lo for ip in samples for lo, hi in regions if lo <= ip < hi}
    windows = collections.Counter()
    for ip, count in samples.items():
        if ip in base_of:
            windows[(base_of[ip], ip - ip % WINDOW)] += count
    ranges = hot_ranges(windows, total)
    print(f"{total} samples, {sum(windows.values()) / total:.0%} in JIT code; hot code ranges (share of all samples):")
    region = {base: k for k, (base, _) in enumerate(sorted(regions))}
    for count, base, start, end in ranges:
        print(f"  region {region[base]} +{start - base:#07x}..+{end - base:#07x}  {count / total:6.1%}")
    code = {}
    for count, base, start, end in ranges[:show]:
        code.setdefault(base, disassembly(folder / f"{base:x}.bin", base))
        print(f"\nregion {region[base]} +{start - base:#07x}..+{end - base:#07x} ({count / total:.1%}):")
        for address, instruction in code[base]:
            if start <= address < end:
                share = samples.get(address, 0) / total
                print(f"  {address - base:#07x} {f'{share:6.1%}' if share >= 0.001 else '':>6}  {instruction}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=("linear", "nonlinear", "emnist"))
    parser.add_argument("learner")
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--show", type=int, default=2, help="hottest windows to disassemble")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.workload, args.learner, args.dtype, args.seconds, Path(args.worker))
        return
    from fade_core import LINEAR_LEARNERS, NEURAL_LEARNERS

    known = LINEAR_LEARNERS if args.workload == "linear" else NEURAL_LEARNERS
    if args.learner not in known:
        print(f"profile_jit: no {args.workload} learner {args.learner!r}; choose from {', '.join(known)}", file=sys.stderr)
        sys.exit(2)
    missing = [tool for tool in ("perf", "objdump") if not shutil.which(tool)]
    if missing:
        print(f"profile_jit: {' and '.join(missing)} not found; install linux-perf / binutils", file=sys.stderr)
        sys.exit(2)
    with tempfile.TemporaryDirectory(prefix="profile-jit-") as tmp:
        folder = Path(tmp)
        command = [sys.executable, __file__, args.workload, args.learner, "--dtype", args.dtype,
                   "--seconds", str(args.seconds), "--worker", tmp]
        worker_process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env={**os.environ, "NUMBA_NUM_THREADS": "1"})
        try:
            if worker_process.stdout.readline().strip() != "ready":
                sys.exit(f"profile_jit: the workload did not start (exit status {worker_process.wait()}); its error is above")
            subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", "4000", "-o", str(folder / "perf.data"),
                            "-p", str(worker_process.pid), "--", "sleep", str(args.seconds)], check=True)
        finally:
            worker_process.kill()
            worker_process.wait()
        report(folder, args.show)


if __name__ == "__main__":
    main()
