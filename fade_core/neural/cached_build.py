"""Every process runs the neural CPU kernel's cached build, never one of its own compiling.

numba compiles `run_segment`'s callees (cpu_kernel's row loops, cpu_elements' rules) as
libraries of their own and links copies of them into run_segment's code, which LLVM then
optimises again, and which is what numba's disk cache keeps. In the process that compiles
run_segment, its calls go to the callees' own builds instead (the JIT binds a symbol to its
first definition). Under 'reassoc' the two builds of a callee may round differently: Adam's
numbers differed in the last bits between a process that had compiled the kernel and one
that loaded it, so the first sweep on a machine and its rerun disagreed. Here a process
that would compile the kernel has a child process compile and cache it, then loads that
build like every later process. (If the child cannot, the process compiles as numba would.)
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import warnings
from typing import Any

import numba

_CHILD = """
import importlib, pickle, sys
module, name = sys.argv[1], sys.argv[2]
getattr(importlib.import_module(module), name).compile(pickle.load(sys.stdin.buffer))
"""


def call_cached(kernel: Any, *args: Any) -> None:
    """kernel(*args) (a numba dispatcher with cache=True), its build for these argument types
    loaded from numba's cache: compiled and saved there by a child process first if missing."""
    if hasattr(kernel, "overloads"):  # (not under NUMBA_DISABLE_JIT, where it is the plain function)
        signature = tuple(numba.typeof(a) for a in args)
        if signature not in kernel.overloads and not _in_cache(kernel, signature):
            failure = _compile_in_child(kernel, signature)
            if failure is None and not _in_cache(kernel, signature):  # e.g. NUMBA_CACHE_DIR changed after import
                failure = "its build is not in this process's cache"
            if failure is not None:
                warnings.warn(f"{kernel.py_func.__qualname__}: compiling it in a child process failed ({failure}); "
                              "compiled here, its last bits may differ from a cached build's", RuntimeWarning, stacklevel=2)
    kernel(*args)


def _in_cache(kernel: Any, signature: tuple) -> bool:
    """Whether numba's cache holds a build of `kernel` for `signature` (read from its index, as
    the dispatcher would; numba's internals, so anything unexpected counts as cached: the
    dispatcher then does what it always does)."""
    try:
        cache = kernel._cache
        key = cache._index_key(signature, kernel.targetctx.codegen())
        return key in cache._cache_file._load_index()
    except Exception:  # noqa: BLE001 - another numba version: leave it to the dispatcher
        return True


def _compile_in_child(kernel: Any, signature: tuple) -> str | None:
    """Compile and cache `kernel` for `signature` in a child process: None, or what went wrong."""
    function = kernel.py_func
    path = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))  # the parent's imports resolve alike
    env = {**os.environ, "PYTHONPATH": path}
    command = [sys.executable, "-c", _CHILD, function.__module__, function.__qualname__]
    try:
        done = subprocess.run(command, input=pickle.dumps(signature), env=env, capture_output=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as err:
        return str(err)
    if done.returncode:
        last = done.stderr.decode(errors="replace").strip().splitlines()[-1:]
        return last[0] if last else f"exit status {done.returncode}"
    return None
