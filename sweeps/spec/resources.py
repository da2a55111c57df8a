"""What one trial (one pack) asks Ray for: plain data, so a sweep file is parsed without Ray."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PackResources:
    """CPUs and GPUs of one pack's trial; fractions of a GPU let several packs share one."""

    cpus: float = 1.0
    gpus: float = 0.0

    def as_tune(self) -> dict[str, float]:
        return {"cpu": self.cpus, "gpu": self.gpus}
