"""The walk of `fade-sweep run`: which of the project's files a run goes through, and how often it goes back.

    PYTHONPATH=CHECKOUT python benchmarks/walk_run.py [--depth 2] [--show] -- run linear-demo --storage DIR

Runs the command in this process (the checkout first on PYTHONPATH is the one measured) with a
profiler (`sys.setprofile`, the main thread: the driver) that follows the run from `cli/running.py:cmd_run`
through the project's own calls: a call is followed when its caller is a followed frame (standard-library
frames between them, such as a `with` block's contextlib, are looked through; a call from a library,
such as Tune's callbacks, is not), and only `--depth` files deep (a call into another file is one level
down; calls within a file stay on its level). Each time the walk moves into a file (a call into it, or
a return to it) it begins a *stay*. Printed:

- stays, files (distinct), and *returns*: stays in a file the walk had already left (stays - files);
- *climbs*: calls from a file into one of a higher layer (docs/architecture.md's order: fade_core <
  tasks < cluster < spec < plan < packs < store < analysis < tune < cli), e.g. a callback;
- the stays per file, with the functions that began them, for `tune/driver.py` and `store/store.py`
  (`--show`: every file, and the walk in order).

A measurement, not a test: the numbers depend on the code's shape only (the same sweep walks the same
way however loaded the machine is), so main and a branch are compared by running this twice.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections import Counter, defaultdict

LAYERS = ("fade_core", "tasks", "cluster", "sweeps/spec", "sweeps/plan", "sweeps/packs", "sweeps/store",
          "sweeps/analysis", "sweeps/tune", "sweeps/cli")
SHOWN = ("sweeps/tune/driver.py", "sweeps/store/store.py")


def main() -> int:
    args = sys.argv[1:]
    depth, show = 2, False
    while args and args[0] != "--":
        flag = args.pop(0)
        if flag == "--depth":
            depth = int(args.pop(0))
        elif flag == "--show":
            show = True
        else:
            raise SystemExit(f"unknown flag {flag}; usage: walk_run.py [--depth N] [--show] -- FADE-SWEEP ARGS")
    argv = args[1:]

    import sweeps
    from sweeps.cli import main as cli_main

    root = os.path.dirname(os.path.dirname(os.path.abspath(sweeps.__file__))) + os.sep
    stdlib = sysconfig.get_paths()["stdlib"]
    site = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    names: dict[str, str | None] = {}

    def project(filename: str) -> str | None:
        """The file's path inside the checkout (None: not one of the project's files)."""
        if filename not in names:
            path = os.path.abspath(filename)
            inside = path.startswith(root) and path.endswith(".py") and path[len(root):].split(os.sep)[0] in (
                "fade_core", "tasks", "cluster", "sweeps")
            names[filename] = path[len(root):] if inside else None
        return names[filename]

    def looked_through(filename: str) -> bool:
        return filename.startswith(stdlib) and not any(filename.startswith(s) for s in site)

    def layer(path: str) -> int:
        return max(i for i, prefix in enumerate(LAYERS) if path.startswith(prefix + "/") or path == prefix)

    followed: dict[int, tuple[str, int]] = {}  # id(frame) -> (file, level)
    walk: list[tuple[str, str]] = []  # (file, the function that began the stay)
    climbs: list[tuple[str, str, str]] = []

    def move(path: str, how: str) -> None:
        if not walk or walk[-1][0] != path:
            walk.append((path, how))

    def profile(frame, event, arg):
        if event == "call":
            path = project(frame.f_code.co_filename)
            if path is None:
                return
            if not followed:
                if path == "sweeps/cli/running.py" and frame.f_code.co_name == "cmd_run":
                    followed[id(frame)] = (path, 0)
                    move(path, "cmd_run")
                return
            caller = frame.f_back
            while caller is not None and id(caller) not in followed and looked_through(caller.f_code.co_filename):
                caller = caller.f_back
            if caller is None or id(caller) not in followed:
                return
            caller_path, level = followed[id(caller)]
            level += path != caller_path
            if level > depth:
                return
            followed[id(frame)] = (path, level)
            if path != caller_path:
                if layer(path) > layer(caller_path):
                    climbs.append((caller_path, path, frame.f_code.co_name))
                move(path, frame.f_code.co_name)
        elif event == "return" and id(frame) in followed:
            path, _ = followed.pop(id(frame))
            back = frame.f_back
            while back is not None and id(back) not in followed and looked_through(back.f_code.co_filename):
                back = back.f_back
            if back is not None and id(back) in followed:
                move(followed[id(back)][0], "(return)")
            elif not followed:
                sys.setprofile(None)

    sys.setprofile(profile)
    try:
        code = cli_main(argv)
    finally:
        sys.setprofile(None)
    stays = Counter(path for path, _ in walk)
    how: dict[str, list[str]] = defaultdict(list)
    for path, name in walk:
        how[path].append(name)
    print(f"\nwalk of `fade-sweep {' '.join(argv)}` (depth {depth}, exit {code}):")
    print(f"  {len(walk)} stays in {len(stays)} files, {len(climbs)} climbs back up a layer, "
          f"{len(walk) - len(stays)} returns to a file already left")
    for path in (sorted(stays) if show else SHOWN):
        print(f"  {path}: entered {stays.get(path, 0)} times ({', '.join(how.get(path, []))})")
    if show:
        for caller, callee, name in climbs:
            print(f"  climb: {caller} -> {callee}:{name}")
        print("  walk: " + " > ".join(f"{p.removeprefix('sweeps/')}:{n}" for p, n in walk))
    return code


if __name__ == "__main__":
    sys.exit(main())
