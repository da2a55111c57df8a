"""benchmarks/gpu_check.sh without a GPU: a dry run names what each part would run and writes the summary
last (to stdout and summary.txt); on a CPU the CUDA parts are skipped with the reason, and a part that
overruns its seconds budget is cut and reported (here the nonlinear part, a stand-in script)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


def _check(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    out = tmp_path / "out"
    done = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=600,
                          env={"PATH": "/usr/bin:/bin", **{k: v for k, v in __import__("os").environ.items()
                                                          if k in ("PATH", "PYTHONPATH", "HOME", "VIRTUAL_ENV")},
                               "OUT": str(out), "FADE_GPU_BUNDLE": str(tmp_path / "no-bundle"), **env})
    summary = (out / "summary.txt").read_text().splitlines()
    assert (out / "gpu_check_logs.tar.gz").is_file()
    # the summary is the last thing printed
    assert done.stdout.rstrip("\n").splitlines()[-len(summary):] == summary, done.stdout[-2000:]
    return done, summary


def test_a_dry_run_names_every_part_and_ends_with_the_summary(tmp_path):
    done, summary = _check(tmp_path, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert summary[0].startswith("== GPU check summary") and "dry run" in summary[0]
    parts = {line.split("|")[0].strip(): line.split("|", 1)[1] for line in summary[1:]}
    for part in ("tests", "packs", "sweep cpu", "sweep 1", "sweep 0.5", "sweep check"):
        assert "dry run, would run" in parts[part], (part, parts)
    assert "bench_gpu_packs.py" in parts["packs"] and "--gpus-per-pack 0.5" in parts["sweep 0.5"]
    assert sum("dry run, would run" in line and "bench_neural.py" in line for line in summary) == 4
    assert "dry run, would run" in parts["nonlinear"] and "gpu_check_nonlinear.sh" in parts["nonlinear"]
    assert "no-bundle" in parts["bundle"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the CUDA parts run (benchmarks/gpu_check.sh)")
def test_on_a_cpu_the_cuda_parts_are_skipped_and_an_overrunning_part_is_cut(tmp_path):
    slow = tmp_path / "nonlinear.sh"
    slow.write_text("echo nonlinear check starts\nsleep 60\n")
    done, summary = _check(tmp_path, "tests", "packs", "nonlinear", GPU_CHECK_NONLINEAR=str(slow), GPU_CHECK_NONLINEAR_S="4")
    assert done.returncode == 0, done.stderr
    parts = {line.split("|")[0].strip(): line.split("|", 1)[1].strip() for line in summary[1:]}
    assert parts["tests"] == parts["packs"] == "skipped: no CUDA GPU here (torch.cuda.is_available() is False)"
    assert parts["nonlinear"].startswith("CUT after its budget"), parts["nonlinear"]
    assert "bench" not in parts and "sweep cpu" not in parts  # only the parts asked for


def test_an_unknown_part_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run(["bash", str(SCRIPT), "benchmark"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == "gpu_check.sh: unknown part 'benchmark'; choose from: tests bench packs sweep nonlinear (and --dry-run)"
