"""Bad sweep files: one clear line naming the file and key, exit code 2, nothing written."""

import random
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from sweeps.cli import main
from sweeps.cli.parser import build_parser
from sweeps.spec import SweepError, load_sweep, parse_sweep, preset_names
from sweeps.spec.sweep import MAX_CURVE_ROWS, MAX_RUN_BINS, MAX_RUN_STEPS, MAX_RUNS

ROOT = Path(__file__).resolve().parents[1]

GOOD = {
    "name": "ok",
    "task": "linear_tracking",
    "task_settings": {"steps": 100},
    "seeds": 2,
    "optimizers": {"fade": {"alpha": [0.1], "theta_lambda": 0.01, "gamma0": [-1.2]}},
}


def _with(**changes):
    doc = yaml.safe_load(yaml.safe_dump(GOOD))
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = doc
        for p in parents:
            node = node[p]
        if value is None:
            del node[leaf]
        else:
            node[leaf] = value
    return doc


CASES = [
    (_with(colour="red"), "colour: unknown key; allowed keys are"),
    (_with(optimizers={"adam": {"alpha": 0.1}}), "optimizers.adam: unknown optimizer for task linear_tracking; choose one of sgd"),
    (_with(optimizers__fade__theta=0.1), "optimizers.fade.theta: fade does not take theta; it takes alpha, theta_lambda, gamma0"),
    (_with(optimizers__fade__gamma0=None), "optimizers.fade: missing hyperparameter(s) gamma0"),
    # a misspelt hyperparameter is missing under its name and unknown under the typo: the typo is named
    (_with(optimizers={"fade": {"alpha": [0.1], "theta_lamda": 0.01, "gamma0": [-1.2]}}),
     "optimizers.fade.theta_lamda: fade does not take theta_lamda; it takes alpha, theta_lambda, gamma0"),
    (_with(variants=[{"optimizers": {"sgd": {"alpah": 0.1}}}]),
     "variants[0].optimizers.sgd.alpah: sgd does not take alpah; it takes alpha"),
    (_with(optimizers__fade__alpha=[-0.1]), "optimizers.fade.alpha: -0.1 is out of range; alpha (step size) must be > 0"),
    (_with(optimizers__fade__alpha="fast"), "optimizers.fade.alpha: 'fast' is not a number; alpha (step size) must be > 0"),
    (_with(seeds=0), "seeds: must be a positive int"),
    (_with(task="cartpole"), "task: unknown task 'cartpole'; choose one of linear_tracking"),
    (_with(task_settings={"noise": -1}), "task_settings: linear_tracking: noise must be >= 0, got -1"),
    (_with(seeds=[0, 10**23]), "seeds: must be a positive int n (seeds 0..n-1) or a list of distinct ints in 0..2**63-1"),
    (_with(task_settings={"period": 0}), "task_settings: linear_tracking: period must be positive, got 0"),
    (_with(task_settings={"nosie": 1}), "task_settings: unknown setting(s) nosie for task linear_tracking; allowed: noise"),
    (_with(task_settings={"steps": 10.5}), "task_settings: setting steps of task linear_tracking must be a whole number"),
    (_with(task_settings={"steps": float("inf")}), "task_settings: setting steps of task linear_tracking must be a int, got inf"),
    (_with(task_settings={"bin": float("-inf")}), "task_settings: setting bin of task linear_tracking must be a int, got -inf"),
    (_with(task_settings={"steps": float("nan")}), "task_settings: setting steps of task linear_tracking must be a int, got nan"),
    (_with(task_settings={"steps": 2000, "bin": 300}),
     "task_settings: linear_tracking: bin 300 does not divide steps 2000 (the last bin would hold 200 steps); "
     "choose a bin that divides it, e.g. 250"),
    (_with(name="../escape"), "name: must be a directory-safe name"),
    (_with(variants=[{"optimizers": {"sgd": {"alpha": 0.1}}, "learning": 1}]), "variants[0].learning: unknown key"),
    (_with(resources={"gpus_per_pack": 0.5}), "resources.gpus_per_pack: linear_tracking runs on CPUs only"),
    (_with(resources={"cpus_per_pack": 0}), "resources.cpus_per_pack: must be a number > 0"),
    # linear weight decay is w <- (1 - lambda) w: lambda > 1 flips the sign of w
    (
        _with(optimizers={"sgd_wd": {"alpha": 0.1, "lambda": [0.01, 1.5]}}),
        "optimizers.sgd_wd.lambda: 1.5 is out of range; lambda (fixed weight decay) must be in [0, 1] for linear "
        "sgd_wd (the linear rule w <- (1 - lambda) w flips the sign of w for lambda > 1)",
    ),
    (
        _with(optimizers={"idbd_wd": {"theta_alpha": 0.01, "beta0": -4.6, "lambda": 2}}),
        "optimizers.idbd_wd.lambda: 2 is out of range; lambda (fixed weight decay) must be in [0, 1] for linear idbd_wd",
    ),
    (_with(optimizers={"sgd_wd": {"alpha": 0.1, "lambda": -0.1}}), "lambda (fixed weight decay) must be in [0, 1]"),
    # the shape of each block, as the pydantic models of sweeps/spec/document.py word it
    (_with(optimizers={"foo": {"alpha": 0.1}}), "optimizers.foo: unknown optimizer; linear tasks take sgd, sgd_wd"),
    (_with(optimizers={}), "optimizers: must be a non-empty mapping of optimizer name -> {hyperparameter: value or list}"),
    (_with(optimizers={"sgd": None}), "optimizers.sgd: must be a mapping of hyperparameter -> value or list; sgd takes alpha"),
    (_with(optimizers={"sgd": {"alpha": []}}), "optimizers.sgd.alpha: empty list; give at least one value"),
    (_with(optimizers={"sgd": {"alpha": [0.1, 0.1]}}), "optimizers.sgd.alpha: repeated value in the list"),
    (_with(variants=[]), "variants: must be a non-empty list of mappings with keys task, task_settings, optimizers, engine"),
    (_with(variants={"task": "linear_tracking"}), "variants: must be a non-empty list of mappings with keys task"),
    (_with(confirm={}), "confirm: must be a mapping {seeds: N} (N fresh seeds) or {seeds: [s, ...]}"),
    (_with(race={"rounds": 3}), "race.rounds: unknown key; allowed keys are min_seeds, max_seeds, alpha, seeds_per_round"),
    (_with(engine="gpu"), "engine: engine 'gpu' is unknown; engines are reference, cpu"),
    (_with(name=None), "name: missing; a sweep file needs it"),
    (_with(task=None), "task: missing; choose one of linear_tracking"),
    (_with(optimizers={"sgd": {"alpha": 0.1, 1: 0.5}}), "optimizers.sgd.1: sgd does not take 1; it takes alpha"),
]


@pytest.mark.parametrize("doc, message", CASES, ids=[c[1].split(":")[0] for c in CASES])
def test_bad_sweep_file(tmp_path, capsys, doc, message):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump(doc))
    storage = tmp_path / "results"
    assert main(["run", str(sweep), "--storage", str(storage)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    assert err.startswith(f"fade-sweep: error: {sweep}: "), err
    assert message in err, err
    assert not storage.exists()


def test_malformed_yaml_and_missing_file(tmp_path, capsys):
    sweep = tmp_path / "broken.yaml"
    sweep.write_text("name: x\noptimizers: {sgd: [\n")
    assert main(["run", str(sweep), "--storage", str(tmp_path / "r")]) == 2
    assert "broken.yaml: not valid YAML at line" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml: no such sweep file" in capsys.readouterr().err
    assert main(["run", "no-such-preset"]) == 2
    assert "neither a sweep file nor a preset; presets are emnist, emnist-best" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_every_preset_is_valid_and_sized(capsys):
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"linear-noise0\s+4,640\s+9\.280e\+08", out)  # 464 configs x 10 seeds x 200,000 steps
    assert re.search(r"linear-noise1\s+4,700\s+9\.400e\+08", out)
    assert "linear-best" in out and "linear-demo" in out
    # grids.md: nonlinear 164 configs x 5 seeds x 2M steps; EMNIST 320 configs x 5 seeds x 5M steps
    assert re.search(r"nonlinear\s+820\s+1\.640e\+09", out)
    assert re.search(r"emnist\s+1,600\s+8\.000e\+09", out)
    assert re.search(r"emnist-sensitivity\s+320\s+1\.600e\+09", out)  # 2 x 16 cells x 2 variants x 5 seeds
    # descriptions are whole sentences, wrapped under their column, never cut mid-sentence
    rows = re.split(r"\n(?=\S)", out.strip())[1:]
    assert len(rows) == len(preset_names())
    for row in rows:
        assert row.endswith("."), row
        assert all(line.startswith(" " * 45) for line in row.splitlines()[1:]), row


def _run_cli_on(tmp_path, capsys, text: str | bytes) -> str:
    """`fade-sweep run` on a file with this content: exit 2, one line, nothing written; the line."""
    sweep = tmp_path / "sweep.yaml"
    if isinstance(text, bytes):
        sweep.write_bytes(text)
    else:
        sweep.write_text(textwrap.dedent(text))
    storage = tmp_path / "results"
    assert main(["run", str(sweep), "--storage", str(storage)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    assert err.startswith(f"fade-sweep: error: {sweep}: "), err
    assert not storage.exists()
    return err


def test_yaml_1_2_numbers_are_floats(tmp_path):
    # PyYAML alone (YAML 1.1) reads 1e-2 and -1e3 as strings, which then fail validation.
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        "name: floats\ntask: linear_tracking\ntask_settings: {steps: 100, noise: 1e-1}\nseeds: 1\n"
        "optimizers:\n  sgd: {alpha: [1e-2, 5e-4]}\n  fade: {alpha: 1E-1, theta_lambda: +1e-3, gamma0: [-1e3, -.5]}\n"
    )
    loaded = load_sweep(sweep)
    grids = {e.optimizer: dict(e.grid) for e in loaded.experiments}
    assert grids["sgd"]["alpha"] == (0.01, 0.0005)
    assert grids["fade"] == {"alpha": (0.1,), "theta_lambda": (0.001,), "gamma0": (-1000.0, -0.5)}
    assert loaded.experiments[0].settings.noise == 0.1
    assert all(type(v) is float for g in grids.values() for values in g.values() for v in values)
    assert loaded.document["seeds"] == 1 and type(loaded.document["seeds"]) is int  # ints stay ints


DUPLICATES = [
    (
        """\
        name: dup
        task: linear_tracking
        optimizers:
          sgd: {alpha: [0.1]}
          fade: {alpha: 0.1, theta_lambda: 0.01, gamma0: -1.2}
          sgd: {alpha: [0.5]}
        """,
        "optimizers.sgd: duplicate key at line 6 (first at line 4)",
    ),
    ("name: dup\ntask: linear_tracking\nseeds: 2\nseeds: 3\noptimizers: {sgd: {alpha: 0.1}}\n", "seeds: duplicate key at line 4 (first at line 3)"),
    ("name: dup\ntask: linear_tracking\noptimizers:\n  sgd: {alpha: 0.1, alpha: 0.2}\n", "optimizers.sgd.alpha: duplicate key at line 4 (first at line 4)"),
    (
        """\
        name: dup
        task: linear_tracking
        optimizers: {sgd: {alpha: 0.1}}
        variants:
          - task_settings: {noise: 0.0}
          - task_settings:
              noise: 1.0
              noise: 2.0
        """,
        "variants[1].task_settings.noise: duplicate key at line 8 (first at line 7)",
    ),
]


@pytest.mark.parametrize("text, message", DUPLICATES, ids=["optimizer", "top-level", "hyperparameter", "in-variant"])
def test_duplicate_keys_are_errors(tmp_path, capsys, text, message):
    err = _run_cli_on(tmp_path, capsys, text)
    assert message in err, err
    assert "merge them into one entry" in err


def test_binary_and_non_utf8_files(tmp_path, capsys):
    noise = bytes(random.Random(0).getrandbits(8) for _ in range(4096)) + b"\xff\xfe"
    err = _run_cli_on(tmp_path, capsys, noise)
    assert "not UTF-8 text (byte 0x" in err and "save the sweep file as UTF-8" in err, err
    err = _run_cli_on(tmp_path, capsys, "name: utf16\ntask: linear_tracking\n".encode("utf-16"))
    assert "not UTF-8 text (byte 0xff at offset 0); it looks like UTF-16; save it as UTF-8" in err, err
    err = _run_cli_on(tmp_path, capsys, b"name: x\x00\ntask: linear_tracking\n")
    assert "not valid YAML at line 1: control character U+0000 is not allowed" in err, err
    # a UTF-8 byte-order mark is fine
    (tmp_path / "bom.yaml").write_bytes(b"\xef\xbb\xbf" + yaml.safe_dump(GOOD).encode())
    assert load_sweep(tmp_path / "bom.yaml").runs == 2


_HUGE_SEEDS = """
import resource, sys, time
from sweeps.cli import main
# Memory-safe even if the check regresses: building a billion seeds then fails with MemoryError (exit 1).
vm = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize")).split()[1]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + 2**30, resource.getrlimit(resource.RLIMIT_AS)[1]))
start = time.perf_counter()
code = main(["run", sys.argv[1], "--storage", sys.argv[2]])
print(f"{time.perf_counter() - start:.3f}")
sys.exit(code)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc to cap memory")
def test_huge_seed_count_fails_fast_without_allocating(tmp_path):
    sweep = tmp_path / "huge.yaml"
    sweep.write_text("name: huge\ntask: linear_tracking\nseeds: 1000000000\noptimizers:\n  sgd: {alpha: [0.5, 0.1, 0.05, 0.01]}\n")
    storage = tmp_path / "results"
    done = subprocess.run([sys.executable, "-c", _HUGE_SEEDS, str(sweep), str(storage)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    err = done.stderr.strip()
    assert done.returncode == 2, err
    assert err == (
        f"fade-sweep: error: {sweep}: seeds: 1,000,000,000 seeds x 4 configs = 4.0e9 runs, more than the limit of "
        "10,000,000 runs (sweeps.spec.sweep.MAX_RUNS); use fewer seeds or smaller grids"
    )
    assert float(done.stdout) < 0.5  # parse and refuse; no per-run structure was built
    assert not storage.exists()


def _sized(steps: int, bin_steps: int, seeds, alphas: int) -> dict:
    doc = _with(task_settings={"steps": steps, "bin": bin_steps}, seeds=seeds)
    doc["optimizers"] = {"sgd": {"alpha": [0.01 * (i + 1) for i in range(alphas)]}}
    return doc


def test_size_limits_are_checked_from_counts():
    start = time.perf_counter()
    # a large grid: 40 x 40 x 40 cells of fade x 10,000 seeds
    axis = [0.001 * (i + 1) for i in range(40)]
    doc = _with(seeds=10_000, optimizers={"fade": {"alpha": axis, "theta_lambda": axis, "gamma0": [-a for a in axis]}})
    runs = "x: optimizers: 10,000 seeds x 64,000 configs = 6.4e8 runs, more than the limit of 10,000,000 runs"
    with pytest.raises(SweepError, match="^" + re.escape(runs)):
        parse_sweep(doc, "x")
    steps = "x: task_settings.steps: 100 seeds x 4 configs x steps = 4.0e16 run-steps, more than the limit of 1e15"
    with pytest.raises(SweepError, match="^" + re.escape(steps)):
        parse_sweep(_sized(10**14, 10**14, 100, 4), "x")
    rows = (
        "x: task_settings: steps / bin = 1.0e7 bins per run x 100 seeds x 4 configs = 4.0e9 curve rows (about 400 GB in "
        "the store), more than the limit of 2,000,000,000 rows (sweeps.spec.sweep.MAX_CURVE_ROWS); raise bin or lower steps"
    )
    with pytest.raises(SweepError, match="^" + re.escape(rows)):
        parse_sweep(_sized(10**7, 1, 100, 4), "x")
    assert time.perf_counter() - start < 1.0
    # an explicit list counts as its length (such a file is bounded by MAX_FILE_BYTES anyway)
    with pytest.raises(SweepError, match=r"seeds: 3,000,000 seeds x 4 configs = 1\.2e7 runs"):
        parse_sweep(_sized(100, 10, list(range(3_000_000)), 4), "x")
    # exactly at a limit is fine, one more is not
    seeds = MAX_CURVE_ROWS // MAX_RUN_BINS
    assert parse_sweep(_sized(MAX_RUN_BINS, 1, seeds, 1), "x").runs == seeds
    with pytest.raises(SweepError, match="curve rows"):
        parse_sweep(_sized(MAX_RUN_BINS, 1, seeds + 1, 1), "x")
    assert parse_sweep(_sized(MAX_RUN_BINS * 10, 10, 1, 1), "x").runs == 1
    one_run = ("x: task_settings: steps / bin = 1.0e7 bins per run, more than the limit of 10,000,000 "
               "(sweeps.spec.sweep.MAX_RUN_BINS: a pack keeps its runs' binned metrics in memory until it ends); raise bin or "
               "lower steps")
    with pytest.raises(SweepError, match="^" + re.escape(one_run)):
        parse_sweep(_sized(MAX_RUN_BINS + 1, 1, 1, 1), "x")  # a run that cannot run: refused at load
    assert parse_sweep(_sized(MAX_RUN_STEPS, 10**8, 1, 1), "x").run_steps == MAX_RUN_STEPS
    with pytest.raises(SweepError, match="run-steps"):
        parse_sweep(_sized(MAX_RUN_STEPS + 1, MAX_RUN_STEPS + 1, 1, 1), "x")  # one bin: a bin that divides the steps
    assert MAX_RUNS == 10_000_000 and MAX_RUN_STEPS == 10**15 and MAX_CURVE_ROWS == 2_000_000_000 and MAX_RUN_BINS == 10**7


def test_weight_decay_range_depends_on_the_learner():
    def neural(optimizer: str, lam: float) -> dict:
        return {
            "name": "n",
            "task": "nonlinear_tracking",
            "task_settings": {"steps": 1000, "score_window": 500, "bin": 100},
            "optimizers": {optimizer: {"alpha": 0.001, "lambda": lam}},
        }

    # AdamW's decoupled decay (lambda = 10 is in the published grid) and neural L2 keep lambda >= 0
    assert dict(parse_sweep(neural("adamw", 10), "x").experiments[0].grid)["lambda"] == (10.0,)
    assert dict(parse_sweep(neural("sgd_wd", 1.5), "x").experiments[0].grid)["lambda"] == (1.5,)
    with pytest.raises(SweepError, match=r"optimizers\.adamw\.lambda: -1 is out of range; lambda \(fixed weight decay\) must be >= 0$"):
        parse_sweep(neural("adamw", -1), "x")
    # linear: [0, 1], both ends included
    linear = parse_sweep(_with(optimizers={"sgd_wd": {"alpha": 0.1, "lambda": [0, 1]}}), "x")
    assert dict(linear.experiments[0].grid)["lambda"] == (0.0, 1.0)


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--max-failures", "-5", "must be an integer >= 0, got -5"),
        ("--checkpoint-every", "-1", "must be an integer >= 0, got -1"),
        ("--gpus-per-pack", "-0.5", "must be a number >= 0, got -0.5"),
        ("--gpus-per-pack", "nan", "must be a number >= 0, got nan"),
        ("--num-cpus", "0", "must be a positive integer, got 0"),
        ("--chunk-steps", "-10", "must be a positive integer, got -10"),
        ("--chunk-steps", "ten", "must be a positive integer, got 'ten'"),
        ("--runs-per-pack", "0", "must be a positive integer, got 0"),
        ("--cpus-per-pack", "0", "must be a positive number, got 0"),
    ],
)
def test_cli_numbers_are_range_checked(tmp_path, capsys, option, value, message):
    with pytest.raises(SystemExit) as exit_:
        main(["run", "linear-demo", "--storage", str(tmp_path / "r"), option, value])
    assert exit_.value.code == 2
    assert f"argument {option}: {message}" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("value", ["abc", "-5", "nan", "inf", ""])
def test_a_bad_stream_cache_size_is_one_line_exit_2_before_ray(tmp_path, capsys, monkeypatch, value):
    monkeypatch.setenv("FADE_STREAM_CACHE_MB", value)
    assert main(["run", "linear-demo", "--storage", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"fade-sweep: error: FADE_STREAM_CACHE_MB={value!r}: give the stream cache's size in MiB,"
                   " a number >= 0 (0 turns it off)"), err
    assert not (tmp_path / "r").exists()


def test_cli_numbers_accept_their_bounds():
    args = build_parser().parse_args(
        ["run", "x", "--max-failures", "0", "--checkpoint-every", "0", "--gpus-per-pack", "0", "--num-cpus", "1",
         "--chunk-steps", "1", "--runs-per-pack", "1", "--cpus-per-pack", "0.5"]
    )
    assert (args.max_failures, args.checkpoint_every, args.gpus_per_pack, args.num_cpus) == (0, 0, 0.0, 1)
    assert (args.chunk_steps, args.runs_per_pack, args.cpus_per_pack) == (1, 1, 0.5)


def test_closed_pipe_ends_quietly():
    """`fade-sweep presets | head -1`: the reader goes away; no traceback, exit 141 like `cat`."""
    cli = subprocess.Popen([sys.executable, "-m", "sweeps.cli", "presets"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    cli.stdout.close()  # the reader closes before the command writes: its writes meet a broken pipe
    err = cli.stderr.read()
    assert cli.wait(timeout=120) == 141, err
    assert err == b""
    # and through a real `head -1`
    shell = subprocess.run(
        f"{sys.executable} -m sweeps.cli presets | head -1", shell=True, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert shell.stdout.startswith("preset ") and shell.stdout.count("\n") == 1
    assert shell.stderr == ""


def test_a_directory_or_a_missing_results_folder_is_named_as_such(tmp_path, capsys):
    assert main(["run", str(tmp_path)]) == 2
    assert "a directory, not a sweep file" in capsys.readouterr().err
    assert main(["status", str(tmp_path / "nowhere")]) == 2  # never taken for a job id without --address
    assert "no such results folder" in capsys.readouterr().err


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_command_printed_after_an_interrupt_resumes_the_same_sweep(dtype):
    """`continue with ...` after Ctrl-C, parsed back: the same sweep, store, cluster and dtype,
    with --resume (without --dtype a float64 sweep would resume as float32)."""
    import shlex

    from sweeps.cli import _interrupted_message

    given = ["run", "linear-demo", "--storage", "/tmp/a store", "--address", "ray://head:10001", "--dtype", dtype]
    message = _interrupted_message(build_parser().parse_args(given), KeyboardInterrupt("interrupted: 3 of 10 packs done"))
    assert message.startswith("interrupted: 3 of 10 packs done; continue with `fade-sweep run ")
    command = shlex.split(message.split("`")[1])
    again = build_parser().parse_args(command[1:])
    assert (again.sweep, again.storage, again.address, again.dtype, again.resume) == (
        "linear-demo", "/tmp/a store", "ray://head:10001", dtype, True)
