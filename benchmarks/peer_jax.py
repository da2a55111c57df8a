"""The project's packs against the peer a researcher would write in JAX (vmap + lax.scan), kernel to kernel.

    pip install "jax[cpu]"                                # or: pip install -e ".[bench]"
    python benchmarks/peer_jax.py                         # linear (float32, float64), nonlinear, EMNIST; 1 core
    python benchmarks/peer_jax.py --workloads linear --cores 2 --dtype float32
    python benchmarks/peer_jax.py --workloads nonlinear,emnist --learners fade_sgd --steps 500 --repeats 5

The peer is what someone who knows PureJaxRL writes instead of this project: one run's
learner as a pure function, `lax.scan` over the steps, `jax.vmap` over configurations
(sharing their seed's stream) and seeds, `jax.jit` around it all, `jax.grad` for the
network's backward pass and FADE's trace written out. Both sides get the same packs as
bench_linear.py / bench_neural.py (linear: 20 configs x 10 seeds, d = 20, float32
normal data shared per seed; nonlinear: 48 x 5 of the teacher-student stream; EMNIST:
20 x 5 of the label-permuted stream from $FADE_EMNIST_DIR or shared/data/emnist, else a
generated EMNIST-shaped set), the same initial weights and per-run hyperparameters.

Timed: the kernel alone, the stream already in memory. The project: one `advance` call
(`fade_core.linear.advance`, `NeuralRuns.advance`) over the whole stream with numba at
`--cores` threads, from a fresh state each repeat. The peer: `--cores` JAX processes, each
pinned to one CPU (XLA's runtime threads included; the project's process is pinned to the
same CPUs) with its share of the configurations, compiled first and
timed with block_until_ready; its wall time is the slowest process's. Repeats alternate
project, peer, project, ...; the best of each is kept. Rates are run-steps per second
(one run advanced by one step), per wall second and per CPU second (all threads and
processes of a side together: the figure to read on a shared machine).

Guard: before timing, both sides run the first 100 steps and their per-step losses are
compared; `max rel diff` is max |project - peer| over runs and steps, divided by the run's
mean loss. Float32 rounding (the project accumulates linear predictions in float64 and
computes Adam's bias corrections in float64) gives ~1e-7 to 3e-4 (float64: ~1e-14);
anything large means the two are not the same computation.

Bound: the derivation is in benchmarks/ROOFLINE.md. Per workload the script prints the
flops per run-step (XLA's count of the peer's step), each run's state, the cache level
holding one run (the project's layout: a thread keeps one run for a whole segment) and
the level holding the peer's whole pack (its batched ops stream every run's state each
step), the compute bound, the bandwidth bounds, and the share of min(compute, bandwidth
for one run) each side's rate per CPU second reaches. For the networks it also times the
learner's per-parameter update alone (update_cap.py): no implementation of the same
arithmetic passes that rate, so cap/JAX is the most any can be ahead of the peer.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

try:
    import jax
    import jax.numpy as jnp
except ImportError:
    print('peer_jax: JAX is not installed; pip install "jax[cpu]" (or pip install -e ".[bench]")', file=sys.stderr)
    sys.exit(2)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from jax_peer import LINEAR_RULES, peer_program  # noqa: E402


def worker(path: str, part: int, parts: int, cpu: int) -> None:
    """One peer process, pinned to CPU `cpu` (XLA's threads too): its share of the configs;
    guard losses to a file, then a timed run per stdin line."""
    os.sched_setaffinity(0, {cpu})
    data = dict(np.load(path))
    meta = json.loads(str(data.pop("meta")))
    configs = len(data["hp_" + meta["hp"][0]])
    lo, hi = part * configs // parts, (part + 1) * configs // parts
    p = {k[3:]: jnp.asarray(v[lo:hi]) for k, v in data.items() if k.startswith("hp_")}
    program, init = peer_program(meta, data["init"])
    x, y, n = jnp.asarray(data["x"]), jnp.asarray(data["y"]), meta["guard"]
    np.save(f"{path}.guard{part}.npy", np.asarray(program(p, init, x[:n], y[:n])).reshape(-1, n))
    jax.block_until_ready(program(p, init, x, y))  # compile, warm
    cost = program.lower(p, init, x[:2], y[:2]).compile().cost_analysis()  # XLA counts the loop body once
    cost = cost[0] if isinstance(cost, list) else cost
    runs = (hi - lo) * x.shape[1]
    print(json.dumps({"flops": cost.get("flops", 0) / runs, "exp": cost.get("transcendentals", 0) / runs}), flush=True)
    for _ in sys.stdin:
        wall, cpu = time.perf_counter(), time.process_time()
        jax.block_until_ready(program(p, init, x, y))
        print(json.dumps({"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}), flush=True)


if __name__ == "__main__" and "--worker" in sys.argv:
    worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    sys.exit(0)

# ---------------------------------------------------------------------------------------
# The project's side, the comparison, the bound.

import numba  # noqa: E402
import torch  # noqa: E402

from bench_linear import HP  # noqa: E402
from bench_neural import SHARED_EMNIST, experiment  # noqa: E402
from fade_core import LINEAR_LEARNERS, NEURAL_LEARNERS, initial_weights, make_runs  # noqa: E402
from fade_core.linear import advance, hyperparameter_matrix, init_state  # noqa: E402
from fade_core.neural import StepSums  # noqa: E402
from roofline import Bound, machine, si  # noqa: E402
from update_cap import update_cap  # noqa: E402
from tasks import get_task  # noqa: E402
from tests.emnist_fixture import write_idx_dataset  # noqa: E402

PACKS = {"linear": (20, 10), "nonlinear": (48, 5), "emnist": (20, 5)}  # configs x seeds: 200, 240, 100 runs
LEARNERS = {"linear": tuple(LINEAR_RULES), "nonlinear": ("fade_sgd", "adam"), "emnist": ("fade_sgd", "adam", "fade_adam")}
STEPS = {"linear": 20_000, "nonlinear": 1_000, "emnist": 500}
GUARD = 100  # steps of the correctness guard
D = 20  # linear inputs


class Case(NamedTuple):
    """One workload x learner x dtype: the data both sides read and the project's side."""

    meta: dict
    arrays: dict[str, np.ndarray]  # x, y, init (per seed), hp_<name> (per config)
    prepare: Callable[[int], Callable[[], None]]  # steps -> a fresh project call over that many steps
    guard: Callable[[], np.ndarray]  # the project's (R, GUARD) per-step losses
    state_bytes: int  # one run's state
    input_bytes: int  # one step's sample


def linear_case(learner: str, steps: int, dtype: torch.dtype) -> Case:
    configs, seeds = PACKS["linear"]
    spec = LINEAR_LEARNERS[learner]
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal((steps, seeds, D)).astype(np.float32)).to(dtype)
    y = torch.from_numpy(rng.standard_normal((steps, seeds)).astype(np.float32)).to(dtype)
    # bench_linear's values; the first hyperparameter spread over a factor 4, so configs differ
    hp = {n: np.full(configs, HP[n]) for n in spec.hyperparameters}
    hp[spec.hyperparameters[0]] *= 2.0 ** np.linspace(-1, 1, configs)
    per_run = {n: torch.from_numpy(np.repeat(v, seeds)) for n, v in hp.items()}
    hpm = hyperparameter_matrix(spec, per_run, configs * seeds, dtype)
    slot = torch.arange(configs * seeds) % seeds  # run r = config r // S, seed r % S
    w0 = initial_weights(range(seeds), D, dtype)

    def prepare(n: int) -> Callable[[], None]:
        # The losses buffer is written here, untimed (torch.zeros would not touch it): a fresh buffer's first touch (page faults,
        # 16 MB at 20,000 steps: half the time of a float32 sgd call) is not the kernel's, and the
        # peer's XLA allocator reuses its buffers from call to call.
        state, losses = init_state(spec, hpm, w0[slot]), torch.empty(len(slot), n, dtype=dtype).fill_(0.0)
        return lambda: advance(spec, hpm, state, x[:n], y[:n], slot, losses)

    def guard() -> np.ndarray:
        state, losses = init_state(spec, hpm, w0[slot]), torch.empty(len(slot), GUARD, dtype=dtype)
        advance(spec, hpm, state, x[:GUARD], y[:GUARD], slot, losses)
        return losses.numpy()

    used = 1 + 2 * spec.adapts_step_size + 2 * spec.adapts_decay
    return Case({"workload": "linear", "learner": learner, "hp": list(hp)},
                {"x": x.numpy(), "y": y.numpy(), "init": w0.numpy(), **{f"hp_{n}": v for n, v in hp.items()}},
                prepare, guard, used * D * x.element_size(), (D + 1) * x.element_size())


def emnist_dir(folder: Path) -> str:
    """$FADE_EMNIST_DIR or shared/data/emnist if it holds the bymerge test split, else a generated EMNIST-shaped set."""
    given = Path(os.environ.get("FADE_EMNIST_DIR", str(SHARED_EMNIST)))
    if any(given.rglob("emnist-bymerge-test-images-idx3-ubyte*")):
        return str(given)
    print(f"no EMNIST bymerge test split in {given}: a generated EMNIST-shaped set stands in", file=sys.stderr)
    return str(write_idx_dataset(folder / "emnist", images=20_000, split="bymerge", train=False))


def neural_case(workload: str, learner: str, steps: int, dtype: torch.dtype, data_dir: str,
                configs: int | None = None) -> Case:
    """`configs` x the workload's seeds runs (default: PACKS; bench_gpu_packs.py asks for 2,000 runs)."""
    default, seeds = PACKS[workload]
    configs = configs or default
    exp = experiment(workload, learner, steps, data_dir)
    task = get_task(exp.task)
    streams = [task.make_stream(exp.settings, s) for s in range(seeds)]
    chunks = [stream.chunk(0, steps) for stream in streams]
    x = torch.stack([st.inputs(c.x, "cpu", dtype) for st, c in zip(streams, chunks)], dim=1)  # (T, S, in)
    y = torch.stack([c.y for c in chunks], dim=1)  # (T, S, out) values or (T, S) labels
    y = y if task.loss == "cross_entropy" else y.to(dtype)
    grid = (exp.configs() * configs)[:configs]  # the published grid's first cells, as bench_neural
    hp = {n: np.array([c[n] for c in grid]) for n in grid[0]}
    runs = configs * seeds
    slot = torch.arange(runs) % seeds
    per_run = {n: list(np.repeat(v, seeds)) for n, v in hp.items()}

    def fresh():
        return make_runs(learner, task.architecture, slot.tolist(), per_run, task.loss, dtype=dtype)

    def prepare(n: int) -> Callable[[], None]:
        nets, sums = fresh(), StepSums.zeros(runs, task.architecture, task.loss, "cpu")
        return lambda: nets.advance(x[:n], y[:n], slot, sums)

    def guard() -> np.ndarray:
        nets, sums = fresh(), StepSums.zeros(runs, task.architecture, task.loss, "cpu")
        totals = []
        for t in range(GUARD):  # one step per call: the per-step loss is the step's increment of the sum
            nets.advance(x[t : t + 1], y[t : t + 1], slot, sums)
            totals.append(sums.loss.clone())
        return np.diff(torch.stack(totals, dim=1).numpy(), axis=1, prepend=0.0)

    arch = task.architecture
    n = arch.offsets()[-1]
    head = n - arch.offsets()[-3]
    state = n * (1 + 2 * ("adam" in learner)) + 2 * head * learner.startswith("fade")
    meta = {"workload": workload, "learner": learner, "hp": list(hp), "sizes": list(arch.sizes),
            "slope": arch.negative_slope, "classification": task.loss == "cross_entropy", "parameters": n, "head": head}
    init = fresh().net.flat[:seeds].numpy()  # run s < S is config 0 of seed s
    arrays = {"x": x.numpy(), "y": y.numpy().astype(np.int32) if meta["classification"] else y.numpy(), "init": init,
              **{f"hp_{k}": v for k, v in hp.items()}}
    sample = arch.sizes[0] + arch.sizes[-1]
    return Case(meta, arrays, prepare, guard, state * x.element_size(), sample * x.element_size())


def max_rel_diff(project: np.ndarray, peer: np.ndarray) -> float:
    """max |project - peer| over runs and steps, over each run's mean loss (NaN in one side only: NaN)."""
    diff = np.abs(project - peer) / np.nanmean(np.abs(project), axis=1, keepdims=True)
    return float(np.max(np.where(np.isnan(project) & np.isnan(peer), 0.0, diff)))


def timed(call: Callable[[], None]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def reply(worker: subprocess.Popen) -> dict:
    line = worker.stdout.readline()
    if not line:
        raise RuntimeError(f"a JAX worker exited (status {worker.wait()}); its error is above")
    return json.loads(line)


def compare(case: Case, steps: int, cpus: list[int], repeats: int, folder: Path) -> dict:
    """Guard, then interleaved timings; rates in run-steps/s (wall, and per CPU second)."""
    path = folder / f"{case.meta['workload']}-{case.meta['learner']}.npz"
    np.savez(path, meta=json.dumps({**case.meta, "guard": GUARD}), **case.arrays)
    env = {**os.environ, "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false",
           "JAX_ENABLE_X64": str(case.arrays["x"].dtype == np.float64)}
    cores = len(cpus)
    workers = [subprocess.Popen([sys.executable, __file__, "--worker", str(path), str(k), str(cores), str(cpus[k])],
                                env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for k in range(cores)]
    try:
        cost = [reply(w) for w in workers][0]
        peer_guard = np.concatenate([np.load(f"{path}.guard{k}.npy") for k in range(cores)])
        # As a sweep's trainable does: torch's threads too. With torch's default (every core), its OpenMP
        # workers spin after each torch call of `prepare`, on the project's pinned CPUs: a third of a
        # float32 sgd call's CPU time went to them.
        numba.set_num_threads(cores)
        torch.set_num_threads(cores)
        diff = max_rel_diff(case.guard(), peer_guard)  # also compiles the project's kernel
        project, peer = [], []
        for _ in range(repeats):
            project.append(timed(case.prepare(steps)))
            for w in workers:
                w.stdin.write("go\n")
                w.stdin.flush()
            done = [reply(w) for w in workers]
            peer.append((max(d["wall"] for d in done), sum(d["cpu"] for d in done)))
    finally:
        for w in workers:
            w.stdin.close()
            w.wait()
    run_steps = np.prod(PACKS[case.meta["workload"]]) * steps
    best = lambda times, i: run_steps / min(t[i] for t in times)  # noqa: E731
    return {"project": best(project, 0), "peer": best(peer, 0), "project_cpu": best(project, 1),
            "peer_cpu": best(peer, 1), "diff": diff, **cost}


def pinned_cpus(cores: int) -> list[int]:
    """The CPUs both sides run on: this process (numba's threads) is pinned to the first
    `cores` CPUs it may use, JAX process k to the k-th. Unpinned, a "single-threaded" JAX
    process spreads XLA's runtime threads over every core (1.7-1.8 CPUs busy on this 2-core
    machine), so its wall rate would not be one core's."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < cores:
        fail(f"--cores {cores}: this process may use only {len(allowed)} CPU(s); choose --cores {len(allowed)} or fewer")
    os.sched_setaffinity(0, allowed[:cores])
    return allowed[:cores]


def fail(message: str) -> None:
    print(f"peer_jax: {message}", file=sys.stderr)
    sys.exit(2)


def parse_list(text: str, allowed: tuple[str, ...], what: str) -> list[str]:
    items = [t for t in text.split(",") if t]
    bad = [t for t in items if t not in allowed]
    if bad or not items:
        fail(f"unknown {what} {','.join(bad) or repr(text)}; choose from {','.join(allowed)}")
    return items



def gpu_main(args: argparse.Namespace) -> None:
    """--device cuda (or --dry-run): the persistent or cuda engine against a GPU JAX peer, nonlinear task (peer_gpu.py)."""
    os.environ.setdefault("TRITON_INTERPRET", "0" if args.device == "cuda" else "1")
    if args.device == "cuda" and not torch.cuda.is_available():
        fail("--device cuda: torch sees no CUDA GPU here; use --device cpu --dry-run for the toy-sized check")
    if args.engine == "cuda" and args.device != "cuda":
        fail("--engine cuda needs --device cuda (NVRTC's kernels run on a GPU only)")
    import peer_gpu
    from fade_core.neural import persistent

    from_jax = set(peer_gpu.NEURAL_PEERS)
    learners = parse_list(args.learners or ("fade_sgd,adam,adamw,fade_adam" if not args.dry_run else "fade_sgd,fade_adam"),
                          tuple(n for n in NEURAL_LEARNERS if n in from_jax or args.no_peer or args.engine == "cuda"),
                          "learner")
    sizes = [int(r) for r in (args.runs or ("240,1000,4000" if not args.dry_run else "3")).split(",")]
    steps = args.steps or (2000 if not args.dry_run else 6)
    configs = {n: persistent.KernelConfig(num_warps=args.warps or persistent.default_config(NEURAL_LEARNERS[n]).num_warps,
                                          stream=0 if args.engine == "cuda"  # (its moments stay on chip: the bytes bound)
                                          else persistent.default_config(NEURAL_LEARNERS[n]).stream
                                          if args.stream is None else args.stream, exact=not args.approx,
                                          maxnreg=args.maxnreg) for n in learners}
    lines = peer_gpu.compare(learners, sizes, steps, args.segment or min(steps, 1000), min(GUARD, steps) if not args.dry_run
                             else 3, 1 if args.dry_run else args.repeats, args.device, args.peak_tflops, configs,
                             not args.no_peer, args.engine, Path(args.results) if args.results else None)
    if args.summary:
        Path(args.summary).write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="cuda: the persistent engine against JAX on the GPU, nonlinear task (peer_gpu.py)")
    parser.add_argument("--dry-run", action="store_true", help="the --device cuda comparison at toy sizes on the CPU "
                        "(Triton's interpreter, JAX on the CPU): checks the script, times nothing that matters")
    parser.add_argument("--runs", help="GPU: pack sizes, comma-separated (default 240,1000,4000)")
    parser.add_argument("--segment", type=int, help="GPU: engine steps per launch (default min(steps, 1000))")
    parser.add_argument("--warps", type=int, help="GPU: the kernel's num_warps (default: per learner)")
    parser.add_argument("--stream", type=int, choices=[0, 1, 2], help="GPU: which layers' Adam moments stream")
    parser.add_argument("--peak-tflops", type=float, default=60.0, help="GPU: fp32 peak for the bound (H100: ~60)")
    parser.add_argument("--summary", help="GPU: also write the table to this file")
    parser.add_argument("--engine", choices=["persistent", "cuda"], default="persistent",
                        help="GPU: the engine timed against the peer (cuda: NVRTC's kernel; a learner the peer lacks runs alone)")
    parser.add_argument("--results", help="GPU: append each row to this file as JSON, as it ends (gpu_figures.py reads it)")
    parser.add_argument("--no-peer", action="store_true", help="GPU: the engine alone (e.g. to compare its knobs)")
    parser.add_argument("--approx", action="store_true", help="GPU: Adam's divisions and roots approximate (KernelConfig.exact)")
    parser.add_argument("--maxnreg", type=int, help="GPU: registers per thread the kernel may use (KernelConfig.maxnreg)")
    parser.add_argument("--workloads", default="linear,nonlinear,emnist", help="comma-separated (default: all three)")
    parser.add_argument("--learners", help="only these learners (default: all of each workload)")
    parser.add_argument("--steps", type=int, help="steps timed (default: " + ", ".join(f"{w} {n:,}" for w, n in STEPS.items()) + ")")
    parser.add_argument("--cores", type=int, default=1, help="project: numba threads; peer: JAX processes")
    parser.add_argument("--dtype", help="float32 and/or float64 (default: both for linear, float32 for the networks)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats per side; the best is kept")
    args = parser.parse_args()
    if args.device == "cuda" or args.dry_run:
        gpu_main(args)
        return
    workloads = parse_list(args.workloads, tuple(PACKS), "workload")
    every = tuple(dict.fromkeys(n for w in workloads for n in LEARNERS[w]))
    learners = parse_list(args.learners, every, "learner") if args.learners else every
    dtypes = parse_list(args.dtype, ("float32", "float64"), "dtype") if args.dtype else None
    for name, value in (("--cores", args.cores), ("--repeats", args.repeats), ("--steps", args.steps or GUARD)):
        if value < 1 or (name == "--steps" and value < GUARD):
            fail(f"{name} must be at least {GUARD if name == '--steps' else 1}, got {value}")
    cpus = pinned_cpus(args.cores)  # before numba, torch or a JAX worker starts a thread
    hw = machine(args.cores)
    print(f"{hw.summary}\njax {jax.__version__}, torch {torch.__version__}, numba {numba.__version__}; {args.cores}"
          f" core(s), CPU {','.join(map(str, cpus))}: project {args.cores} numba thread(s) pinned to them, peer"
          f" {args.cores} JAX process(es), one pinned to each")
    print(f"{'workload':<9} {'learner':<9} {'dtype':<7} {'runs':>4} {'project/s':>9} {'JAX/s':>9} {'ratio':>6}"
          f" {'proj/CPU-s':>10} {'JAX/CPU-s':>9} {'ratio':>6} {'max rel diff':>12}")
    bounds = []
    with tempfile.TemporaryDirectory(prefix="peer-jax-") as tmp:
        data_dir = emnist_dir(Path(tmp)) if "emnist" in workloads else ""
        for workload in workloads:
            steps = args.steps or STEPS[workload]
            for dtype in dtypes or (["float32", "float64"] if workload == "linear" else ["float32"]):
                for learner in (n for n in LEARNERS[workload] if n in learners):
                    torch_dtype = getattr(torch, dtype)
                    case = (linear_case(learner, steps, torch_dtype) if workload == "linear"
                            else neural_case(workload, learner, steps, torch_dtype, data_dir))
                    r = compare(case, steps, cpus, args.repeats, Path(tmp))
                    runs = int(np.prod(PACKS[workload]))
                    print(f"{workload:<9} {learner:<9} {dtype:<7} {runs:>4} {si(r['project']):>9} {si(r['peer']):>9}"
                          f" {r['project'] / r['peer']:>5.2f}x {si(r['project_cpu']):>10} {si(r['peer_cpu']):>9}"
                          f" {r['project_cpu'] / r['peer_cpu']:>5.2f}x {r['diff']:>12.1e}", flush=True)
                    bounds.append(Bound(f"{workload} {learner} {dtype}", r["flops"], r["exp"], case.state_bytes,
                                        case.input_bytes, runs, torch_dtype.itemsize, r["project_cpu"], r["peer_cpu"],
                                        None if workload == "linear" else
                                        update_cap(learner, case.meta["parameters"], case.meta["head"])))
    print("\nratio: project / JAX (> 1: the project is faster). Rates in run-steps per second.\n")
    hw.report(bounds)


if __name__ == "__main__":
    main()
