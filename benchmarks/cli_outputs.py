"""Every CLI output on the demos, saved with its volatile parts masked, to show a refactoring changes none.

    python benchmarks/cli_outputs.py capture CHECKOUT OUT_DIR [--quick]
    python benchmarks/cli_outputs.py compare BEFORE_DIR AFTER_DIR

`capture` runs `fade-sweep` of CHECKOUT (its tree first on PYTHONPATH, in a fresh scratch folder) through
the demos: `run linear-demo` (with its report), a resume with nothing left, the refusals a second run
meets, `table` of every kind and format (one store and two compared), `status`, `verify`, `report`,
`confirm` and the confirmation table, dry runs, a raced and confirmed short twin of linear-demo (its
sweep file's `race:` and `confirm:` blocks), and bad input of each kind. Each command's exit code,
stdout and stderr land in OUT_DIR/<name>.txt, masked: timings, rates, dates, PIDs, the host, the
scratch folder, the checkout's path and plotly's random div ids; the progress lines a run prints while packs land are dropped
(how many there are depends on timing) and so are stderr lines that are not fade-sweep's own (Ray's
and Python's warnings). The written report.html is saved masked the same way. `--quick` runs the
short twin only (a minute or two, for iterating). `compare` prints every file that differs
(unified diff) and exits 1 if any does.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

SHORT_SWEEP = """\
name: linear-short
task: linear_tracking
task_settings:
  steps: 20000
seeds: 5
variants:
  - task_settings: {noise: 0.0}
  - task_settings: {noise: 1.0}
optimizers:
  sgd: {alpha: [0.1, 0.05, 0.01]}
  fade: {alpha: [0.1, 0.05], theta_lambda: [0, 0.01], gamma0: [-1.2, -4.6]}
race: {min_seeds: 3}
confirm: {seeds: 2}
"""

# (name, argv after `fade-sweep`): {R} is the scratch folder; run in order (later ones read earlier results)
DEMO = [
    ("run_dry", ["run", "linear-demo", "--dry-run", "--storage", "{R}/res"]),
    ("run", ["run", "linear-demo", "--storage", "{R}/res"]),
    ("run_again_refused", ["run", "linear-demo", "--storage", "{R}/res"]),
    ("run_resume_nothing", ["run", "linear-demo", "--storage", "{R}/res", "--resume", "--no-report"]),
    ("run_dry_resume", ["run", "linear-demo", "--dry-run", "--resume", "--storage", "{R}/res"]),
    ("run_gpu_on_cpu_task", ["run", "linear-demo", "--storage", "{R}/res2", "--gpus-per-pack", "1"]),
    ("run_calibrate_without_dry", ["run", "linear-demo", "--calibrate", "--storage", "{R}/res2"]),
    ("run_dry_race", ["run", "linear-demo", "--dry-run", "--race", "--storage", "{R}/res2"]),
    ("status", ["status", "{R}/res/linear-demo"]),
    ("status_storage", ["status", "{R}/res"]),
    ("verify", ["verify", "{R}/res/linear-demo"]),
    ("report", ["report", "{R}/res/linear-demo", "--out", "{R}/report-demo.html"]),
    ("table_confirm_none", ["table", "{R}/res/linear-demo", "--kind", "confirm"]),
    ("confirm", ["confirm", "{R}/res/linear-demo", "--seeds", "2"]),
    ("confirm_again", ["confirm", "{R}/res/linear-demo", "--seeds", "2"]),
    ("status_after_confirm", ["status", "{R}/res/linear-demo"]),
    ("verify_after_confirm", ["verify", "{R}/res/linear-demo"]),
]
SHORT = [
    ("short_dry", ["run", "{R}/short.yaml", "--dry-run", "--storage", "{R}/res"]),
    ("short_run", ["run", "{R}/short.yaml", "--storage", "{R}/res", "--no-report"]),
    ("short_resume_nothing", ["run", "{R}/short.yaml", "--storage", "{R}/res", "--resume", "--no-report"]),
    ("short_status", ["status", "{R}/res/linear-short"]),
    ("short_verify", ["verify", "{R}/res/linear-short"]),
    ("short_report", ["report", "{R}/res/linear-short", "--out", "{R}/report-short.html"]),
    ("short_confirm_locked_free", ["confirm", "{R}/res/linear-short", "--seeds", "2"]),
]
BAD = [
    ("bad_sweep_name", ["run", "no-such-sweep", "--storage", "{R}/res"]),
    ("bad_sweep_file", ["run", "{R}/bad.yaml", "--storage", "{R}/res"]),
    ("bad_table_dir", ["table", "{R}/nowhere/sweep"]),
    ("bad_table_not_store", ["table", "{R}"]),
    ("bad_status_dir", ["status", "{R}/nowhere/sweep"]),
    ("bad_verify_dir", ["verify", "{R}/nowhere"]),
    ("bad_confirm_dir", ["confirm", "{R}/nowhere/sweep"]),
    ("bad_report_dir", ["report", "{R}/nowhere/sweep"]),
    ("bad_storage_empty", ["run", "linear-demo", "--storage", ""]),
    ("bad_engine", ["run", "linear-demo", "--storage", "{R}/res3", "--engine", "triton"]),
    ("bad_cpus_dry", ["run", "linear-demo", "--dry-run", "--cpus-per-pack", "999", "--storage", "{R}/res3"]),
    ("bad_robustness_stat", ["table", "{R}/res/linear-short", "--kind", "robustness", "--stat", "median"]),
    ("bad_compare_reference", ["table", "{R}/res/linear-short", "--kind", "compare", "--reference", "nope"]),
    ("presets", ["presets"]),
]
KINDS = ("best", "sensitivity", "compare", "importance", "confirm", "robustness")


def _tables(store: str, prefix: str) -> list[tuple[str, list[str]]]:
    """Every kind in every format of one store (and by median for the kinds that take a statistic)."""
    out = []
    for kind in KINDS:
        for fmt in ("md", "latex", "csv"):
            out.append((f"{prefix}_table_{kind}_{fmt}", ["table", store, "--kind", kind, "--format", fmt]))
        if kind != "robustness":
            out.append((f"{prefix}_table_{kind}_median", ["table", store, "--kind", kind, "--stat", "median"]))
    return out


def _mask(text: str, root: str, checkout: str) -> str:
    """The parts of an output that differ from run to run, however correct both runs are."""
    lines = []
    for line in text.splitlines():
        if re.match(r"^\[\d+ s\] running:", line):
            continue  # progress while packs land: how many depends on timing
        lines.append(line)
    text = "\n".join(lines)
    for path, name in ((root, "<ROOT>"), (os.path.realpath(root), "<ROOT>"), (checkout, "<CHECKOUT>")):
        text = text.replace(path, name)
    return _volatile(text.replace(socket.gethostname(), "<HOST>"))


def _volatile(text: str) -> str:
    """Timings, rates, dates, PIDs and the machine's load masked (applied again by `compare`, so a mask added
    later also covers outputs captured before it)."""
    text = re.sub(r"127\.0\.0\.[^ )]*", "<ADDRESS>", text)  # an embedded Ray's dashboard port
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<UUID>", text)  # plotly's div ids
    text = re.sub(r"load average [\d.]+", "load average <L>", text)
    text = re.sub(r"\(x[\d.]+:", "(x<F>:", text)
    text = re.sub(r"tune-\d{8}-\d{6}", "tune-<DATE>", text)
    text = re.sub(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:?\d\d)?", "<DATE>", text)
    text = re.sub(r"\b(pid|PID|process) \d+", r"\1 <PID>", text)
    text = re.sub(r"[\d.,]+[KMG]? run-steps/s", "<RATE> run-steps/s", text)
    text = re.sub(r"\d+(\.\d+)?(e[+-]?\d+)? ?(s|ms|min|h|seconds|minutes|hours)\b", "<T>", text)
    text = re.sub(r"\d+:\d\d(:\d\d)?", "<CLOCK>", text)
    text = re.sub(r"ETA [^,;)\n]*", "ETA <T>", text)
    return text


def _own_stderr(text: str) -> str:
    """fade-sweep's own lines on stderr (its errors, notices and tracebacks), not Ray's or Python's warnings."""
    keep = [line for line in text.splitlines()
            if line.startswith(("fade-sweep", "Traceback", "  File", "    ")) or re.match(r"^\w*(Error|Exception)\b", line)]
    return "\n".join(keep)


def capture(checkout: Path, out: Path, quick: bool) -> None:
    checkout = checkout.resolve()
    out.mkdir(parents=True, exist_ok=True)
    root = tempfile.mkdtemp(prefix="cli-outputs-")
    (Path(root) / "short.yaml").write_text(SHORT_SWEEP)
    (Path(root) / "bad.yaml").write_text("name: bad\ntask: linear_tracking\nseeds: 0\n")
    env = {**os.environ, "PYTHONPATH": str(checkout), "NO_COLOR": "1", "COLUMNS": "120"}
    env.pop("RAY_ADDRESS", None)
    commands = [] if quick else DEMO + _tables("{R}/res/linear-demo", "demo")
    commands += SHORT + _tables("{R}/res/linear-short", "short")
    if not quick:
        commands += [("two_table_best", ["table", "{R}/res/linear-demo", "{R}/res/linear-demo", "--kind", "best"])]
    commands += BAD
    for name, argv in commands:
        argv = [a.replace("{R}", root) for a in argv]
        done = subprocess.run([sys.executable, "-m", "sweeps.cli", *argv], cwd=root, env=env, capture_output=True,
                              text=True)
        text = (f"$ fade-sweep {' '.join(argv)}\nexit {done.returncode}\n--- stdout\n{done.stdout}"
                f"\n--- stderr (fade-sweep's own lines)\n{_own_stderr(done.stderr)}\n")
        (out / f"{name}.txt").write_text(_mask(text, root, str(checkout)) + "\n")
        print(f"{name}: exit {done.returncode}", flush=True)
    for report in Path(root).glob("report-*.html"):
        (out / report.name).write_text(_mask(report.read_text(), root, str(checkout)))
    shutil.rmtree(root, ignore_errors=True)


def compare(before: Path, after: Path) -> int:
    names = sorted({p.name for p in before.iterdir()} | {p.name for p in after.iterdir()})
    differ = 0
    for name in names:
        a, b = before / name, after / name
        old = _volatile(a.read_text()).splitlines(keepends=True) if a.exists() else []
        new = _volatile(b.read_text()).splitlines(keepends=True) if b.exists() else []
        if old != new:
            differ += 1
            sys.stdout.writelines(difflib.unified_diff(old, new, str(a), str(b), n=1))
    print(f"{len(names)} outputs, {differ} differ" + ("" if differ else ": byte-identical (masked)"))
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cap = sub.add_parser("capture")
    cap.add_argument("checkout", type=Path)
    cap.add_argument("out", type=Path)
    cap.add_argument("--quick", action="store_true", help="the short twin and bad input only")
    cmp = sub.add_parser("compare")
    cmp.add_argument("before", type=Path)
    cmp.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "capture":
        capture(args.checkout, args.out, args.quick)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
