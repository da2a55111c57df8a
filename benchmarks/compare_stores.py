"""Compare the scores of one sweep run on different devices: same (config, seed) pairs,
scores within float32 tolerance. Prints one line; exit 1 on any difference.

    python benchmarks/compare_stores.py RESULTS_DIR_A RESULTS_DIR_B [...] [--accuracy]

--accuracy: the scores are fractions of correct predictions (the EMNIST tasks). Two float32 engines
that order their sums differently flip near-tie argmaxes, and over thousands of steps the runs drift
apart by a few predictions: the CPU's own torch and cpu engines, both tested against the float64
oracle, differ by up to 0.003 (1.9e-2 relative) on benchmarks/gpu_sweep_emnist.yaml. Those scores are
then compared absolutely, within ACCURACY_ATOL (1% of the predictions, test_cuda.py's FLIPS).
"""

from __future__ import annotations

import sys

import polars as pl

from sweeps.store import Store

RTOL = 2e-3  # float32 on two engines whose sums are ordered differently, over thousands of steps
ACCURACY_ATOL = 0.01  # --accuracy: a hundredth of the scored predictions


def main(dirs: list[str], accuracy: bool = False) -> int:
    stores = [Store.open(d) for d in dirs]
    for store in stores:  # a damaged pack's rows are left out by readers: here that would be a difference
        if notice := store.damage_notice():
            raise ValueError(f"{store.location}: {notice}")
    frames = [s.scan("scores").select("config_id", "seed", "score", "diverged").collect() for s in stores]
    base = frames[0]
    worst = worst_abs = 0.0
    for other, name in zip(frames[1:], dirs[1:]):
        joined = base.join(other, on=["config_id", "seed"], how="full", suffix="_b")
        if joined.height != base.height or joined["score_b"].null_count() or joined["score"].null_count():
            print(f"{name}: different (config, seed) pairs than {dirs[0]} ({other.height} vs {base.height} rows)")
            return 1
        both_finite = pl.col("score").is_finite() & pl.col("score_b").is_finite()
        finite = joined.filter(both_finite)
        # a run diverged on one engine only, or non-finite scores that differ: not a rounding difference
        unequal_non_finite = joined.filter(~both_finite & ~pl.col("score").eq_missing(pl.col("score_b"))).height
        if unequal_non_finite or (joined["diverged"] != joined["diverged_b"]).any():
            print(f"DIFFERENT: {name} and {dirs[0]} disagree on which runs diverged")
            return 1
        if finite.height:
            difference = (finite["score"] - finite["score_b"]).abs()
            worst = max(worst, (difference / finite["score"].abs().clip(1e-12)).max())
            worst_abs = max(worst_abs, difference.max())
    same = worst_abs <= ACCURACY_ATOL if accuracy else worst <= RTOL
    tolerance = f"accuracy tolerance {ACCURACY_ATOL:g} absolute" if accuracy else f"tolerance {RTOL:g}"
    print(f"{'same numbers' if same else 'DIFFERENT'}: {base.height} runs in {len(dirs)} stores, largest relative score "
          f"difference {worst:.2e}, absolute {worst_abs:.2e} ({tolerance})")
    return 0 if same else 1


if __name__ == "__main__":
    args = sys.argv[1:]
    accuracy = "--accuracy" in args
    dirs = [a for a in args if a != "--accuracy"]
    if len(dirs) < 2 or any(d.startswith("-") for d in dirs):
        print("compare_stores: give two or more results directories: python benchmarks/compare_stores.py DIR_A DIR_B "
              "[--accuracy]", file=sys.stderr)
        sys.exit(2)
    try:
        sys.exit(main(dirs, accuracy))
    except (OSError, ValueError) as err:  # no store there, or a damaged one: one line, not a traceback
        print(f"compare_stores: {err}", file=sys.stderr)
        sys.exit(2)
