"""A sweep's live status, written by the driver beside its results and read by `fade-sweep status`.

`status.json` is rewritten atomically at most once a second while the sweep runs, so it
can be followed from another shell (or another machine sharing the storage).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sweeps.results.store import write_bytes_atomic

STATUS_FILE = "status.json"


@dataclass
class TrialStatus:
    pack_id: str
    state: str  # pending | running | done | failed
    run_steps_done: int = 0
    run_steps_total: int = 0
    node_id: str | None = None
    pid: int | None = None
    restored_from_step: int = 0  # > 0 when the trial continued from a checkpoint


@dataclass
class SweepStatus:
    sweep: str
    state: str  # running | finished | failed | interrupted
    started_at: float
    updated_at: float
    run_steps_total: int
    trials: dict[str, TrialStatus] = field(default_factory=dict)

    @property
    def run_steps_done(self) -> int:
        return sum(t.run_steps_done for t in self.trials.values())

    def count(self, state: str) -> int:
        return sum(t.state == state for t in self.trials.values())

    @property
    def rate(self) -> float:
        """Run-steps per second since the sweep started."""
        elapsed = self.updated_at - self.started_at
        return self.run_steps_done / elapsed if elapsed > 0 else 0.0

    @property
    def nodes(self) -> set[str]:
        return {t.node_id for t in self.trials.values() if t.node_id}

    def write(self, results_dir: str | Path) -> None:
        document = {**asdict(self), "trials": [asdict(t) for t in self.trials.values()]}
        write_bytes_atomic(Path(results_dir) / STATUS_FILE, json.dumps(document, indent=1).encode())


def read_status(results_dir: str | Path) -> SweepStatus | None:
    path = Path(results_dir) / STATUS_FILE
    if not path.is_file():
        return None
    raw = json.loads(path.read_text())
    trials = {t["pack_id"]: TrialStatus(**t) for t in raw.pop("trials")}
    return SweepStatus(**raw, trials=trials)


def format_rate(run_steps_per_second: float) -> str:
    """12.3K or 4.56M run-steps/s: linear sweeps run millions per second, neural ones thousands."""
    if run_steps_per_second >= 1e6:
        return f"{run_steps_per_second / 1e6:.2f}M run-steps/s"
    return f"{run_steps_per_second / 1e3:.1f}K run-steps/s"


def format_status(status: SweepStatus, finished_packs: int) -> str:
    """The lines `fade-sweep status RESULTS_DIR` prints."""
    age = time.time() - status.updated_at
    remaining = status.run_steps_total - status.run_steps_done
    eta = remaining / status.rate if status.rate > 0 and status.state == "running" else None
    lines = [
        f"sweep {status.sweep}: {status.state} (updated {age:.0f} s ago)",
        f"packs: {status.count('done')} done, {status.count('running')} running, {status.count('failed')} failed, "
        f"{status.count('pending')} pending ({finished_packs} pack files in the store)",
        f"run-steps: {status.run_steps_done:.3e} of {status.run_steps_total:.3e} "
        f"({100 * status.run_steps_done / max(status.run_steps_total, 1):.1f}%), {format_rate(status.rate)}"
        + (f", ETA {eta:.0f} s" if eta is not None else ""),
    ]
    if status.state == "running" and age > 60:
        lines.append("no update for over a minute: the driver may have stopped; continue with `fade-sweep run ... --resume`")
    return "\n".join(lines)
