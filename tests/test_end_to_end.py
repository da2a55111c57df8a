"""End to end through Ray Tune on a tiny sweep, sharing one local Ray for the module."""

import json
import math

import polars as pl
import pytest
import ray
import yaml

from sweeps.cli import main
from sweeps.store import Store

CONFIGS = {"sgd": 3, "fade": 4}  # grid sizes below
SEEDS = 3
STEPS, BIN = 3000, 500

SWEEP = {
    "name": "tiny",
    "task": "linear_tracking",
    "task_settings": {"steps": STEPS, "bin": BIN, "noise": 1.0},
    "seeds": SEEDS,
    "optimizers": {
        "sgd": {"alpha": [0.5, 0.05, 0.01]},  # 0.5 diverges on 20 unit-variance inputs
        "fade": {"alpha": [0.05, 0.01], "theta_lambda": [0.01], "gamma0": [-2.3, -4.6]},
    },
}


@pytest.fixture(scope="module")
def local_ray():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never a Ray another process started
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def finished(local_ray, tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e")
    sweep = root / "tiny.yaml"
    sweep.write_text(yaml.safe_dump(SWEEP))
    # --runs-per-pack 6 forces several packs per optimizer
    assert main(["run", str(sweep), "--storage", str(root / "store"), "--runs-per-pack", "6", "--chunk-steps", "700"]) == 0
    return sweep, root / "store" / "tiny"


def test_store_has_exact_rows(finished):
    _, results_dir = finished
    scores = Store.open(results_dir).scan("scores").collect()
    curves = Store.open(results_dir).scan("curves").collect()
    runs = sum(CONFIGS.values()) * SEEDS
    assert scores.height == runs
    assert scores.select("config_id", "seed").unique().height == runs
    assert curves.height == runs * STEPS // BIN
    assert curves.select("config_id", "seed", "step").unique().height == curves.height
    assert sorted(curves["step"].unique()) == list(range(BIN, STEPS + 1, BIN))
    # typed hyperparameter columns, null where the optimizer does not take them
    sgd = scores.filter(pl.col("optimizer") == "sgd")
    assert sgd["gamma0"].is_null().all() and sgd["alpha"].dtype == pl.Float64
    fade = scores.filter(pl.col("optimizer") == "fade")
    assert fade["gamma0"].is_not_null().all()
    # curves: FADE has decay rates, SGD does not; the score is the mean of the bins' MSE
    assert curves.filter(pl.col("optimizer") == "fade")["decay_relevant"].is_not_null().all()
    assert curves.filter(pl.col("optimizer") == "sgd")["decay_relevant"].is_null().all()
    one = fade.row(0, named=True)
    bins = curves.filter((pl.col("config_id") == one["config_id"]) & (pl.col("seed") == one["seed"]))
    assert math.isclose(bins["mse"].mean(), one["score"], rel_tol=1e-9)


def test_diverged_runs_recorded_and_never_selected(finished, capsys):
    _, results_dir = finished
    scores = Store.open(results_dir).scan("scores").collect()
    diverged = scores.filter(pl.col("diverged"))
    assert set(diverged["alpha"]) == {0.5} and set(diverged["optimizer"]) == {"sgd"}
    assert scores.filter(~pl.col("diverged"))["score"].is_finite().all()
    assert main(["table", str(results_dir), "--format", "csv"]) == 0
    out = capsys.readouterr().out
    table = pl.read_csv(out.encode())
    assert table.height == 2, out
    sgd = table.filter(pl.col("optimizer") == "sgd").row(0, named=True)
    assert sgd["alpha"] != 0.5 and sgd["diverged_configs"] == 1 and sgd["seeds"] == SEEDS
    expected = scores.filter(pl.col("config_id") == sgd["config_id"])["score"]
    assert math.isclose(sgd["mean"], expected.mean(), rel_tol=1e-12)
    assert math.isclose(sgd["std"], expected.std(ddof=1), rel_tol=1e-12)


def _best_method_by_hand(scores: pl.DataFrame) -> tuple[str, float]:
    """The method whose best non-diverged configuration has the lowest mean score."""
    means = {}
    for (optimizer, config_id), group in scores.group_by("optimizer", "config_id"):
        if not group["diverged"].any():
            means.setdefault(optimizer, []).append(group["score"].mean())
    return min(((o, min(m)) for o, m in means.items()), key=lambda pair: pair[1])


def test_markdown_and_latex_tables_mark_the_best_method(finished, capsys):
    _, results_dir = finished
    best, best_mean = _best_method_by_hand(Store.open(results_dir).scan("scores").collect())
    assert main(["table", str(results_dir)]) == 0
    md = capsys.readouterr().out
    assert "| method | score | seeds |" in md and "ddof=1" in md
    rows = [line.split("|")[1:-1] for line in md.splitlines() if line.startswith("| ") and "method" not in line]
    bold = [[c.strip() for c in row] for row in rows if row[0].strip().startswith("**")]
    assert len(bold) == 1 and bold[0][0] == f"**{best}**", md
    assert float(bold[0][1].strip("*").split(" ± ")[0]) == pytest.approx(best_mean, rel=1e-3)
    others = [row[0].strip() for row in rows if not row[0].strip().startswith("**")]
    assert others == [o for o in sorted(CONFIGS) if o != best]
    assert main(["table", str(results_dir), "--format", "latex"]) == 0
    latex = capsys.readouterr().out
    assert r"\toprule" in latex and rf"\textbf{{{best}}}" in latex and latex.count(r"\textbf{") == 2


def test_rerun_without_resume_is_refused(finished, capsys):
    sweep, results_dir = finished
    assert main(["run", str(sweep), "--storage", str(results_dir.parent)]) == 2
    assert "already holds results of sweep tiny; pass --resume" in capsys.readouterr().err


def test_resume_runs_only_missing_and_reproduces_them(finished, tmp_path):
    sweep, results_dir = finished
    before = Store.open(results_dir).scan("scores").collect().sort("config_id", "seed")
    # Simulate an interrupted sweep: one pack's data files were written but its manifest (the commit) never landed.
    manifest = sorted((results_dir / "manifests").glob("*.json"))[0]
    victim = results_dir / json.loads(manifest.read_text())["files"]["scores"]["path"]
    lost = pl.read_parquet(victim).height
    manifest.unlink()
    assert Store.open(results_dir).scan("scores").collect().height == before.height - lost  # uncommitted: never read
    untouched = {p: p.stat().st_mtime_ns for p in (results_dir / "scores").glob("**/*.parquet") if p != victim}
    assert main(["run", str(sweep), "--storage", str(results_dir.parent), "--resume"]) == 0
    after = Store.open(results_dir).scan("scores").collect().sort("config_id", "seed")
    assert after.height == before.height
    assert after.select("config_id", "seed", "score", "diverged").equals(before.select("config_id", "seed", "score", "diverged"))
    assert all(p.stat().st_mtime_ns == t for p, t in untouched.items())  # finished packs not re-run
    # the lost runs (one optimizer, all seeds) come back in new packs, re-planned for the 2 slots: one per slot
    assert 0 < lost < 100
    assert len(list((results_dir / "scores").glob("**/*.parquet"))) == len(untouched) + 2
    assert not victim.exists()  # the orphan of the interrupted write is removed by --resume
    assert Store.open(results_dir).missing_runs().height == 0


def _damaged(path, how: str) -> None:
    raw = path.read_bytes()
    path.write_bytes({"truncated": raw[: len(raw) // 2], "empty": b"", "garbage": b"\x00\xffnot json at all"}[how])


DAMAGE = [("manifest", "truncated"), ("manifest", "empty"), ("manifest", "garbage"), ("store.json", "garbage"),
          ("status.json", "empty"), ("sweep.yaml", "truncated")]


@pytest.mark.parametrize(("record", "how"), DAMAGE, ids=[f"{r}-{h}" for r, h in DAMAGE])
def test_a_damaged_record_is_skipped_by_readers_and_healed_by_resume(finished, tmp_path, capsys, record, how):
    """A damaged record is no dead end. A damaged manifest commits nothing: readers answer from the rest and
    say in one line what they skipped and the command that repairs it; that command (`run ... --resume`) sets
    it aside, re-runs its pack, and the store ends equal to the uninterrupted one. store.json and status.json:
    read as absent, written anew. sweep.yaml: readers name it and the repair (the sweep file is needed)."""
    import shutil

    sweep, original = finished
    results_dir = tmp_path / "copy" / original.name
    shutil.copytree(original, results_dir)
    keys = ["optimizer", "config_id", "seed"]
    before_scores = Store.open(original).scan("scores").collect().sort(keys)
    before_curves = Store.open(original).scan("curves").collect().sort([*keys, "step"])
    assert main(["table", str(original)]) == 0
    before_table = capsys.readouterr().out
    victim = sorted((results_dir / "manifests").glob("*.json"))[0] if record == "manifest" else results_dir / record
    lost = len(json.loads(victim.read_text())["configs"]) * len(json.loads(victim.read_text())["seeds"]) \
        if record == "manifest" else 0
    _damaged(victim, how)
    resume = f"fade-sweep run {results_dir}/sweep.yaml --storage {results_dir.parent} --resume"

    for command in (["table", str(results_dir)], ["report", str(results_dir), "--out", str(tmp_path / "r.html")],
                    ["status", str(results_dir)]):
        code = main(command)
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        if record == "sweep.yaml":  # the tables' grid: named, with the repair (status needs no grid: it answers)
            assert code == (0 if command[0] == "status" else 2), command
            assert f"{victim}: changed or truncated since it was recorded" in err[0], err
            assert f"`fade-sweep run SWEEP --storage {results_dir.parent} --resume` records it anew" in err[0], err
            continue
        assert code == 0, command
        if record == "manifest":
            assert err[0].startswith(f"fade-sweep: skipped 1 damaged manifest ({victim}: damaged Manifest"), err
            assert err[0].endswith(f"`{resume}` sets it aside and runs them again"), err
        else:
            repair = f"`{resume}` writes it anew" if record == "store.json" else "the next run that runs packs writes it anew"
            assert err[0] == f"fade-sweep: skipped {victim}: damaged {'StoreRecord' if record == 'store.json' else 'SweepStatus'} " \
                f"record (not valid JSON); {repair}", err
    if record != "sweep.yaml":
        assert Store.open(results_dir).scan("scores").collect().height == before_scores.height - lost
    if record == "manifest":
        assert main(["verify", str(results_dir)]) == 1
        out = capsys.readouterr().out
        assert f"{victim}: damaged Manifest record" in out and "`fade-sweep run ... --resume` sets it aside" in out
        assert f"{lost} runs missing" in out

    told = sweep if record == "sweep.yaml" else results_dir / "sweep.yaml"  # the command the readers named
    assert main(["run", str(told), "--storage", str(results_dir.parent), "--resume"]) == 0
    out = capsys.readouterr().out
    if record == "manifest":
        assert f"Set aside 1 damaged file of committed packs (manifests/{victim.name})" in out
    else:
        again = "the next run that runs packs writes it" if record == "status.json" else "written anew"
        assert f"{victim}: " in out and f"set aside as {results_dir / 'history' / f'damaged-{victim.name}'}; {again}" in out
    assert (results_dir / "history" / f"damaged-{victim.name}").exists()  # kept as it was, not lost
    after = Store.open(results_dir).scan("scores").collect().sort(keys)
    assert after.drop("wall_seconds").equals(before_scores.drop("wall_seconds"))  # the re-run pack's scores, bit for bit
    assert Store.open(results_dir).scan("curves").collect().sort([*keys, "step"]).equals(before_curves)
    assert main(["verify", str(results_dir)]) == 0
    capsys.readouterr()
    for command in (["table", str(results_dir)], ["status", str(results_dir)]):
        assert main(command) == 0
        captured = capsys.readouterr()
        assert captured.err == "", captured.err
    assert main(["table", str(results_dir)]) == 0
    assert capsys.readouterr().out == before_table


@ray.remote(num_cpus=1)
def _read_through_the_board(prefix: str, seeds: list[int], steps: int, chunk: int) -> tuple[list, str]:
    """A worker's reads of a pack's streams, chunk by chunk, through its node's board: the segments it drew and a
    digest of what it read."""
    import hashlib

    from sweeps.tune.stream_share import attach
    from tasks import LinearTrackingStream, make_stream
    from tasks.stream import stacked
    from tasks.stream_cache import SHARED_SEGMENTS

    drawn, draw = [], LinearTrackingStream.draw_blocks
    LinearTrackingStream.draw_blocks = lambda self, first, last: drawn.append((self.seed, first)) or draw(self, first, last)
    SHARED_SEGMENTS.clear()
    try:
        attach(prefix)
        streams = [make_stream("linear_tracking", {"noise": 1.0, "steps": steps, "bin": 1}, seed) for seed in seeds]
        digest = hashlib.sha256()
        for start in range(0, steps, chunk):
            for part in stacked(streams, start, min(chunk, steps - start)):
                digest.update(part.tobytes())
        return drawn, digest.hexdigest()
    finally:
        LinearTrackingStream.draw_blocks, SHARED_SEGMENTS.node = draw, None
        SHARED_SEGMENTS.clear()


def test_a_node_s_workers_draw_each_segment_once_between_them(local_ray):
    """Two workers reading the same seeds at once (two packs of a sweep): each segment is drawn by one of them and
    both read exactly the streams a worker alone reads."""
    import hashlib

    from sweeps.tune.stream_share import end_boards, node_boards
    from tasks import make_stream
    from tasks.stream import SEGMENT_STEPS, stacked

    steps, seeds, chunk = 2 * SEGMENT_STEPS + 3000, [0, 1, 2, 3], 50_000
    prefix, boards = node_boards()
    try:
        (drawn_a, digest_a), (drawn_b, digest_b) = ray.get(
            [_read_through_the_board.remote(prefix, seeds, steps, chunk) for _ in range(2)])
    finally:
        end_boards(boards)
    assert sorted(drawn_a + drawn_b) == [(seed, first) for seed in seeds for first in (0, 32, 64)]
    alone = [make_stream("linear_tracking", {"noise": 1.0, "steps": steps, "bin": 1}, seed) for seed in seeds]
    digest = hashlib.sha256()
    for start in range(0, steps, chunk):
        for part in stacked(alone, start, min(chunk, steps - start)):
            digest.update(part.tobytes())
    assert digest_a == digest_b == digest.hexdigest()


def test_a_sweep_read_through_the_boards_stores_the_numbers_of_one_read_alone(finished, tmp_path, monkeypatch):
    """The tiny sweep's streams are too cheap for boards (stream_share.MIN_DRAW_SECONDS); forced through them, it
    stores exactly the scores of the run that read them alone."""
    from sweeps.tune import stream_share

    started = []
    node_boards = stream_share.node_boards
    monkeypatch.setattr(stream_share, "MIN_DRAW_SECONDS", 0.0)
    monkeypatch.setattr("sweeps.tune.wiring.node_boards", lambda *a: started.append(a) or node_boards(*a))
    sweep, alone = finished
    assert main(["run", str(sweep), "--storage", str(tmp_path), "--chunk-steps", "700"]) == 0
    assert started and started[0][1] == 2  # the two slots of this Ray
    columns = ["config_id", "seed", "score"]
    shared = Store.open(tmp_path / "tiny").scan("scores").select(columns).sort(columns[:2]).collect()
    assert shared.equals(Store.open(alone).scan("scores").select(columns).sort(columns[:2]).collect())


def test_boards_start_only_where_there_is_something_to_share():
    from sweeps.packs.dryrun import STREAM_RATES, draw_seconds
    from sweeps.plan import plan_packs
    from sweeps.spec import parse_sweep
    from sweeps.tune.stream_share import MIN_DRAW_SECONDS, node_boards

    long = parse_sweep({**SWEEP, "task_settings": {**SWEEP["task_settings"], "steps": 2_000_000, "bin": 200_000}}, "test")
    packs = plan_packs(long, 2, set(), None)
    assert draw_seconds(packs) == pytest.approx(SEEDS * 2_000_000 / STREAM_RATES["linear_tracking"])  # once a seed
    assert draw_seconds(plan_packs(parse_sweep(SWEEP, "test"), 2, set(), None)) < MIN_DRAW_SECONDS
    assert node_boards(MIN_DRAW_SECONDS / 2, 2) == (None, []) and node_boards(draw_seconds(packs), 1) == (None, [])
