"""Registers, spills and instructions per run-step of the nonlinear engines' kernels per learner, for sm_90
(no GPU needed): the Triton persistent engine and the CUDA engine (NVRTC).

    python benchmarks/persistent_regs.py                          # both engines, the learners' defaults
    python benchmarks/persistent_regs.py --engines cuda           # the CUDA engine's table alone
    python benchmarks/persistent_regs.py --engines persistent --learners fade_sgd,adam --warps 4,8,16 --streams 0,1,2

The CUDA engine's table (fade_core/neural/cuda_sass.py): registers, stack and local memory per thread,
the step loop's instructions per thread on its longest fast path, warp-instructions per run-step
(x 8 warps), the cap they imply at an H100's ~0.93T warp-instructions/s (132 SMs x 4 schedulers x
~1.75 GHz), and that cap over issue 39's target (headroom; at least 1.5x wanted).

Triton compiles the kernel for Hopper (sm_90a) on any machine; Triton's own ptxas then reports
the registers per thread, the stack frame and the spill traffic per thread (`ptxas -v`). A
Hopper SM has 64K registers: a program of W warps at N registers per thread takes 32 W N of them,
so 16 warps cap a thread at 128 and 8 warps at 255 (one program per SM) or 128 (two).
Spills live in local memory (L1, then L2): that is what `stream` trades against.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fade_core.neural import NEURAL_LEARNERS  # noqa: E402

WARP_INSTRUCTIONS_PER_S = 132 * 4 * 1.75e9  # an H100 SXM: SMs x schedulers x clock
TARGETS = {"sgd": 100e6, "fade_sgd": 50e6, "adam": 20e6, "fade_adam": 20e6}  # issue 39, run-steps/s

WORD = r"\b{}\b"  # an opcode as a whole word in a SASS line
POINTERS = {"bc1_ptr": "*fp64", "loss_ptr": "*fp64", "sq_ptr": "*fp64", "active_ptr": "*u8", "slot_ptr": "*i64"}


def ptxas_report(learner: str, warps: int, stream: int, sizes=(32, 256, 20), sass: bool = False,
                 maxnreg: int | None = None) -> str:
    """`ptxas -v`'s registers / stack / spill line of one variant; with `sass`, also what one thread
    executes per step: the instructions of the step loop (the longest backward branch) by kind."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from fade_core.neural import persistent

    spec = NEURAL_LEARNERS[learner]
    kernel = persistent._segment_kernel
    flags = dict(persistent.kernel_flags(spec, persistent.KernelConfig(num_warps=warps, stream=stream), sizes), SLOPE=0.0)
    signature = {n: "constexpr" if n in flags else POINTERS.get(n, "*fp32") if n.endswith("_ptr")
                 else "i32" for n in kernel.arg_names}
    source = ASTSource(kernel, signature, constexprs={(kernel.arg_names.index(n),): v for n, v in flags.items()})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, **({"maxnreg": maxnreg} if maxnreg else {})})
    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    with tempfile.TemporaryDirectory() as tmp:
        ptx = Path(tmp) / "k.ptx"
        ptx.write_text(compiled.asm["ptx"])
        done = subprocess.run([str(ptxas), "-v", "--gpu-name=sm_90a", str(ptx), "-o", str(Path(tmp) / "k.cubin")],
                              capture_output=True, text=True)
        dump = subprocess.run([str(ptxas.parent / "cuobjdump"), "-sass", str(Path(tmp) / "k.cubin")],
                              capture_output=True, text=True).stdout if sass else ""
    text = done.stdout + done.stderr
    regs = re.search(r"Used (\d+) registers", text)
    spills = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", text)
    if not regs or not spills:
        return f"ptxas said: {text.strip().splitlines()[-1] if text.strip() else done.returncode}"
    return (f"{regs.group(1):>4} regs  stack {spills.group(1):>5} B  spill stores {spills.group(2):>5} B"
            f"  loads {spills.group(3):>5} B  shared {compiled.metadata.shared:>6} B" + (loop_mix(dump) if sass else ""))


def loop_mix(dump: str) -> str:
    """Instructions per thread and step in the step loop of a SASS listing, by kind."""
    code = [(int(m.group(1), 16), line) for line in dump.splitlines() if (m := re.search(r"/\*([0-9a-f]{4,})\*/", line))]
    branches = [(int(m.group(1), 16), at) for at, line in code if (m := re.search(r"BRA\s+0x([0-9a-f]+)", line))]
    loops = [(target, at) for target, at in branches if target < at]
    if not loops:
        return "  (no step loop found in the SASS)"
    first, last = max(loops, key=lambda loop: loop[1] - loop[0])
    body = [line for at, line in code if first <= at <= last]
    kinds = ("FFMA", "FMUL", "FADD", "SHFL", "BAR", "STL", "LDL", "LDS", "STS", "LDG", "STG", "MUFU")
    counts = " ".join(f"{k} {sum(1 for line in body if re.search(WORD.format(k), line))}" for k in kinds)
    return f"\n    step loop: {len(body)} instructions per thread: {counts}"


def cuda_table(learners: list[str], arch: int, sizes=(32, 256, 20)) -> None:
    """The CUDA engine's kernel per learner: resources and warp-instructions per run-step, with the cap."""
    from fade_core.neural import cuda_compile, cuda_sass
    from fade_core.neural.cuda_source import KernelShape, kernel_source

    warps = sizes[1] // 32
    print(f"cuda engine, sm_{arch}, NVRTC {cuda_compile.nvrtc_version()}, {warps} warps a block (one block per run)")
    print(f"{'learner':<13} {'regs':>4} {'stack':>5} {'local':>5} {'shared':>6} {'instr/thread':>12} {'warp-instr/rs':>13}"
          f" {'cap/s':>8} {'target':>7} {'headroom':>8}")
    for learner in learners:
        code = cuda_compile.cubin(kernel_source(KernelShape(NEURAL_LEARNERS[learner], sizes)), arch)
        used, loop = cuda_sass.resources(code), cuda_sass.step_loop(cuda_sass.sass(code), warps)
        cap = WARP_INSTRUCTIONS_PER_S / loop.per_run_step
        target = TARGETS.get(learner)
        print(f"{learner:<13} {used.registers:>4} {used.stack:>5} {used.local:>5} {used.shared:>6} {loop.path:>12,}"
              f" {loop.per_run_step:>13,} {cap / 1e6:>7.0f}M {f'{target / 1e6:.0f}M' if target else '-':>7}"
              f" {f'{cap / target:.2f}x' if target else '-':>8}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="persistent,cuda", help="persistent and/or cuda")
    parser.add_argument("--learners", default=",".join(NEURAL_LEARNERS))
    parser.add_argument("--warps", default="8,16", help="persistent: num_warps")
    parser.add_argument("--streams", help="persistent, Adam learners: which `stream` values (default: the learner's default)")
    parser.add_argument("--sass", action="store_true", help="persistent: also the step loop's instruction mix (cuobjdump)")
    parser.add_argument("--maxnreg", type=int, help="persistent: registers per thread the compiler may use (Triton's maxnreg)")
    parser.add_argument("--arch", type=int, default=90, help="cuda: the target, e.g. 80 or 90 (default 90)")
    args = parser.parse_args()
    learners = args.learners.split(",")
    for learner in learners:
        if learner not in NEURAL_LEARNERS:
            print(f"persistent_regs: unknown learner {learner!r}; choose from {', '.join(NEURAL_LEARNERS)}", file=sys.stderr)
            sys.exit(2)
    engines = args.engines.split(",")
    if not set(engines) <= {"persistent", "cuda"}:
        print(f"persistent_regs: --engines takes persistent and/or cuda, not {args.engines!r}", file=sys.stderr)
        sys.exit(2)
    if "persistent" in engines:
        from fade_core.neural import persistent

        for learner in learners:
            spec = NEURAL_LEARNERS[learner]
            streams = ([int(s) for s in args.streams.split(",")] if args.streams and spec.base == "adam"
                       else [persistent.default_config(spec).stream])
            for warps in (int(w) for w in args.warps.split(",")):
                for stream in streams:
                    print(f"{learner:<13} warps {warps:>2} stream {stream}: {ptxas_report(learner, warps, stream, sass=args.sass, maxnreg=args.maxnreg)}", flush=True)
    if "cuda" in engines:
        cuda_table(learners, args.arch)


if __name__ == "__main__":
    main()
