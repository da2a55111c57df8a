"""Replay a race on a finished full grid: what racing would have selected, and what it would have spent.

    python benchmarks/race_replay.py RESULTS_DIR [--min-seeds 3] [--seeds-per-round 1] [--alpha 0.05] [--raced DIR]
                                     [--confirmed DIR]

Measured on `fade-sweep run linear-noise0` and on `benchmarks/race_nonlinear_short.yaml` (the nonlinear
grid at 60,000 steps, 10 seeds). The store must hold the full grid (every configuration on every seed, no race). The race's
decisions (sweeps.analysis.race.replay) are played on those scores, round by round, exactly as
a raced sweep decides on its own scores (the scores of a run do not depend on how it was
packed); the script prints, per method, the configuration the full grid selects (every seed)
and the one the race selects (among its survivors, on max_seeds seeds), the methods' ranking
both ways, and the run-steps the race spends against the full grid's. With `--raced DIR` (a store of
the same sweep run with `--race` and the same settings), it also checks that the real race decided
exactly as the replay (race.json) and that its best table selects the full grid's configurations.
With `--confirmed DIR` (a store whose confirmation stage ran the race's winners on fresh seeds), it
says whether each confirmation score lies within the full grid's 95% CI of the same configuration.
"""

from __future__ import annotations

import argparse

import polars as pl

from sweeps.analysis import queries
from sweeps.analysis.queries import Analysis
from sweeps.analysis.race import SURVIVOR, replay, run_steps
from sweeps.analysis.raced import decisions_frame, race_status
from sweeps.analysis.summaries import best_table
from sweeps.plan import CONFIRMATION
from sweeps.spec.race import Race
from sweeps.store import Store


def compare(store: Store, race: Race) -> dict:
    """The full grid's answer and the race's, from the scores `store` holds."""
    sweep = store.sweep
    scores = store.scan("scores").collect()
    rounds = [race.seeds(sweep.seeds)[:n] for n in race.schedule(sweep.seeds)]
    configs = [c.config_id for e in sweep.experiments for c in e.cells]
    played = replay(scores, configs, rounds, race.alpha)
    status = race_status(played.decisions)
    full_best = queries.best_configs(queries.cells(scores.lazy()))
    kept = scores.join(status, on="config_id").filter(pl.col("race_status") == SURVIVOR)
    seeds = set(rounds[-1])
    raced_best = queries.best_configs(queries.cells(kept.filter(pl.col("seed").is_in(list(seeds))).lazy()))
    steps = {c.config_id: e.settings.steps for e in sweep.experiments for c in e.cells}
    spent = run_steps(played.decisions, steps, configs, len(rounds[0]))
    full = sum(steps.values()) * len(sweep.seeds)

    def ranking(best: pl.DataFrame) -> list[str]:
        return best.filter(~pl.col("all_diverged")).with_columns(_k=queries.ranking_key("stat_value")).sort("_k")["optimizer"].to_list()

    pick = lambda best: dict(best.select("optimizer", "config_id").iter_rows())  # noqa: E731
    return {"decisions": played.decisions, "full": pick(full_best), "raced": pick(raced_best), "full_ranking": ranking(full_best),
            "raced_ranking": ranking(raced_best), "run_steps": spent, "full_run_steps": full, "rounds": played.decided,
            "eliminated": status.filter(pl.col("race_status") != SURVIVOR).height, "configs": len(configs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results_dir")
    parser.add_argument("--min-seeds", type=int, default=3)
    parser.add_argument("--seeds-per-round", type=int, default=1)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--raced", help="a store of the same sweep run with --race: compare its decisions and best table")
    parser.add_argument("--confirmed", help="a store with a confirmation stage: its scores against the full grid's CIs")
    args = parser.parse_args()
    full = Store.open(args.results_dir)
    out = compare(full, Race(args.min_seeds, None, args.alpha, args.seeds_per_round))
    if args.confirmed:
        confirmed = queries.cells(Store.open(args.confirmed).scan("scores", stage=CONFIRMATION)).select(
            "optimizer", "config_id", confirmation="mean")
        within = confirmed.join(Analysis.of(full).cells.select("config_id", "ci_low", "ci_high"), on="config_id").with_columns(
            inside=pl.col("confirmation").is_between(pl.col("ci_low"), pl.col("ci_high")))
        for row in within.sort("optimizer").iter_rows(named=True):
            print(f"  confirmed {row['optimizer']:<10} {row['confirmation']:.5g} in the full grid's CI "
                  f"[{row['ci_low']:.5g}, {row['ci_high']:.5g}]: {row['inside']}")
    if args.raced:
        raced = Store.open(args.raced)
        recorded, replayed = decisions_frame(raced.race), out["decisions"]
        keys = ["round", "config_id", "race_status", "reason", "best", "seeds"]
        same = recorded.height == replayed.height and recorded.select(keys).equals(replayed.select(keys))
        # float32 runs are pack-invariant to a few ulps, so the p-values agree to about 1e-12, not bit for bit
        drift = (recorded["p_value"] - replayed["p_value"]).abs().max() if same else None
        print(f"real race: {'finished' if raced.race.finished else 'UNFINISHED'}, the same decisions as the replay "
              f"(round, configuration, status, reason, best, seeds): {same}; largest p-value difference: {drift}")
        best = best_table(Analysis.of(raced)).filter(pl.col("status") == "ok")
        print(f"real race's best table selects the full grid's configurations: "
              f"{dict(best.select('optimizer', 'config_id').iter_rows()) == out['full']}")
    same = out["full"] == out["raced"]
    print(f"configs: {out['configs']}, eliminated: {out['eliminated']}, rounds: {out['rounds']}")
    for optimizer in sorted(out["full"]):
        print(f"  {optimizer:<10} full {out['full'][optimizer]}  raced {out['raced'].get(optimizer)}"
              f"{'' if out['full'][optimizer] == out['raced'].get(optimizer) else '  DIFFERENT'}")
    print(f"ranking full : {out['full_ranking']}\nranking raced: {out['raced_ranking']}")
    print(f"same configs: {same}, same ranking: {out['full_ranking'] == out['raced_ranking']}")
    print(f"run-steps: {out['run_steps']:.4g} of {out['full_run_steps']:.4g} ({100 * out['run_steps'] / out['full_run_steps']:.1f}%)")


if __name__ == "__main__":
    main()
