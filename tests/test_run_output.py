"""What `fade-sweep run` prints: no Ray / Tune banners or hints that do not apply, one
throughput (the bar, the "Done" line and `fade-sweep status` agree), a labelled elapsed time."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sweeps.cli import main

ROOT = Path(__file__).resolve().parents[1]
SWEEP = {
    "name": "quiet",
    "task": "linear_tracking",
    "task_settings": {"steps": 4000, "bin": 1000},
    "seeds": 2,
    "optimizers": {"sgd": {"alpha": [0.1, 0.01]}, "fade": {"alpha": 0.1, "theta_lambda": [0, 0.01], "gamma0": -2.3}},
}
BANNERS = ("Token authentication is enabled", "Configuration for experiment", "View detailed results",
           "tensorboard", "TensorBoard", "Tune overhead")


def test_run_output_is_quiet_and_has_one_throughput(tmp_path, capsys):
    """Not a terminal (captured): progress lines (start, each pack written, every minute, the end) with the
    numbers `status` shows, none per step; their last rate is the Done line's and status's."""
    sweep = tmp_path / "quiet.yaml"
    sweep.write_text(yaml.safe_dump(SWEEP))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # a process of its own: Ray starts there (and stops with it), as for a user
    done = subprocess.run([sys.executable, "-m", "sweeps.cli", "run", str(sweep), "--storage", str(tmp_path / "store"),
                           "--num-cpus", "1", "--no-report"], capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert not [b for b in BANNERS if b in output], output
    rates = re.findall(r"([\d.]+[KM]) run-steps/s", output)
    progress = re.findall(r"^\[(\d+) s\] (\w+): packs (\d+) done, \d+ running, (\d+) failed, \d+ pending; "
                          r"run-steps [\d.e+]+ of [\d.e+]+ \(([\d.]+)%\), ([\d.]+[KM]) run-steps/s", output, re.MULTILINE)
    assert [p[2] for p in progress if p[1] == "running" and p[2] != "0"] == ["1", "2"], output  # a line per pack written
    assert len(progress) <= 4 + int(progress[-1][0]) // 60, output  # start, 2 packs, the end, one a minute: no more
    assert progress[-1][1:5] == ("finished", "2", "0", "100.0"), output
    line = re.search(r"Done: 2 packs, .* s wall \(Ray start [\d.]+ s, packs [\d.]+ s\); ([\d.]+[KM]) run-steps/s while packs ran",
                     output)
    assert line and line.group(1) == progress[-1][5], output
    assert main(["status", str(tmp_path / "store" / "quiet")]) == 0
    status = re.search(r"\(100\.0%\), ([\d.]+[KM]) run-steps/s", capsys.readouterr().out)
    assert status and status.group(1) == progress[-1][5]
    assert set(rates[-2:]) == {progress[-1][5]}  # the last progress line and Done: one throughput


def test_dry_run_hands_packs_to_the_least_loaded_slot():
    from sweeps.plan.packing import makespan

    assert makespan([10, 6, 5, 4], 2) == 14  # 10 | 6, then 5 -> 11, then 4 -> the 10: 14
    assert makespan([3.0], 4) == 3.0 and makespan([2, 2, 2], 1) == 6


def test_dry_run_says_when_the_machine_is_loaded(monkeypatch):
    """Under load the estimate is not silently wrong: it says the machine is loaded (load average per CPU)."""
    from sweeps.cli import text

    monkeypatch.setattr(text.os, "getloadavg", lambda: (1.5, 1.0, 1.0))
    assert text.load_note(2) is None  # below one runnable process per CPU: quiet
    monkeypatch.setattr(text.os, "getloadavg", lambda: (17.9, 12.0, 8.0))
    note = text.load_note(2)
    assert note and "loaded (load average 17.9 on 2 CPUs)" in note
    monkeypatch.setattr(text.os, "getloadavg", lambda: (8.0, 8.0, 8.0))
    scaled = text.load_note(2, calibrated=False, quiet_seconds=12.0, packs_at_once=2)  # the quiet estimate, scaled
    assert ": at this load, about 60 s (x5.0: the load and the run's 2 packs at once sharing 2 CPUs)" in scaled, scaled


def test_dry_run_warns_when_num_cpus_exceeds_the_machine(monkeypatch, capsys):
    """16 declared CPUs on a 2-core machine (embedded Ray): one line says the estimate assumes 16 real cores."""
    from sweeps.cli import text

    monkeypatch.setattr(text.os, "cpu_count", lambda: 2)
    assert text.oversubscribed_note(2) is None and text.oversubscribed_note(1.5) is None
    assert main(["run", "linear-demo", "--dry-run", "--num-cpus", "16"]) == 0
    out = capsys.readouterr().out
    warned = [line for line in out.splitlines() if "declares" in line]
    assert len(warned) == 1 and "--num-cpus declares 16 CPUs but this machine has 2" in warned[0], out
    assert "assumes 16 real cores" in warned[0]


def test_a_resumed_dry_run_plans_only_what_the_store_lacks(tmp_path, capsys):
    """`--resume --dry-run` plans the runs a resume would run: those the store lacks, or says nothing is left."""
    from tests.helpers import write_known_store

    document = {"name": "dr", "task": "linear_tracking", "task_settings": {"steps": 2000, "bin": 1000}, "seeds": 3,
                "optimizers": {"sgd": {"alpha": [0.1, 0.2]}}}
    sweep_file = tmp_path / "dr.yaml"
    sweep_file.write_text(yaml.safe_dump(document))
    write_known_store(tmp_path / "dr", document, {("sgd", (0.1,)): [1.0, 1.1, 1.2]})  # alpha 0.2: not run yet
    assert main(["run", str(sweep_file), "--storage", str(tmp_path), "--resume", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert " packs, 3 runs, 6.000e+03 run-steps (3 runs already in the store);" in out, out
    write_known_store(tmp_path / "dr", document, {("sgd", (0.2,)): [1.0, 1.1, 1.2]})
    assert main(["run", str(sweep_file), "--storage", str(tmp_path), "--resume", "--dry-run"]) == 0
    assert "Nothing to run: every (config, seed) already has a score." in capsys.readouterr().out


def test_a_real_run_on_more_declared_cpus_than_cores_says_so_before_ray(monkeypatch, capsys, tmp_path):
    """Not only the dry run: a run that declares more CPUs than the machine has says so in one line, then runs
    (here refused later, by a storage that is a file, before Ray: the line comes first)."""
    from sweeps.cli import text

    monkeypatch.setattr(text.os, "cpu_count", lambda: 2)
    storage = tmp_path / "a-file"
    storage.write_text("")
    main(["run", "linear-demo", "--num-cpus", "16", "--storage", str(storage)])
    assert "--num-cpus declares 16 CPUs but this machine has 2" in capsys.readouterr().out


def test_a_dry_run_s_wall_time_is_the_sum_of_the_parts_it_lists(tmp_path, capsys):
    """A long stream in short chunks: the per-chunk reports and checkpoints dominate, and the estimate lists them:
    the wall time is the command + Ray's start + Tune's actors' start + a worker's start + its streams + the packs'
    time over the slots, and
    the packs' time is the time column's over the 2 slots (2 equal packs)."""
    document = {"name": "long", "task": "linear_tracking", "task_settings": {"steps": 10**13, "bin": 10**9}, "seeds": 2,
                "optimizers": {"sgd": {"alpha": [0.1, 0.05]}}}
    sweep_file = tmp_path / "long.yaml"
    sweep_file.write_text(yaml.safe_dump(document))
    assert main(["run", str(sweep_file), "--dry-run", "--num-cpus", "2"]) == 0
    out = capsys.readouterr().out
    line = re.search(r"Estimated wall time: (\d+) s .*: the command \(~(\d+) s\), Ray's start \(~(\d+) s\), Tune's trial "
                     r"actors' start \(~(\d+) s\), a worker's start "
                     r"per slot \(~(\d+) s\) and its streams \(~(\d+) s[^)]*\), and the packs' time over the slots, longest first "
                     r"\(~(\d+) s: .*; (\d+) s of the packs' time is their per-chunk reports and checkpoints", out)
    assert line, out
    wall, command, ray, tune, slot, streams, packs, reports = map(int, line.groups())
    assert abs(wall - (command + ray + tune + slot + streams + packs)) <= 3, out  # each part rounded to a second
    column = int(re.search(r"\n(linear_tracking .*) (\d+)s\n", out).group(2))
    assert abs(column / 2 - packs) <= 1 and reports > column / 2, out


def test_a_dry_run_adds_the_compile_time_of_kernels_numba_s_cache_lacks(tmp_path, monkeypatch, capsys):
    """A linear learner whose kernel numba's cache lacks (or holds older than the kernel's source) is compiled by its
    first pack: the dry run names it and adds its compile time; a fresh cache file (numba's own layout under
    NUMBA_CACHE_DIR) takes it off the list. No numba is imported to know it."""
    import hashlib
    import os

    import fade_core
    from sweeps.packs.dryrun import COMPILE_FIRST_SECONDS, COMPILE_LEARNER_SECONDS, cold_kernels, estimate
    from sweeps.spec import PackResources, resolve_sweep

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    sweep = resolve_sweep("linear-demo")
    assert cold_kernels(sweep.experiments, "float32") == ("fade", "fade_idbd", "idbd", "sgd", "sgd_wd")
    source = os.path.join(os.path.dirname(os.path.abspath(fade_core.__file__)), "linear")
    cache = tmp_path / f"linear_{hashlib.sha1(source.encode()).hexdigest()}"
    cache.mkdir()
    (cache / "kernel.run_blocks_sgd_float32_1_d5a63a8ce3da-59.py311.nbi").write_text("")
    stale = cache / "kernel.run_blocks_fade_float32_3_14a14f3d06eb-59.py311.nbi"
    stale.write_text("")
    os.utime(stale, (0, 0))  # older than kernel.py: numba compiles it again
    cold = cold_kernels(sweep.experiments, "float32")
    assert cold == ("fade", "fade_idbd", "idbd", "sgd_wd") and "sgd" in cold_kernels(sweep.experiments, "float64")
    assert cold_kernels(sweep.experiments, "float32", engine="reference") == ()  # not the kernels of the "cpu" engine
    plan = estimate(sweep, 2, PackResources(1, 0), None, "float32")
    assert plan.cold == cold and plan.compile_seconds == COMPILE_FIRST_SECONDS + 2 * COMPILE_LEARNER_SECONDS
    assert plan.wall_seconds == pytest.approx(plan.fixed_seconds + plan.packs_seconds)
    assert main(["run", "linear-demo", "--dry-run", "--num-cpus", "2"]) == 0
    assert "the linear kernels of fade, fade_idbd, idbd, sgd_wd compiled by their first packs" in capsys.readouterr().out


def test_streams_a_worker_cannot_keep_are_drawn_by_every_pack(monkeypatch):
    """A 2M-step linear stream of one seed is 336 MB: ten seeds do not fit a worker's cache of 512 MiB, so each pack
    draws its own seeds' streams (their seconds in its time, none per slot); with a cache that holds them all the
    node's two slots draw each stream once between them and their packs read them."""
    from sweeps.packs.dryrun import STREAM_RATES, estimate, streams_fit
    from sweeps.spec import PackResources, parse_sweep

    document = {"name": "long", "task": "linear_tracking", "task_settings": {"steps": 2_000_000, "bin": 200_000},
                "seeds": 10, "optimizers": {"sgd": {"alpha": [0.1, 0.05]}}}
    sweep = parse_sweep(document, "test")
    monkeypatch.setenv("FADE_STREAM_CACHE_MB", "512")
    apart = estimate(sweep, 2, PackResources(1, 0), None, "float32")
    assert not streams_fit(sweep) and apart.streams_per_pack and apart.stream_seconds == 0
    monkeypatch.setenv("FADE_STREAM_CACHE_MB", "8192")
    kept = estimate(sweep, 2, PackResources(1, 0), None, "float32")
    draw = 10 * 2_000_000 / STREAM_RATES["linear_tracking"]  # the ten seeds' streams, once
    assert streams_fit(sweep) and not kept.streams_per_pack and kept.stream_seconds == pytest.approx(draw / 2)
    # every seed is in one pack (seeds apart): the packs draw the ten seeds once between them
    assert sum(r.seconds for r in apart.rows) - sum(r.seconds for r in kept.rows) == pytest.approx(draw)


def test_the_stream_cache_takes_a_third_of_the_memory_over_the_cpus_by_default(monkeypatch):
    """Unset, a worker's stream cache is a third of the machine's memory over its CPUs (a worker per CPU), at least
    512 MiB: ten 2M-step linear seeds (3.4 GB) fit a worker of a 24 GiB, 2-CPU machine; a variable set wins."""
    import tasks.stream_cache as stream

    monkeypatch.delenv("FADE_STREAM_CACHE_MB", raising=False)
    monkeypatch.setattr(stream.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(stream, "memory_bytes", lambda: 24 * 2**30)
    assert stream.stream_cache_budget() == 4 * 2**30 > 10 * 2_000_000 * 21 * 8
    monkeypatch.setattr(stream, "memory_bytes", lambda: 0)  # the system does not say
    assert stream.stream_cache_budget() == 512 * 2**20
    monkeypatch.setenv("FADE_STREAM_CACHE_MB", "64")
    assert stream.stream_cache_budget() == 64 * 2**20
