"""A run's numbers do not depend on its pack, the pack size or the chunk length."""

import numpy as np
import pytest
import torch

from sweeps.packs import make_runner
from sweeps.plan import Pack
from sweeps.spec import make_config, parse_sweep


def _experiment(optimizer, grid):
    sweep = parse_sweep(
        {"name": "t", "task": "linear_tracking", "task_settings": {"steps": 700, "bin": 1, "noise": 1.0},
         "seeds": [0, 1, 2], "optimizers": {optimizer: grid}},
        "test",
    )
    return sweep.experiments[0]


def _per_step_losses(experiment, configs, seeds, chunk_steps, dtype=torch.float32):
    pack = Pack(experiment, tuple(make_config(experiment, c) for c in configs), tuple(seeds))
    runner = make_runner(pack, chunk_steps, dtype)
    for _ in runner.run():
        pass
    mse = runner.outcome().curves["mse"]  # bin = 1 step: the per-step losses
    return {(c_id.config_id, s): mse[i * len(seeds) + j] for i, c_id in enumerate(pack.configs) for j, s in enumerate(seeds)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_run_alone_equals_run_in_mixed_pack_and_other_chunks(dtype):
    grid = {"alpha": [0.05, 0.01], "theta_lambda": [0.01, 0.05], "gamma0": [-2.3, -4.6]}
    experiment = _experiment("fade", grid)
    configs = experiment.configs()
    packed = _per_step_losses(experiment, configs, [0, 1, 2], chunk_steps=256, dtype=dtype)
    target = configs[5]
    alone = _per_step_losses(experiment, [target], [1], chunk_steps=700, dtype=dtype)
    odd_chunks = _per_step_losses(experiment, [configs[0], target], [2, 1], chunk_steps=33, dtype=dtype)
    key = (make_config(experiment, target).config_id, 1)
    assert np.isfinite(alone[key]).all() and alone[key].shape == (700,)
    np.testing.assert_array_equal(packed[key], alone[key])
    np.testing.assert_array_equal(odd_chunks[key], alone[key])
    # and the runs of one pack really differ from each other
    assert not np.array_equal(packed[key], packed[(make_config(experiment, configs[0]).config_id, 1)])


def test_same_seed_same_stream_and_initial_weights_across_configs():
    experiment = _experiment("sgd", {"alpha": [0.01, 0.02]})
    losses = _per_step_losses(experiment, experiment.configs(), [0, 1], chunk_steps=700)
    ids = [make_config(experiment, c).config_id for c in experiment.configs()]
    # first step: prediction of w0 on x_0 before any update depends on the seed only
    assert losses[(ids[0], 0)][0] == losses[(ids[1], 0)][0]
    assert losses[(ids[0], 0)][0] != losses[(ids[0], 1)][0]


def test_resume_from_state_dict_is_exact(tmp_path):
    """A pack stopped after some chunks and resumed from its saved state ends identical."""
    experiment = _experiment("fade_idbd", {"theta": [0.01, 0.02], "beta0": [-4.6], "gamma0": [-2.3]})
    configs = tuple(make_config(experiment, c) for c in experiment.configs())
    pack = Pack(experiment, configs, (0, 1, 2))
    straight = make_runner(pack, 100)
    for _ in straight.run():
        pass
    first = make_runner(pack, 100)
    progress = first.run()
    next(progress), next(progress), next(progress)  # 300 of 700 steps
    torch.save(first.state_dict(), tmp_path / "ckpt.pt")
    resumed = make_runner(pack, 100)
    resumed.load_state_dict(torch.load(tmp_path / "ckpt.pt", weights_only=True))
    assert resumed.steps_done == 300
    for _ in resumed.run():
        pass
    a, b = straight.outcome(), resumed.outcome()
    np.testing.assert_array_equal(a.score, b.score)
    for name, values in a.curves.items():
        if values is not None:
            np.testing.assert_array_equal(values, b.curves[name])
    with pytest.raises(ValueError, match="cannot resume pack"):
        make_runner(Pack(experiment, configs[:1], (0,)), 100).load_state_dict(first.state_dict())


def test_binned_scores_and_curves_do_not_depend_on_chunk_length():
    sweep = parse_sweep(
        {"name": "t", "task": "linear_tracking", "task_settings": {"steps": 1000, "bin": 250, "noise": 1.0},
         "seeds": [4, 5], "optimizers": {"idbd": {"theta_alpha": [0.01, 0.02], "beta0": [-3.0]}}},
        "test",
    )
    (experiment,) = sweep.experiments
    pack = Pack(experiment, tuple(make_config(experiment, c) for c in experiment.configs()), sweep.seeds)
    outcomes = []
    for chunk in (1000, 333, 64):
        runner = make_runner(pack, chunk, torch.float32)
        for _ in runner.run():
            pass
        outcomes.append(runner.outcome())
    for other in outcomes[1:]:
        np.testing.assert_array_equal(other.score, outcomes[0].score)
        for name, values in outcomes[0].curves.items():
            if values is not None:
                np.testing.assert_array_equal(other.curves[name], values)
    assert outcomes[0].curves["mse"].shape == (4, 4) and np.isfinite(outcomes[0].score).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_run_gives_the_same_bits_in_every_lane_and_pack_size(dtype):
    """One run (its hyperparameters and stream slot) at lane positions 0, 5 and 12 of a pack
    of 13 runs, alone, and in packs of 9 and 21 (not multiples of the block width, so it
    also sits in padded tails), in chunks of 7 and 50 steps, with and without per-step losses:
    the same losses, loss sums and final state, to the bit, for every learner. Its block's
    lanes read one stream (alone), or two or three (the packs' random slots): the kernel
    reads the streams differently for each."""
    from fade_core.linear import LINEAR_LEARNERS, advance, hyperparameter_matrix, init_state, initial_weights

    steps, slots, d = 50, 3, 20
    rng = np.random.default_rng(1)
    x = torch.from_numpy(rng.standard_normal((steps, slots, d))).to(dtype)
    y = torch.from_numpy(rng.standard_normal((steps, slots))).to(dtype)
    ranges = {"alpha": (0.001, 0.05), "lambda": (0.0, 0.05), "theta_alpha": (0.0, 0.05), "beta0": (-6.0, -2.0),
              "theta_lambda": (0.0, 0.1), "gamma0": (-6.0, -1.0), "theta": (0.0, 0.05)}
    for name, learner in LINEAR_LEARNERS.items():
        target = {n: (ranges[n][0] + ranges[n][1]) / 2 for n in learner.hyperparameters}

        def run(size: int, position: int, chunk: int, keep_losses: bool = True) -> tuple[np.ndarray, ...]:
            hp = {n: rng.uniform(*ranges[n], size) for n in learner.hyperparameters}
            slot = torch.from_numpy(rng.integers(0, slots, size))
            for n in learner.hyperparameters:
                hp[n][position] = target[n]
            slot[position] = 1
            matrix = hyperparameter_matrix(learner, hp, size, dtype)
            state = init_state(learner, matrix, initial_weights(slot.tolist(), d, dtype))
            losses, sums = torch.empty(size, steps, dtype=dtype), np.zeros(size)
            for start in range(0, steps, chunk):
                stop = min(start + chunk, steps)
                part = torch.empty(size, stop - start, dtype=dtype) if keep_losses else None
                advance(learner, matrix, state, x[start:stop], y[start:stop], slot, part, sums)
                if keep_losses:
                    losses[:, start:stop] = part
            return (losses[position].numpy(), sums[position:position + 1], *(s[position].numpy() for s in state))

        alone = run(1, 0, steps)
        assert np.isfinite(alone[0]).all()
        for size, position, chunk in [(13, 0, 50), (13, 5, 7), (13, 12, 50), (9, 8, 7), (21, 17, 50), (21, 20, 7)]:
            for got, want in zip(run(size, position, chunk), alone):
                np.testing.assert_array_equal(got, want, err_msg=f"{name}: pack {size}, lane {position}, chunk {chunk}")
        # Without per-step losses (the pack engine's call): the same sums and state.
        for got, want in zip(run(13, 5, 7, keep_losses=False)[1:], alone[1:]):
            np.testing.assert_array_equal(got, want, err_msg=f"{name}: sums only")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_run_reads_its_stream_alike_whichever_seeds_share_its_block(dtype):
    """The kernel reads the streams one way for a block whose lanes share a seed, another for
    a block of two seeds and a third for more: runs of 5 seeds, as many per seed as a block
    has lanes (every block one seed), the same runs after 3 more runs of seed 0 (blocks of
    two seeds), and the first 7 alone (one block of five seeds) give those runs the same bits."""
    from fade_core.linear import LINEAR_LEARNERS, advance, hyperparameter_matrix, init_state, initial_weights
    from fade_core.linear.kernel import lane_blocks, lanes_for

    steps, seeds, d = 60, 5, 20
    rng = np.random.default_rng(3)
    x = torch.from_numpy(rng.standard_normal((steps, seeds, d))).to(dtype)
    y = torch.from_numpy(rng.standard_normal((steps, seeds))).to(dtype)
    for learner_name in ("sgd", "fade", "coupled"):
        learner = LINEAR_LEARNERS[learner_name]
        lanes = lanes_for(learner, np.dtype(str(dtype)[6:]))
        slot = np.arange(seeds * lanes) % seeds
        layouts = {"one seed": (slot, len(slot)), "two seeds": (np.concatenate([slot, [0, 0, 0]]), len(slot)),
                   "five seeds": (slot[:7], 7)}
        for name, (slots, _) in layouts.items():
            per_block = {len(set(slots[lane_run])) for lane_run in lane_blocks(slots, lanes)[0]}
            assert per_block == {"one seed": {1}, "two seeds": {1, 2}, "five seeds": {5}}[name], (name, per_block)
        scale = 1 + rng.uniform(-0.5, 0.5, len(slot) + 3)

        def run(slots: np.ndarray) -> list[np.ndarray]:
            hp = {n: 0.01 * scale[: len(slots)] for n in learner.hyperparameters}
            hp.update({n: np.full(len(slots), -3.0) for n in ("beta0", "gamma0") if n in hp})
            matrix = hyperparameter_matrix(learner, hp, len(slots), dtype)
            state = init_state(learner, matrix, initial_weights(slots.tolist(), d, dtype))
            losses, sums = torch.empty(len(slots), steps, dtype=dtype), np.zeros(len(slots))
            advance(learner, matrix, state, x, y, torch.from_numpy(slots), losses, sums)
            return [losses.numpy(), sums, *(s.numpy() for s in state)]

        alone = run(layouts["one seed"][0])
        assert np.isfinite(alone[0]).all()
        for name, (slots, kept) in layouts.items():
            for got, want in zip(run(slots), alone):
                np.testing.assert_array_equal(got[:kept], want[:kept], err_msg=f"{learner_name}: {name}")


def test_linear_pack_gives_the_same_bits_on_one_or_two_threads():
    """The blocks of a pack split into one share per thread (`in_threads`): a run's losses,
    loss sum and final state do not depend on how many threads advanced its pack."""
    import numba

    from fade_core.linear import LINEAR_LEARNERS, advance, hyperparameter_matrix, init_state, initial_weights

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs 2 CPU cores (numba has 1 thread here)")
    learner, runs, steps, slots = LINEAR_LEARNERS["fade"], 37, 300, 3
    rng = np.random.default_rng(2)
    x = torch.from_numpy(rng.standard_normal((steps, slots, 20))).float()
    y = torch.from_numpy(rng.standard_normal((steps, slots))).float()
    hp = {"alpha": rng.uniform(0.001, 0.05, runs), "theta_lambda": rng.uniform(0, 0.1, runs), "gamma0": -2.3}
    slot = torch.from_numpy(rng.integers(0, slots, runs))
    matrix = hyperparameter_matrix(learner, hp, runs, torch.float32)
    results, before = [], numba.get_num_threads()
    try:
        for threads in (1, 2):
            numba.set_num_threads(threads)
            state = init_state(learner, matrix, initial_weights(slot.tolist(), 20, torch.float32))
            losses, sums = torch.empty(runs, steps), np.zeros(runs)
            advance(learner, matrix, state, x, y, slot, losses, sums)
            results.append([losses.numpy(), sums, *(s.numpy() for s in state)])
    finally:
        numba.set_num_threads(before)
    assert np.isfinite(results[0][1]).all()
    for one, two in zip(*results):
        np.testing.assert_array_equal(one, two)
