"""CUDA C++ compiled at run time with NVRTC, for the GPU in hand, into machine code (a cubin), and
cached on disk keyed by the source, the target and NVRTC's version, so the Ray workers of a node
compile each kernel once between them (and a later sweep not at all).

The binding is NVIDIA's `cuda-bindings` (`cuda.bindings.nvrtc` here, `cuda.bindings.driver` to
load and launch in cuda_engine.py): the thin, versioned Python layer over the CUDA driver and
NVRTC that NVIDIA keeps in step with each toolkit; torch's Linux CUDA wheels already depend on it
and on `nvidia-cuda-nvrtc` (the library it loads), so a GPU install gains no package, and it adds no
memory pool or array type beside torch's (CuPy would, at ~100 MB; ctypes over torch's own libnvrtc
would tie the engine to a private file layout). The `cuda` extra of pyproject.toml names both.

Machine code (not PTX) is compiled: the driver loads it as is, with no JIT step whose result
would depend on the driver's version. Nothing here needs a GPU: the tests compile every learner
for sm_80 and sm_90 on a CPU machine and read the machine code (cuda_sass.py).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from fade_core.engines import EngineError

# -O3 is NVRTC's default; no fast-math: IEEE division and square root, expf (2 ulp), as torch's CUDA ops.
OPTIONS = ("-std=c++17", "--extra-device-vectorization")


def _nvrtc():
    """cuda.bindings.nvrtc, or EngineError (one line) naming the extra that provides it."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as err:
        raise EngineError(f"engine 'cuda' needs NVIDIA's cuda-bindings and NVRTC ({err}); "
                          "install them with `pip install -e \".[cuda]\"`, or choose persistent or torch") from None
    return nvrtc


def _check(result, what: str) -> None:
    nvrtc = _nvrtc()
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise EngineError(f"NVRTC {what} failed: {nvrtc.nvrtcGetErrorString(result)[1].decode()}")


def nvrtc_version() -> str:
    result, major, minor = _nvrtc().nvrtcVersion()
    _check(result, "version query")
    return f"{major}.{minor}"


CACHE = Path.home() / ".cache" / "fade-sweep" / "cuda"  # shared by the processes of a user on a machine


def cache_key(source: str, arch: int) -> str:
    """What a cached cubin is named by: the source, the target, the options and NVRTC's version."""
    text = "\0".join([source, f"sm_{arch}", *OPTIONS, nvrtc_version()])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def compile_source(source: str, arch: int, name: str = "kernel.cu") -> bytes:
    """`source` compiled by NVRTC into a cubin for sm_{arch} (no cache). EngineError with the
    compiler's log when the source does not compile."""
    nvrtc = _nvrtc()
    result, program = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _check(result, "program creation")
    try:
        options = [f"--gpu-architecture=sm_{arch}".encode(), *(o.encode() for o in OPTIONS)]
        (result,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, size = nvrtc.nvrtcGetProgramLogSize(program)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(program, log)
            raise EngineError(f"NVRTC could not compile {name} for sm_{arch}: {log.decode(errors='replace').strip()}")
        result, size = nvrtc.nvrtcGetCUBINSize(program)
        _check(result, "cubin size")
        cubin = b" " * size
        (result,) = nvrtc.nvrtcGetCUBIN(program, cubin)
        _check(result, "cubin")
        return cubin
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def cubin(source: str, arch: int, name: str = "kernel.cu", cache: Path = CACHE) -> bytes:
    """The cubin of `source` for sm_{arch}: from the disk cache `cache`, else compiled and stored there
    (written to a temporary file and renamed, so concurrent workers never read half a file)."""
    folder = cache
    path = folder / f"{cache_key(source, arch)}.cubin"
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    code = compile_source(source, arch, name)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, delete=False, suffix=".part") as tmp:
            tmp.write(code)
        os.replace(tmp.name, path)
    except OSError:  # a read-only home: run uncached rather than fail
        pass
    return code
