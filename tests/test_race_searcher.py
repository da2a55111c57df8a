"""The race's searcher without Ray: `PackSearcher` driven the way Tune drives it (suggest while a slot is free,
on_trial_complete as trials end, in any order), each pack "run" by writing known scores into a real store.

It hands out exactly the runs the race asks for, never a run twice; methods race apart (one method's round
starts while another's is still out); and a race stopped after any number of finished packs, then resumed
with a fresh `RaceRounds` on the same store, writes the same race.json, byte for byte, as an uninterrupted one
(and as the race replayed on the full grid's scores)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import yaml

from sweeps.analysis.race import race_record, race_rounds, replay, replay_stored
from sweeps.analysis.raced import TEST
from sweeps.cli import main
from sweeps.packs import PackOutcome
from sweeps.plan import Pack
from sweeps.spec import parse_sweep
from sweeps.store import Store
from sweeps.store.race import raced_pairs, wanted_pairs
from sweeps.store.sweep_record import check_and_record
from sweeps.packs.checkpoint_files import CHECKPOINT_FILE, CHECKPOINT_META
from sweeps.store.records import (
    PACKS_FILE,
    RACE_FILE,
    CheckpointRecord,
    RaceDecision,
    RaceRecord,
    parse_record,
    record_json,
    write_record,
)
from sweeps.tune.options import SweepInterrupted
from sweeps.tune.racing import RaceRounds, RoundInterrupted
from sweeps.tune.searcher import PackSearcher, pack_config, pack_of
from sweeps.tune.resume import config_index, packs_record
from tests.test_race import RACED

# every (optimizer, values) on all 6 seeds: sgd alpha=0.1 out after round 1, fade theta=0 out after round 1;
# the fade survivor races alone from round 2 on; sgd 0.01 and 0.001 get every seed at once after round 1 (their
# 1000-step runs cost less than their rounds' packs) and 0.001, a little worse on every seed, is out after round 2
# (paired p 0.04 on 4 seeds; 0.11 on 3): 4 rounds each
FULL = {("sgd", (0.1,)): [1.0, 1.0, 1.0, 1.0, 1.0, 1.0], ("sgd", (0.01,)): [0.9, 0.9, 0.9, 1.3, 1.3, 1.3],
        ("sgd", (0.001,)): [0.9 * math.exp(0.01), 0.9, 0.9 * math.exp(0.02), 1.3 * math.exp(0.012),
                            1.3 * math.exp(0.015), 1.3 * math.exp(0.011)],
        ("fade", (0.1, 0.0, -2.3)): [2.0, 2.1, 2.0, 2.0, 2.1, 2.0], ("fade", (0.1, 0.01, -2.3)): [1.5, 1.6, 1.5, 1.5, 1.6, 1.5]}
DOCUMENT = {**RACED, "optimizers": {**RACED["optimizers"], "sgd": {"alpha": [0.1, 0.01, 0.001]}}}
SLOTS = 2


def _score_of(sweep) -> dict[tuple[str, int], float]:
    by_id = {}
    for e in sweep.experiments:
        for c in e.cells:
            values = tuple(v for _, v in c.hyperparameters)
            by_id.update({(c.config_id, s): FULL[(e.optimizer, values)][i] for i, s in enumerate(sweep.seeds)})
    return by_id


def _store(folder: Path):
    sweep = parse_sweep(DOCUMENT, "t")
    folder.mkdir(parents=True)
    (folder / "sweep.yaml").write_text(yaml.safe_dump(DOCUMENT))
    check_and_record(Store.open(folder).location, sweep, "float64")
    return sweep, Store.open(folder)


def _run(pack: Pack, store: Store, scores: dict) -> None:
    """The pack's trial: its runs' known scores committed as a real pack."""
    score = np.array([scores[pair] for pair in pack.pairs()])
    curves = {"mse": np.stack([score, score]).T, "decay_relevant": None, "decay_irrelevant": None,
              "step_size_relevant": None, "step_size_irrelevant": None}
    if pack.experiment.optimizer == "fade":
        curves.update(decay_relevant=np.full((len(score), 2), 0.1), decay_irrelevant=np.full((len(score), 2), 0.2))
    store.write_pack(pack, PackOutcome(score, ~np.isfinite(score), np.array([2, 4]), curves, 1.0))


def _tune(sweep, store: Store, order: random.Random, stop_after: int | None = None) -> tuple[list[Pack], bool]:
    """Tune's loop over the searcher: at most SLOTS trials at once, a random running trial ends next.
    Returns the packs run and whether the searcher said FINISHED (False: stopped after `stop_after` packs)."""
    rounds = RaceRounds(sweep, store, {"cpus": SLOTS, "runs_per_pack": 2})
    start = rounds.start(resume=True, dtype="float64")
    index = config_index(sweep)
    searcher = PackSearcher(start.packs, lambda p: p.runs, lambda p: None, rounds.after)
    scores, running, ran, n = _score_of(sweep), {}, [], 0
    while True:
        while len(running) < SLOTS:
            config = searcher.suggest(f"t{n}")
            if config is None or config == PackSearcher.FINISHED:
                break
            running[f"t{n}"] = pack_of(config, index)  # what the trainable rebuilds
            n += 1
        if config == PackSearcher.FINISHED and not running:
            return ran, True
        assert running, "the searcher waits with nothing running"
        trial = order.choice(sorted(running))
        if stop_after is not None and len(ran) == stop_after:
            return ran, False  # an interrupt: the running packs never commit
        _run(running[trial], store, scores)
        ran.append(running.pop(trial))
        searcher.on_trial_complete(trial)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> tuple[bytes, list[Pack]]:
    sweep, store = _store(tmp_path_factory.mktemp("whole") / "raced")
    ran, finished = _tune(sweep, store, random.Random(0))
    assert finished
    return (store.location.read_bytes(RACE_FILE)), ran


def test_the_searcher_hands_out_exactly_the_runs_the_race_asks_for_once(uninterrupted, tmp_path):
    recorded, ran = uninterrupted
    sweep = parse_sweep(DOCUMENT, "t")
    pairs = [pair for pack in ran for pair in pack.pairs()]
    assert len(pairs) == len(set(pairs))  # no run twice
    race = parse_record(RaceRecord, recorded, RACE_FILE)
    asked = raced_pairs(sweep, race)
    # what the race asks for, and the seeds given at once after round 1 to configurations a later round put out
    # (sgd alpha=0.001, out after round 2: its last two seeds are run, and read, all the same)
    later = {d.config_id for d in race.decisions if d.round >= 2}  # in the race after round 1
    extra = set(pairs) - asked
    assert asked <= set(pairs) and extra and {c for c, _ in extra} <= later
    assert wanted_pairs(sweep, lambda: race, lambda: set(pairs)) == set(pairs)  # readers read every one
    assert len(pairs) < len(sweep.pairs)
    # the decisions are those of the race replayed on the full grid's scores
    sweep_full, full_store = _store(tmp_path / "full")
    scores = _score_of(sweep_full)
    for e in sweep_full.experiments:
        _run(Pack(e, e.cells, sweep_full.seeds), full_store, scores)
    assert record_json(race_record(sweep_full, replay_stored(sweep_full, full_store.scan("scores", all_runs=True)))) == recorded
    assert [m.rounds for m in race.methods] == [4, 4] and all(m.finished for m in race.methods)


def test_methods_race_apart_a_round_starts_while_another_method_s_is_out(uninterrupted):
    _, ran = uninterrupted
    seeds_seen = {}
    interleaved = False
    for pack in ran:
        method = pack.experiment.optimizer
        other = [n for m, n in seeds_seen.items() if m != method]
        here = max(pack.seeds)
        interleaved |= any(n > here for n in other)  # another method was a round ahead when this pack ran
        seeds_seen[method] = max(seeds_seen.get(method, 0), here)
    assert interleaved


@pytest.mark.parametrize("stop_after", [0, 1, 2, 3, 5, 7, 9])
def test_a_race_stopped_after_any_pack_resumes_to_the_same_race_json(uninterrupted, tmp_path, stop_after):
    recorded, _ = uninterrupted
    sweep, store = _store(tmp_path / "raced")
    first, _ = _tune(sweep, store, random.Random(stop_after), stop_after)
    resumed, finished_now = _tune(sweep, Store.open(tmp_path / "raced"), random.Random(99))
    assert finished_now
    assert store.location.read_bytes(RACE_FILE) == recorded
    pairs = [pair for pack in [*first, *resumed] for pair in pack.pairs()]
    assert len(pairs) == len(set(pairs))


def test_an_interrupt_names_each_method_s_round(tmp_path):
    sweep, store = _store(tmp_path / "raced")
    rounds = RaceRounds(sweep, store, {"cpus": 1})
    rounds.start(resume=False, dtype="float64")
    err = RoundInterrupted(SweepInterrupted(1, 3, store.location), rounds)
    assert str(err) == "interrupted in the race (sgd in round 1, fade in round 1; at most 4 rounds): 1 of 3 packs done"


def test_a_store_raced_before_methods_raced_apart_reads_and_resumes(uninterrupted, tmp_path, capsys):
    """A store as main's driver left it after round 1 (one replay of all methods, race.json without `methods`):
    `table` and `status` read it, and a resume finishes the race to the same race.json as a race run now."""
    recorded, _ = uninterrupted
    sweep, store = _store(tmp_path / "raced")
    scores = _score_of(sweep)
    first = race_rounds(sweep)[0]
    for e in sweep.experiments:
        _run(Pack(e, e.cells, first), store, scores)
    ids = [c.config_id for e in sweep.experiments for c in e.cells]
    played = replay(store.scan("scores", all_runs=True), ids, race_rounds(sweep), sweep.race.alpha)  # main's replay
    old = RaceRecord(test=TEST, alpha=sweep.race.alpha, schedule=sweep.race.schedule(sweep.seeds),
                     seeds=sweep.race.seeds(sweep.seeds), finished=played.finished,
                     decisions=tuple(RaceDecision(**row) for row in played.decisions.to_dicts()))
    document = json.loads(record_json(old))
    del document["methods"]  # main's RaceRecord had no such field
    (tmp_path / "raced" / RACE_FILE).write_text(json.dumps(document, indent=1))
    assert main(["table", str(tmp_path / "raced")]) == 0
    out = capsys.readouterr().out
    assert "sgd" in out and "fade" in out and "Run-steps: 1.800e+04 of the full grid's 3.000e+04" in out
    assert main(["status", str(tmp_path / "raced")]) == 0
    assert "3 runs of its sweep missing" in capsys.readouterr().out  # round 2: the survivors on the 4th seed
    ran, finished = _tune(sweep, Store.open(tmp_path / "raced"), random.Random(5))
    assert finished and (tmp_path / "raced" / RACE_FILE).read_bytes() == recorded
    assert not {pair for pack in ran for pair in pack.pairs()} & {(c, s) for c in ids for s in first}  # nothing re-run


def test_a_resumed_round_continues_its_checkpointed_pack_and_plans_the_rest(tmp_path):
    """A round cut into two packs, one with a checkpoint when the driver died: the resume continues that pack,
    plans the other's runs afresh, and the method's rounds are decided once both are in (1000-step runs: after
    round 1 its survivors cost less on every remaining seed than its rounds' packs, so they get them at once)."""
    sweep, store = _store(tmp_path / "raced")
    scores = _score_of(sweep)
    first = race_rounds(sweep)[0]
    for e in sweep.experiments:
        _run(Pack(e, e.cells, first), store, scores)
    standing = replay_stored(sweep, store.scan("scores", all_runs=True))
    sgd = sweep.experiments[0]
    alive = [c for c in sgd.cells if c.config_id in dict(standing.methods)[sgd.label].alive]
    assert len(alive) == 2
    remaining = sweep.race.seeds(sweep.seeds)[len(first):]
    checkpointed, other = (Pack(sgd, (c,), remaining) for c in alive)
    write_record(store.location, f"tune-x/{PACKS_FILE}", packs_record(sweep, [checkpointed, other]))
    folder = "tune-x/trial_a/checkpoint_000000"
    write_record(store.location, f"{folder}/{CHECKPOINT_META}",
                 CheckpointRecord(pack_id=checkpointed.pack_id, steps_done=500, total_steps=1000, dtype="float64"))
    store.location.write_bytes(f"{folder}/{CHECKPOINT_FILE}", b"tensors")
    rounds = RaceRounds(sweep, Store.open(tmp_path / "raced"), {"cpus": 2})
    start = rounds.start(resume=True, dtype="float64")
    assert start.resume_from == {checkpointed.pack_id: folder}
    sgd_packs = [p for p in start.packs if p.experiment is sgd]
    assert sgd_packs[0] == checkpointed and {pair for p in sgd_packs[1:] for pair in p.pairs()} == set(other.pairs())
    _run(checkpointed, store, scores)
    assert rounds.after(checkpointed) == [] and rounds.rounds[sgd.label] == (2, False)  # the other pack is out
    for pack in sgd_packs[1:]:
        _run(pack, store, scores)
        assert rounds.after(pack) == []
    assert rounds.rounds[sgd.label] == (len(race_rounds(sweep)), True)  # every round decided on those runs


def test_a_race_s_progress_line_counts_towards_its_most_and_names_each_method_s_round(tmp_path):
    """One line: run-steps done of the most the race can still need, one rate, each method's round."""
    from sweeps.cli.text import progress_line
    from sweeps.tune.progress import SweepProgress

    sweep, store = _store(tmp_path / "raced")
    rounds = RaceRounds(sweep, store, {"cpus": 1})
    start = rounds.start(resume=False, dtype="float64")
    progress = SweepProgress(sweep.name, start.packs, store.location)
    progress.race(rounds.rounds, 4, rounds.most_run_steps)
    assert progress.status.run_steps_total == 5 * 6 * 1000  # nothing out yet: every configuration on every seed
    _run(start.packs[0], store, _score_of(sweep))
    following = rounds.after(start.packs[0])
    progress.add(following)
    progress.race(rounds.rounds, 4, rounds.most_run_steps)
    line = progress_line(progress.status)
    method = start.packs[0].experiment.optimizer
    other = "fade" if method == "sgd" else "sgd"
    assert "rounds (of at most 4): " in line and f"{method} 2" in line and f"{other} 1" in line
    assert "packs" not in line and f"of at most {progress.status.run_steps_total:.3e}" in line  # one thing: no pack counts
    out = {c for c, _ in start.packs[0].pairs()} - set(dict(rounds.standing.methods)[start.packs[0].experiment.label].alive)
    assert progress.status.run_steps_total == (5 * 6 - len(out) * 3) * 1000  # an eliminated configuration keeps 3 seeds


def test_a_race_s_bar_shows_its_rounds_and_follows_its_shrinking_most(tmp_path):
    """The terminal's bar of a race says what its lines say: each method's round (no pack counts) and the
    share of the most run-steps the race can need, a total that shrinks as configurations are eliminated; a line
    comes when a round is decided, naming the new round (not when the pack that ended the old one lands)."""
    from sweeps.cli.progress import Bar, bar_text
    from sweeps.tune.options import ExecutionOptions
    from sweeps.tune.racing import race_progress

    sweep, store = _store(tmp_path / "raced")
    rounds = RaceRounds(sweep, store, {"cpus": 1})
    start = rounds.start(resume=False, dtype="float64")
    lines = []  # (the rounds a milestone's line names), as a display gets them

    class Display:
        def update(self, status, milestone):
            if milestone:
                lines.append(dict(status.rounds))

    progress = race_progress(sweep, start, store, ExecutionOptions(display=lambda status: Display()), rounds)
    progress.setup()  # Tune's call: the display is made
    bar = Bar(progress.status)
    try:
        before, method = progress.status.run_steps_total, start.packs[0].experiment.label
        _run(start.packs[0], store, _score_of(sweep))
        lines.clear()
        progress.on_trial_result(0, [], type("Trial", (), {"config": {"pack_id": start.packs[0].pack_id}})(),
                                 {"written": True})
        assert lines == []  # the pack that ends a round: no line naming the round it ended ...
        progress.add(rounds.after(start.packs[0]))  # the round decided: the progress told (race_progress's wiring)
        assert [line[method] for line in lines] == [2]  # ... the decision's line names the next, once
        bar.update(progress.status, True)
        task = bar._progress.tasks[0]
        assert progress.status.run_steps_total < before and task.total == progress.status.run_steps_total
        assert task.completed == start.packs[0].run_steps
        text = bar_text(progress.status)
        assert text.startswith("rounds (of at most 4): ") and "packs" not in text
    finally:
        bar.close()


def test_a_round_fills_the_slots_its_method_has(tmp_path):
    """Packing for rounds: with two methods racing on two slots each method's round is one pack (the other
    method fills the other slot); a method racing alone has its round cut into packs for both slots."""
    sweep, store = _store(tmp_path / "raced")
    start = RaceRounds(sweep, store, {"cpus": 2}).start(resume=False, dtype="float64")
    assert sorted(p.experiment.optimizer for p in start.packs) == ["fade", "sgd"]  # round 1: a pack per method
    alone = {**DOCUMENT, "name": "alone", "optimizers": {"sgd": {"alpha": [0.1, 0.01, 0.001, 0.002]}}}
    folder = tmp_path / "alone"
    folder.mkdir()
    (folder / "sweep.yaml").write_text(yaml.safe_dump(alone))
    single = parse_sweep(alone, "t")
    check_and_record(Store.open(folder).location, single, "float64")
    packs = RaceRounds(single, Store.open(folder), {"cpus": 2}).start(resume=False, dtype="float64").packs
    assert len(packs) == 2 and {pair for p in packs for pair in p.pairs()} == {
        (c.config_id, s) for c in single.experiments[0].cells for s in race_rounds(single)[0]}


def test_the_searcher_is_finished_only_once_every_pack_ran_and_every_trial_s_end_was_told(tmp_path):
    """What run_packs asks when Tune returns, which it does after an interrupt too: packs not handed out yet (a
    grid's beyond the limiter) or a trial whose end Tune never told leave the searcher, and the run, unfinished."""
    sweep, store = _store(tmp_path / "raced")
    packs = RaceRounds(sweep, store, {"cpus": SLOTS, "runs_per_pack": 2}).start(resume=False, dtype="float64").packs
    assert len(packs) > 2
    grid = PackSearcher(packs, lambda p: p.runs, lambda p: None)  # no `after`: the plain path
    for n in range(len(packs) - 1):
        grid.suggest(f"t{n}")
        grid.on_trial_complete(f"t{n}")
        assert not grid.finished and len(grid.queued) == len(packs) - n - 1  # nothing running, packs left
    grid.suggest("last")
    assert not grid.finished and not grid.queued  # its trial's end not told yet
    grid.on_trial_complete("last")
    assert grid.finished and grid.suggest("more") == PackSearcher.FINISHED
