"""benchmarks/gpu_check.sh without a GPU: the dry run's plan (every step's command and limit, inside its part's
budget), the summary written as steps end and printed last, then the figures as NAME<TAB>VALUE lines; on a
CPU the GPU steps are skipped with the reason; a step that overruns is cut at its part's budget and leaves
no process behind, the rows before it kept. And benchmarks/gpu_figures.py's figures from rate rows."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
FIGURES = ["nonlinear_fade_sgd_best", "nonlinear_fade_sgd_jax_ratio_min", "nonlinear_sgd_best", "nonlinear_adam_best",
           "nonlinear_adam_jax_ratio_min", "nonlinear_fade_adam_best", "nonlinear_sweep_same"]
sys.path.insert(0, str(ROOT / "benchmarks"))
EMNIST_FIGURES = ["emnist_fade_sgd_best", "emnist_fade_sgd_100", "emnist_fade_sgd_jax_ratio_min", "emnist_adam_best",
                  "emnist_adam_jax_ratio_min", "emnist_fade_adam_best", "emnist_sweep_same"]

import gpu_figures  # noqa: E402


def _check(tmp_path: Path, *args: str, figure_names: list[str] = FIGURES, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    out = tmp_path / "out"
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH", "HOME", "VIRTUAL_ENV")}
    done = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=300,
                          env={**keep, "PYTHON": sys.executable, "OUT": str(out),
                               "FADE_GPU_BUNDLE": str(tmp_path / "no-bundle"), **env})
    summary = (out / "summary.txt").read_text().splitlines()
    assert (out / "gpu_check_logs.tar.gz").is_file()
    # the summary (its steps' lines, then the figures) is the last thing printed
    assert done.stdout.rstrip("\n").splitlines()[-len(summary):] == summary, done.stdout[-2000:]
    figures = (out / "figures.tsv").read_text().splitlines()
    assert summary[-len(figures):] == figures and [f.split("\t")[0] for f in figures] == figure_names
    return done, summary


def _rows(summary: list[str]) -> list[tuple[str, str]]:
    return [(line.split("|")[0].strip(), line.split("|", 1)[1].strip()) for line in summary if "|" in line]


def test_a_dry_run_plans_every_step_inside_its_parts_budget(tmp_path):
    done, summary = _check(tmp_path, "--dry-run", figure_names=FIGURES + EMNIST_FIGURES, GPU_CHECK_NONLINEAR_S="100")
    assert done.returncode == 0, done.stderr
    rows = _rows(summary)
    plans = [(name, text) for name, text in rows if text.startswith("would run")]
    emnist = ["emnist.compile", "emnist.tests", "emnist.bench"] + ["emnist.sweep"] * 3
    assert [name for name, _ in plans] == ["nonlinear.tests", "nonlinear.bench"] + ["nonlinear.sweep"] * 3 + emnist + ["triton.tests"]
    assert "tests/test_cuda_engine.py" in plans[0][1] and "--engine cuda --runs 240,4000,1000" in plans[1][1]
    assert "--gpus-per-pack 1 --engine cuda" in plans[3][1] and "compare_stores.py" in plans[4][1]
    limits = [int(re.match(r"would run \((\d+) s\)", text).group(1)) for _, text in plans]
    assert all(limit <= 100 for limit in limits[:5]) and limits[:2] == [65, 70]  # each cut to the part's budget
    assert sum(limits[5:11]) <= 160 and "tests/test_emnist_kernel.py" in plans[6][1]  # the EMNIST part's own budget
    assert "bench_gpu_packs.py --engine cuda" in plans[7][1] and "--layouts 2000x1,100x1" in plans[7][1]
    assert "--gpus-per-pack 1 --engine cuda" in plans[9][1] and "emnist-check" in plans[10][1]
    assert limits[11] == 120 and "-n 8 tests/test_triton.py" in plans[11][1] and "tests/test_persistent.py" in plans[11][1]
    assert all(line.endswith("\tnot measured") for line in summary[-len(FIGURES + EMNIST_FIGURES):])


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the GPU steps run")
def test_on_a_cpu_the_gpu_steps_are_skipped_and_an_overrunning_step_is_cut_with_its_processes(tmp_path):
    pid_file = tmp_path / "sleeper.pid"
    emnist = tmp_path / "emnist.sh"  # a stand-in for issue 40's steps: one that ends, one that overruns
    emnist.write_text(f"""step emnist.quick 30 true; note emnist.quick "$(verdict emnist.quick $? done)"
step emnist.slow 100 bash -c 'sleep 60 & echo $! > {pid_file}; wait'; note emnist.slow "$(verdict emnist.slow $? slow)"
""")
    began = time.monotonic()
    done, summary = _check(tmp_path, "nonlinear.tests", "emnist", GPU_CHECK_EMNIST=str(emnist), GPU_CHECK_EMNIST_S="6")
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - began < 40
    rows = dict(_rows(summary))
    assert rows["nonlinear.tests"] == "skipped: no CUDA GPU here (torch.cuda.is_available() is False)"
    assert "nonlinear.bench" not in rows  # only what was asked for
    assert rows["emnist.quick"] == "ok, done" and rows["emnist.slow"].startswith("CUT at its limit")
    pid = int(pid_file.read_text())
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()


def test_an_unknown_part_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run(["bash", str(SCRIPT), "benchmark"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == ("gpu_check.sh: unknown part or step 'benchmark'; choose from: nonlinear emnist triton "
                                   "nonlinear.tests nonlinear.bench nonlinear.sweep emnist.compile emnist.tests emnist.bench "
                                   "emnist.sweep triton.tests (and --dry-run)")


def test_the_figures_come_from_the_rows_and_say_not_measured_without_them(tmp_path):
    results = tmp_path / "rates.jsonl"
    rows = [("fade_sgd", 240, 60e6, 10e6), ("fade_sgd", 1000, 90e6, 12e6), ("fade_sgd", 4000, 110e6, 11e6),
            ("adam", 240, 25e6, 5e6), ("adam", 1000, 30e6, 6e6), ("sgd", 4000, 200e6, None)]
    lines = [json.dumps({"engine": "cuda", "learner": l, "runs": r, "engine_rate": e, "jax_rate": j, "max_rel_diff": 1e-6})
             for l, r, e, j in rows]
    lines += [json.dumps({"engine": "persistent", "learner": "fade_adam", "runs": 240, "engine_rate": 9e9, "jax_rate": 1.0}),
              '{"engine": "cuda", "learner": "fade_ad']  # another engine's row; a row cut while written
    results.write_text("\n".join(lines) + "\n")
    figures = dict(gpu_figures.nonlinear(results, "yes"))
    assert figures == {"nonlinear_fade_sgd_best": "1.1e+08", "nonlinear_fade_sgd_jax_ratio_min": "6",
                       "nonlinear_sgd_best": "2e+08", "nonlinear_adam_best": "3e+07",
                       "nonlinear_adam_jax_ratio_min": "not measured",  # no 4,000-run row
                       "nonlinear_fade_adam_best": "not measured", "nonlinear_sweep_same": "yes"}
    assert set(dict(gpu_figures.nonlinear(tmp_path / "none.jsonl", "missing")).values()) == {"not measured"}


def test_the_emnist_figures_take_2000_runs_as_best_and_the_100_and_2000_run_ratios(tmp_path):
    results = tmp_path / "emnist.jsonl"
    rows = [("fade_sgd", 2000, 1.3e6, 0.4e6), ("fade_sgd", 100, 1.1e6, 0.7e6), ("adam", 2000, 0.45e6, 0.2e6),
            ("adam", 100, 0.3e6, None), ("fade_adam", 2000, 0.43e6, 0.2e6)]
    results.write_text("\n".join(json.dumps({"engine": "cuda", "learner": l, "runs": r, "engine_rate": e, "jax_rate": j})
                                  for l, r, e, j in rows) + "\n")
    figures = dict(gpu_figures.emnist(results, "no"))
    assert figures == {"emnist_fade_sgd_best": "1.3e+06", "emnist_fade_sgd_100": "1.1e+06",
                       "emnist_fade_sgd_jax_ratio_min": "1.57", "emnist_adam_best": "4.5e+05",
                       "emnist_adam_jax_ratio_min": "not measured",  # no peer at 100 runs
                       "emnist_fade_adam_best": "4.3e+05", "emnist_sweep_same": "no"}
