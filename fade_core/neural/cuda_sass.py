"""What a compiled CUDA engine kernel's machine code says, without a GPU: registers, stack and local
memory (spills) per thread, and the warp-instructions one run-step issues, read from its SASS.

The tools: cuobjdump (the resource usage) and nvdisasm (the SASS), from NVIDIA's
`nvidia-cuda-cuobjdump` and `nvidia-cuda-nvdisasm` wheels (the `test` extra; found beside the other `nvidia` wheels), else
Triton's bundled copies, else PATH's. Used by the tests
(tests/test_cuda_engine.py: no spill, instructions per run-step under budget) and by
benchmarks/persistent_regs.py's table.

Counting a run-step: the step loop is the longest conditional backward branch of the kernel. What
one thread issues per step is the longest path through the loop's body along its forward branches
(branches out of the loop ignored), never entering a block that calls a subroutine: those are the
slow paths of IEEE divisions and square roots (denormal or huge operands). The longest path takes
warp 0's own work (the output, the sums, the head bias) and the larger side of every if/else (a
body the compiler copied per value of a flag), so path x warps is an upper bound of the
warp-instructions a run-step issues.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

_ADDRESS = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")


@dataclass(frozen=True)
class LoopCount:
    """One step of the loop: its instructions (`body`), the most one thread issues per step on the
    fast path (`path`), and the warp-instructions per run-step for a block of `warps` warps."""

    body: int
    path: int
    warps: int

    @property
    def per_run_step(self) -> int:
        """Warp-instructions one step of one run issues, at most: every warp on the longest path."""
        return self.path * self.warps


@dataclass(frozen=True)
class Resources:
    registers: int
    stack: int  # bytes per thread
    local: int  # bytes per thread of local memory (spills land here)
    shared: int  # bytes per block, static


def tool(name: str) -> str:
    """The path of `name` (cuobjdump, nvdisasm): the nvidia-cuda-* wheel's, Triton's bundled one, or PATH's;
    FileNotFoundError otherwise."""
    candidates = []
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        candidates += sorted(Path(root).glob(f"cu*/bin/{name}"))
    triton = importlib.util.find_spec("triton")
    if triton and triton.origin:
        candidates.append(Path(triton.origin).parent / "backends" / "nvidia" / "bin" / name)
    for path in candidates:
        if path.is_file():
            return str(path)
    found = shutil.which(name)
    if found:
        return found
    raise FileNotFoundError(f"no {name}: install the test extra (`pip install -e \".[test]\"`: nvidia-cuda-cuobjdump, "
                            "nvidia-cuda-nvdisasm)")


def _run(name: str, flags: list[str], cubin: bytes) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        return subprocess.run([tool(name), *flags, str(path)], capture_output=True, text=True, check=True).stdout


def resources(cubin: bytes) -> Resources:
    """Registers, stack, local memory and static shared memory of the cubin's (one) kernel."""
    text = _run("cuobjdump", ["-res-usage"], cubin)
    found = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", text)
    if not found:
        raise ValueError(f"cuobjdump -res-usage said: {text.strip()[-300:]}")
    regs, stack, shared, local = (int(g) for g in found.groups())
    return Resources(regs, stack, local, shared)


def sass(cubin: bytes) -> list[tuple[int, str]]:
    """(address, instruction) of every SASS instruction of the cubin's code (nvdisasm), branch targets
    written as addresses (`BRA 0x1ae0`) rather than nvdisasm's labels."""
    code, labels, pending, in_text = [], {}, [], False
    for line in _run("nvdisasm", ["-raw"], cubin).splitlines():
        if line.strip().startswith(".section"):
            in_text = ".text." in line
        elif in_text and (label := re.match(r"^(\.L_x_\d+):", line)):
            pending.append(label.group(1))
        elif in_text and (found := _ADDRESS.search(line)):
            address = int(found.group(1), 16)
            labels.update((name, address) for name in pending)
            pending = []
            code.append((address, found.group(2)))
    resolve = lambda m: f"0x{labels[m.group(1)]:x}"  # noqa: E731
    return [(at, re.sub(r"`\((\.L_x_\d+)\)", resolve, ins)) for at, ins in code]


def _target(instruction: str) -> int | None:
    if not re.search(r"\bBRA\b", instruction):
        return None
    found = re.search(r"0x([0-9a-f]+)", instruction)
    return int(found.group(1), 16) if found else None


def _loop(code: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The step loop's instructions: the body of the longest conditional backward branch (ValueError if
    none). (An unconditional one is a jump back from out-of-line code, such as the divergent-warp
    path of a shuffle, not a loop.)"""
    loops = [(target, at) for at, ins in code
             if ins.startswith("@") and (target := _target(ins)) is not None and target < at]
    if not loops:
        raise ValueError("no step loop (backward branch) in the SASS")
    first, last = max(loops, key=lambda loop: loop[1] - loop[0])
    return [(at, ins) for at, ins in code if first <= at <= last]


def _longest_path(body: list[tuple[int, str]]) -> int:
    """Instructions on the longest path from the body's first instruction to its last (the back edge),
    along fall-throughs and forward branches inside the body, avoiding instructions that CALL."""
    index = {at: i for i, (at, _) in enumerate(body)}
    best = [-1] * len(body)
    best[0] = 1
    for i, (at, ins) in enumerate(body):
        if best[i] < 0 or re.search(r"\bCALL\b", ins):
            continue
        target = _target(ins)
        jumps = target is not None and not ins.startswith("@") and "BRA.DIV" not in ins
        if not jumps and i + 1 < len(body):
            best[i + 1] = max(best[i + 1], best[i] + 1)
        if target is not None and target > at and target in index:
            best[index[target]] = max(best[index[target]], best[i] + 1)
    if best[-1] < 0:
        raise ValueError("the step loop's back edge is reachable only through a subroutine call")
    return best[-1]


def step_loop(code: list[tuple[int, str]], warps: int) -> LoopCount:
    """The step loop's count for a block of `warps` warps."""
    body = _loop(code)
    return LoopCount(len(body), _longest_path(body), warps)


def opcode_mix(code: list[tuple[int, str]], kinds=("FFMA", "FMUL", "FADD", "MUFU", "SHFL", "BAR", "LDS", "STS",
                                                     "LDG", "DADD", "LDL", "STL")) -> dict[str, int]:
    """How many instructions of each kind the step loop holds (per thread, slow paths included)."""
    body = [ins for _, ins in _loop(code)]
    return {k: sum(1 for ins in body if re.search(rf"\b{k}\b", ins)) for k in kinds}
