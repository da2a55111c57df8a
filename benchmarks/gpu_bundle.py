"""What the GPU check carries to the device machine, derived rather than listed: the closure of
pyproject.toml's `[project] dependencies` (extras included), at the versions installed here (the
ones the project's tests use), less the packages the GPU image already holds
(gpu_image_packages.txt, with its source and date). gpu_bundle.sh downloads exactly these pins.

    python benchmarks/gpu_bundle.py pins       # NAME==VERSION per line: what gpu_bundle.sh downloads
    python benchmarks/gpu_bundle.py modules    # the top-level import names the bundle's site provides

Markers are evaluated for the image's interpreter (CPython $GPU_PYTHON, default 3.12, Linux
x86-64), not this one. tests/test_gpu_bundle.py checks that every module a GPU sweep's run path
imports resolves from the image's packages plus these.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
IMAGE_FILE = Path(__file__).with_name("gpu_image_packages.txt")
# Never carried: a profiler binary Ray runs on request only (ray[default] names it; 6 MB).
NOT_CARRIED = frozenset({"py-spy"})
# Dropped from the unpacked site by gpu_bundle.sh, so not provided on the device: Ray's Java jars,
# RLlib, Serve and Ray's LLM library (a sweep uses Tune alone), console scripts, and Jupyter's files
# (plotly's JupyterLab extension and FigureWidget bundle; the report is offline HTML). With them the
# bundle was over a device transfer once polars split out its 132 MB runtime.
PRUNED = ("ray/jars", "ray/rllib", "ray/serve", "ray/llm", "bin", "share", "plotly/labextension",
          "plotly/package_data/widgetbundle.js")


def norm(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def image_packages(path: Path = IMAGE_FILE) -> frozenset[str]:
    """The image's distributions (normalised), from the data file (comments start with #)."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return frozenset(norm(line) for line in lines if line)


def project_requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[Requirement]:
    """The project's runtime dependencies as written in pyproject.toml."""
    with pyproject.open("rb") as f:
        return [Requirement(text) for text in tomllib.load(f)["project"]["dependencies"]]


def target_environment(python: str | None = None) -> dict[str, str]:
    """Marker values of the image's interpreter."""
    version = python or os.environ.get("GPU_PYTHON", "3.12")
    return {"python_version": version, "python_full_version": f"{version}.0", "sys_platform": "linux",
            "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
            "implementation_name": "cpython", "platform_python_implementation": "CPython"}


def closure(requirements: list[Requirement], skip: frozenset[str], env: dict[str, str] | None = None) -> dict[str, str]:
    """{normalised name: installed version} of every distribution `requirements` need on the
    target, transitively, stopping at names in `skip` (the image's: their own needs are the image's).
    A needed distribution that is not installed here is a ValueError naming who needs it."""
    env = env or target_environment()
    found: dict[str, str] = {}
    todo = [(req, "pyproject.toml", frozenset()) for req in requirements]
    while todo:
        req, needed_by, wanted_extras = todo.pop()
        name = norm(req.name)
        if req.marker is not None and not any(req.marker.evaluate({**env, "extra": e}) for e in {"", *wanted_extras}):
            continue
        if name in skip or name in found:
            continue
        try:
            dist = md.distribution(req.name)
        except md.PackageNotFoundError:
            raise ValueError(f"{req.name} (needed by {needed_by}) is not installed here; `pip install -e .` first, "
                             "the bundle carries the versions installed here") from None
        found[name] = dist.version
        todo += [(Requirement(text), req.name, frozenset(req.extras)) for text in dist.requires or []]
    return dict(sorted(found.items()))


def carried() -> dict[str, str]:
    """The bundle's distributions: pyproject's closure less the image and NOT_CARRIED."""
    return closure(project_requirements(), image_packages() | NOT_CARRIED)


def provided_modules(dists: dict[str, str]) -> frozenset[str]:
    """Top-level import names the unpacked site of `dists` holds (from their installed RECORDs), less PRUNED."""
    names = set()
    for name in dists:
        for file in md.distribution(name).files or []:
            path = file.as_posix()
            if path.startswith(("..", "/")) or any(path == p or path.startswith(p + "/") for p in PRUNED):
                continue
            top = path.split("/", 1)[0]
            if top.endswith((".dist-info", ".data")) or top == "__pycache__":
                continue
            names.add(top.split(".", 1)[0] if "/" not in path else top)
    return frozenset(names)


def main(argv: list[str]) -> int:
    if argv not in (["pins"], ["modules"]):
        print("usage: python benchmarks/gpu_bundle.py pins|modules", file=sys.stderr)
        return 2
    try:
        dists = carried()
    except ValueError as err:
        print(f"gpu_bundle.py: {err}", file=sys.stderr)
        return 2
    lines = [f"{n}=={v}" for n, v in dists.items()] if argv == ["pins"] else sorted(provided_modules(dists))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
