"""Which code runs a pack: the engines, where each exists, and the default per (task, device).

An engine runs a learner's rule for R runs at once. Each family has a reference engine
that the fast ones are tested against (tests/test_linear_engines.py; the neural engines
against a plain one-run PyTorch loop in tests/test_neural_learners.py and tests/test_triton*.py,
at the tolerances stated there and in docs/architecture.md):

    reference   linear: a plain compiled loop over `fade_core/linear/rules.py`, one run and
                one step at a time (`fade_core/linear/reference.py`)
    cpu         linear: the vector-traced kernel (`fade_core/linear/kernel.py`);
                neural: the compiled CPU kernel (`fade_core/neural/cpu_kernel.py`)
    torch       neural: batched torch ops (`fade_core/neural/torch_ops.py`): the neural
                reference, on any device
    triton      neural: the torch ops with each parameter's update fused into one Triton
                kernel (`fade_core/neural/triton_update.py`), CUDA
    triton_step neural: each step's backward products and updates as the fewest passes over
                the weights the rule allows (`fade_core/neural/triton_fused_step.py`), CUDA;
                not the default until a GPU measurement puts it ahead of triton
    persistent  neural, one-hidden-layer regression (the nonlinear task): one Triton launch per
                segment of steps, each run's network on chip (`fade_core/neural/persistent.py`),
                CUDA; not the default until a GPU measurement puts it ahead of triton
    cuda        neural, the same tasks as persistent: a CUDA C++ kernel compiled at run time by NVRTC
                (`fade_core/neural/cuda_engine.py`), one block per run; and EMNIST, W1 and W2 on chip for a
                segment (`fade_core/neural/emnist_engine.py`); not the default until measured

The choice is explicit: a sweep file's `engine:` or `fade-sweep run --engine NAME`, else
`default_engine(task, device)`; a pack's manifest records the engine that ran it. No
environment variable changes which engine runs.

`ENGINES` is the one table: a row per (task, device, engine) with the default pack size
and the measured rate. This module imports neither torch nor numba (the light commands
validate engine names with it).
"""

from __future__ import annotations

from dataclasses import dataclass

REFERENCE, CPU, TORCH, TRITON, TRITON_STEP, PERSISTENT = "reference", "cpu", "torch", "triton", "triton_step", "persistent"
CUDA = "cuda"
ENGINE_NAMES = (REFERENCE, CPU, TORCH, TRITON, TRITON_STEP, PERSISTENT, CUDA)
DEVICES = ("cpu", "cuda")
FAMILY_REFERENCE = {"linear": REFERENCE, "neural": TORCH}  # the engine each family's fast engines are tested against


class EngineError(ValueError):
    """An engine name that is unknown, or not available for a task on a device (one line)."""


@dataclass(frozen=True)
class EngineRow:
    """One engine for one task on one kind of device."""

    task: str  # a name of tasks.TASKS (tests/test_engines.py checks every task has its rows)
    family: str  # "linear" | "neural": which learners it runs
    device: str  # "cpu" | "cuda"
    engine: str
    default: bool  # the engine a pack of this task on this device gets unless told otherwise
    pack_runs: int  # default runs per pack (CPU: an upper bound; the planner sizes packs to keep slots busy)
    rate: float | None  # measured run-steps/s of one pack on one worker (None: not measured)
    measured: str  # what was measured, where, at which revision


_ROOFLINE = "benchmarks/ROOFLINE.md, 1 core of the 2-core CI machine, float32"
_NO_GPU = "not measured: no GPU figure is recorded at 9fdfec8 (benchmarks/gpu_check.sh measures one)"
_NEURAL_TASKS = ("nonlinear_tracking", "emnist_label_permuted", "emnist_partial_permuted")


def _neural_rows(task: str, cpu_rate: float, cpu_measured: str) -> tuple[EngineRow, ...]:
    return (
        EngineRow(task, "neural", "cpu", CPU, True, 2000, cpu_rate, cpu_measured),
        EngineRow(task, "neural", "cpu", TORCH, False, 2000, None, "not measured (the reference: batched torch ops)"),
        EngineRow(task, "neural", "cuda", TRITON, True, 2000, None, _NO_GPU),
        EngineRow(task, "neural", "cuda", TORCH, False, 2000, None, _NO_GPU),
        EngineRow(task, "neural", "cuda", TRITON_STEP, False, 2000, None,
                  "not measured: no GPU was lent (benchmarks/gpu_check.sh's bench part measures it beside triton)"),
    )


ENGINES: tuple[EngineRow, ...] = (
    EngineRow("linear_tracking", "linear", "cpu", CPU, True, 2000, 29e6,
              f"linear-noise0's 16 packs (all 7 learners) in one process, {_ROOFLINE}, 2026-11-27"),
    EngineRow("linear_tracking", "linear", "cpu", REFERENCE, False, 2000, 3.8e6,
              "fade float32, 200 runs x 2000 steps, per CPU second of 1 thread on the 2-core CI machine (the cpu "
              "engine: 57-64M in the same process), 2026-11-27"),
    *_neural_rows("nonlinear_tracking", 114e3, f"fade_sgd, one run pinned, {_ROOFLINE}"),
    EngineRow("nonlinear_tracking", "neural", "cuda", PERSISTENT, False, 4000, None,
              "not measured: no GPU was lent (benchmarks/peer_jax.py --device cuda --engine persistent measures it)"),
    EngineRow("nonlinear_tracking", "neural", "cuda", CUDA, False, 4000, None,
              "not measured: no GPU was lent (benchmarks/gpu_check.sh's nonlinear part measures it beside the JAX peer)"),
    *_neural_rows("emnist_label_permuted", 20.2e3, f"fade_sgd, one run pinned, {_ROOFLINE}"),
    *_neural_rows("emnist_partial_permuted", 20.2e3, f"emnist_label_permuted's fade_sgd figure (same network), {_ROOFLINE}"),
    *(EngineRow(task, "neural", "cuda", CUDA, False, 2000, None,
                "not measured: no GPU was lent (benchmarks/gpu_check_emnist.sh measures it beside the JAX peer)")
      for task in ("emnist_label_permuted", "emnist_partial_permuted")),
)


def rows_for(task: str, device: str | None = None) -> tuple[EngineRow, ...]:
    """The table's rows of `task` (on `device`, or on every device)."""
    return tuple(r for r in ENGINES if r.task == task and (device is None or r.device == device))


def engines_for(task: str, device: str | None = None) -> tuple[str, ...]:
    """The engines that run `task` on `device` (None: on any device), default first."""
    rows = sorted(rows_for(task, device), key=lambda r: not r.default)
    return tuple(dict.fromkeys(r.engine for r in rows))


def engine_row(task: str, device: str, engine: str) -> EngineRow:
    """The table's row of `engine` for `task` on `device`; EngineError (one line) if there is none."""
    check_engine(engine, task, device)
    return next(r for r in rows_for(task, device) if r.engine == engine)


def default_engine(task: str, device: str) -> str:
    """The engine a pack of `task` on `device` ("cpu" or "cuda") runs unless told otherwise."""
    if device not in DEVICES:
        raise EngineError(f"device {device!r} is not one of {', '.join(DEVICES)}")
    defaults = [r.engine for r in rows_for(task, device) if r.default]
    if not defaults:
        raise EngineError(f"{task} has no engine on {device}")
    return defaults[0]


def default_pack_runs(task: str, device: str) -> int:
    """Runs per pack of `task` on `device` with its default engine."""
    return engine_row(task, device, default_engine(task, device)).pack_runs


def engine_problem(engine: str, task: str, device: str | None = None) -> str | None:
    """Why `engine` cannot run `task` on `device` (None: on any device), in one line; None if it can."""
    if engine not in ENGINE_NAMES:
        return f"engine {engine!r} is unknown; engines are {', '.join(ENGINE_NAMES)}"
    available = engines_for(task, device)
    if engine in available:
        return None
    where = f" on {device}" if device else ""
    if not available:
        return f"{task} has no engine{where}"
    return f"engine {engine!r} does not run {task}{where}; choose one of {', '.join(available)}"


def check_engine(engine: str, task: str, device: str | None = None) -> None:
    """EngineError (one line) unless `engine` runs `task` on `device` (None: on some device)."""
    problem = engine_problem(engine, task, device)
    if problem is not None:
        raise EngineError(problem)
