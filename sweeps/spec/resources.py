"""What one trial (one pack) asks Ray for: plain data, so a sweep file is parsed without Ray."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PackResources:
    """CPUs and GPUs of one pack's trial; fractions of a GPU let several packs share one.

    `gpus` is what a pack of a GPU-capable task (the neural ones) asks for; packs of a
    CPU-only task (linear) ask for CPUs alone, so one sweep spreads over both kinds of slot.
    """

    cpus: float = 1.0
    gpus: float = 0.0

    def for_task(self, runs_on_gpu: bool) -> PackResources:
        """What a pack of a task asks for: no GPU for a CPU-only task."""
        return self if runs_on_gpu else PackResources(self.cpus, 0.0)

    def as_tune(self) -> dict[str, float]:
        return {"CPU": self.cpus, "GPU": self.gpus}
