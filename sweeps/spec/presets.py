"""Shipped sweep files (grids.md) and resolution of a SWEEP argument to a `Sweep`."""

from __future__ import annotations

from pathlib import Path

from sweeps.spec.sweepfile import Sweep, SweepError, load_sweep

PRESETS_DIR = Path(__file__).with_name("presets")


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def preset_description(name: str) -> str:
    """A preset's description: the lines of its leading comment up to the one that ends a sentence
    (the first line, unless its sentence goes on), joined whole."""
    lines = []
    for line in (PRESETS_DIR / f"{name}.yaml").read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# ").strip())
        if lines[-1].endswith("."):
            break
    return " ".join(part for part in lines if part)


def resolve_sweep(name_or_path: str) -> Sweep:
    """A preset name (`fade-sweep presets`) or the path of a sweep file."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return load_sweep(path)
    preset = PRESETS_DIR / f"{name_or_path}.yaml"
    if preset.is_file():
        return load_sweep(preset)
    raise SweepError(
        f"{name_or_path}: neither a sweep file nor a preset; presets are {', '.join(preset_names())}"
    )
