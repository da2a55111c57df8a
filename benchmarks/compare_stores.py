"""Compare the scores of one sweep run on different devices: same (config, seed) pairs,
scores within float32 tolerance. Prints one line; exit 1 on any difference.

    python benchmarks/compare_stores.py RESULTS_DIR_A RESULTS_DIR_B [...]
"""

from __future__ import annotations

import sys

import polars as pl

from sweeps.store import Store

RTOL = 2e-3  # float32 on two engines whose sums are ordered differently, over thousands of steps


def main(dirs: list[str]) -> int:
    stores = [Store.open(d) for d in dirs]
    for store in stores:  # a damaged pack's rows are left out by readers: here that would be a difference
        if notice := store.damage_notice():
            raise ValueError(f"{store.location}: {notice}")
    frames = [s.scan("scores").select("config_id", "seed", "score", "diverged").collect() for s in stores]
    base = frames[0]
    worst = 0.0
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
            rel = ((finite["score"] - finite["score_b"]).abs() / finite["score"].abs().clip(1e-12)).max()
            worst = max(worst, rel)
    verdict = "same numbers" if worst <= RTOL else "DIFFERENT"
    print(f"{verdict}: {base.height} runs in {len(dirs)} stores, largest relative score difference {worst:.2e} (tolerance {RTOL:g})")
    return 0 if worst <= RTOL else 1


if __name__ == "__main__":
    if len(sys.argv) < 3:
        print("compare_stores: give two or more results directories: python benchmarks/compare_stores.py DIR_A DIR_B", file=sys.stderr)
        sys.exit(2)
    try:
        sys.exit(main(sys.argv[1:]))
    except (OSError, ValueError) as err:  # no store there, or a damaged one: one line, not a traceback
        print(f"compare_stores: {err}", file=sys.stderr)
        sys.exit(2)
