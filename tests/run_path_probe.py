"""The modules a GPU sweep's run path imports, as a fresh interpreter sees them: run as
`python -m tests.run_path_probe EMNIST_DIR STORE_DIR`, it prints one JSON line,
{"modules": {each top-level module in sys.modules: its file, or null}}.

It does what `fade-sweep run SWEEP --no-report --gpus-per-pack 1` does in its processes, short of
starting Ray: the driver's imports (the CLI, sweeps.tune.stages with the driver, the wiring and the
trainable), then a worker's work for an EMNIST and a nonlinear pack (the pack engine, the CUDA
engine's Triton modules where Triton imports, a few chunks, the store's commit) and the closing
table. tests/test_architecture.py checks that it never loads plotly; tests/test_gpu_bundle.py that
every module it loads is on the GPU image or in the bundle.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(data_dir: str, store_dir: str) -> None:
    # -- the driver of `fade-sweep run --no-report`
    import sweeps.cli.running  # noqa: F401
    import sweeps.tune.stages  # noqa: F401
    import sweeps.tune.wiring  # noqa: F401  (names the trainable)
    from sweeps.cli import reading
    from sweeps.plan import plan_packs
    from sweeps.spec import PackResources, parse_sweep
    from sweeps.store import Store
    from sweeps.store.sweep_record import check_and_record
    from sweeps.store.records import SweepStatus
    from sweeps.tune.preflight import check

    document = {"name": "probe", "seeds": 1, "variants": [
        {"task": "emnist_label_permuted",
         "optimizers": {"fade_sgd": {"alpha": 0.01, "theta_lambda": 0.1, "gamma0": -4.6}},
         "task_settings": {"steps": 40, "period": 20, "bin": 20, "data_dir": data_dir}},
        {"task": "nonlinear_tracking", "optimizers": {"adam": {"alpha": 0.001}},
         "task_settings": {"steps": 40, "score_window": 20, "bin": 20, "period": 10}},
    ]}
    sweep = parse_sweep(document, "probe")
    check(sweep, PackResources(1, 0), None)
    store = Store.open(Path(store_dir) / "probe")
    check_and_record(store.location, sweep, "float32")
    # -- a worker (sweeps.tune.trainable.pack_trainable's imports and work, without Ray's calls)
    import numba  # noqa: F401
    import torch

    from sweeps.packs import make_runner
    from sweeps.packs.neural import use_tf32

    try:  # the CUDA engine's kernels (the image has Triton)
        import fade_core.neural.triton_fused_step  # noqa: F401
        import fade_core.neural.triton_update  # noqa: F401
    except ImportError:
        pass
    use_tf32(False)
    for pack in plan_packs(sweep, cpus=1):
        runner = make_runner(pack, 20, torch.float32, "cpu")
        for _ in runner.run():
            pass
        store.write_pack(pack, runner.outcome())
    SweepStatus("probe", "finished", 0.0, 1.0, 80).write(store.location)
    # -- the driver's closing table
    reading.table_text(Store.open(Path(store_dir) / "probe"), "best", "csv")
    tops = {m.split(".")[0] for m in sys.modules}
    print(json.dumps({"modules": {m: getattr(sys.modules.get(m), "__file__", None) for m in sorted(tops)}}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
