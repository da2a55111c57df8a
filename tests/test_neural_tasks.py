"""Neural tasks: stream properties, the EMNIST loader's errors, pack invariance, CUDA."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
import torch

from sweeps.packs import make_runner
from sweeps.plan import Pack
from sweeps.spec import SweepError, make_config, parse_sweep
from tasks.emnist import CLASSES, DatasetError, EmnistSettings, LabelPermutedStream, PartialEmnistSettings, load_emnist
from tasks.nonlinear_tracking import GROUP_SIZES, NonlinearTrackingSettings, NonlinearTrackingStream
from tests.emnist_fixture import write_idx_dataset


@pytest.fixture(scope="module")
def emnist_dir(tmp_path_factory):
    return write_idx_dataset(tmp_path_factory.mktemp("emnist"), images=470)


# ---------------------------------------------------------------- nonlinear tracking
def test_nonlinear_groups_and_flip_schedule():
    settings = NonlinearTrackingSettings(steps=6000, score_window=1000, period=100, slow_multiplier=15, bin=1000)
    stream = NonlinearTrackingStream(settings, seed=4)
    groups = stream.groups
    assert {k: len(v) for k, v in groups.items()} == GROUP_SIZES
    assert sorted(np.concatenate(list(groups.values()))) == list(range(20))
    heads = np.stack([stream.teacher_head_at(t) for t in range(0, 6000, 50)])  # (120, 20, 256)
    assert np.array_equal(np.abs(heads), np.abs(heads[:1]).repeat(len(heads), 0)), "changes are sign flips only"
    changed = np.any(heads[1:] != heads[:-1], axis=2)  # (119, 20): output k changed between samples i and i+1
    steps_after = np.arange(50, 6000, 50)
    assert not changed[:, groups["stable"]].any()
    fast_changes = steps_after[changed[:, groups["fast"]].any(axis=1)]
    slow_changes = steps_after[changed[:, groups["slow"]].any(axis=1)]
    assert set(fast_changes) == set(range(100, 6000, 100))  # every period, at its boundaries only
    assert set(slow_changes) == {1500, 3000, 4500}
    flips = heads[2, groups["fast"]] != heads[0, groups["fast"]]  # after one fast change
    assert 0.4 < flips.mean() < 0.6, "each weight into a fast output flips with probability 1/2"


def test_nonlinear_targets_are_the_teacher_and_random_access():
    settings = NonlinearTrackingSettings(steps=9000, score_window=1000, period=500, bin=1000)
    stream = NonlinearTrackingStream(settings, seed=1)
    x, y = stream.chunk(0, 9000)
    for t in (0, 499, 500, 4097, 7500, 8999):
        expected = stream.teacher_head_at(t) @ np.maximum(stream.teacher_hidden @ x[t].double().numpy(), 0)
        np.testing.assert_allclose(y[t].numpy(), expected, rtol=1e-5, atol=1e-6)
    again = NonlinearTrackingStream(settings, seed=1)
    xs, ys = again.chunk(4000, 700)
    assert torch.equal(xs, x[4000:4700]) and torch.equal(ys, y[4000:4700])
    other = NonlinearTrackingStream(settings, seed=2).chunk(0, 10)[0]
    assert not torch.equal(other, x[:10])


def test_teacher_uses_pytorch_default_linear_init_bounds():
    stream = NonlinearTrackingStream(NonlinearTrackingSettings(steps=1000, score_window=1000, bin=1000), seed=0)
    for w, fan_in in ((stream.teacher_hidden, 32), (stream.teacher_head, 256)):
        bound = 1 / np.sqrt(fan_in)
        assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound


# ---------------------------------------------------------------- EMNIST
def _stream(emnist_dir, seed=0, partial=False, steps=20_000, period=2500):
    kind = PartialEmnistSettings if partial else EmnistSettings
    return LabelPermutedStream(kind(steps=steps, period=period, data_dir=str(emnist_dir), bin=period), seed)


def test_emnist_permutation_schedule_and_targets(emnist_dir):
    stream = _stream(emnist_dir)
    index, target = stream.chunk(0, 20_000)
    labels = load_emnist(stream.settings)[1].numpy()
    for k in range(8):
        perm = stream.permutation(k)
        assert sorted(perm) == list(range(CLASSES))
        window = slice(k * 2500, (k + 1) * 2500)
        assert np.array_equal(target[window].numpy(), perm[labels[index[window].numpy()]])
    assert not np.array_equal(stream.permutation(0), stream.permutation(1)), "a fresh permutation each window"
    i2, t2 = stream.chunk(2499, 3)  # random access across a permutation boundary
    assert torch.equal(i2, index[2499:2502]) and torch.equal(t2, target[2499:2502])


def test_partial_keeps_24_stable_classes(emnist_dir):
    stream = _stream(emnist_dir, seed=3, partial=True)
    assert len(stream.stable) == 24
    perms = np.stack([stream.permutation(k) for k in range(20)])
    assert (perms[:, stream.stable] == stream.stable).all()
    assert set(perms[:, stream.moving].ravel()) == set(stream.moving), "the others move among themselves"
    assert (perms[:, stream.moving] != stream.moving).any(axis=0).all()
    assert not np.array_equal(_stream(emnist_dir, seed=4, partial=True).stable, stream.stable), "chosen per seed"


def test_emnist_draws_are_uniform_with_replacement(emnist_dir):
    stream = _stream(emnist_dir, steps=200_000)
    index = stream.chunk(0, 200_000)[0].numpy()
    counts = np.bincount(index, minlength=470)
    expected = 200_000 / 470
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 470 + 5 * np.sqrt(2 * 470), f"chi-square {chi2:.0f} for 469 degrees of freedom"
    assert len(np.unique(index[:470])) < 470, "with replacement: repeats within N draws"


def test_emnist_inputs_are_normalised_pixels(emnist_dir):
    stream = _stream(emnist_dir)
    index, _ = stream.chunk(0, 5)
    x = stream.inputs(index, torch.device("cpu"), torch.float32)
    images = load_emnist(stream.settings)[0]
    torch.testing.assert_close(x, (images[index].float() / 255 - 0.5) / 0.5)
    assert x.shape == (5, 784) and images.dtype == torch.uint8


def test_emnist_reads_torchvision_layout_uncompressed(tmp_path):
    write_idx_dataset(tmp_path / "EMNIST" / "raw", images=94, split="bymerge", train=False, compress=False)
    images, labels = load_emnist(EmnistSettings(data_dir=str(tmp_path), split="bymerge", train=False))
    assert images.shape == (94, 784) and labels.max() == 46


def test_emnist_data_dir_from_environment(tmp_path, monkeypatch):
    write_idx_dataset(tmp_path, images=47)
    monkeypatch.setenv("FADE_EMNIST_DIR", str(tmp_path))
    assert EmnistSettings().data_dir == str(tmp_path)
    assert load_emnist(EmnistSettings())[0].shape == (47, 784)


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda d: None, "no emnist-balanced-train-images-idx3-ubyte"),
        (lambda d: (d / "emnist-balanced-train-images-idx3-ubyte.gz").write_bytes(b"not gzip"), "cannot read"),
        (lambda d: (d / "emnist-balanced-train-images-idx3-ubyte.gz").write_bytes(gzip.compress(b"\x00\x00\x08\x03" + bytes(12))[:-1]), "cannot read"),
        (lambda d: (d / "emnist-balanced-train-images-idx3-ubyte.gz").write_bytes(gzip.compress(b"\x00\x00\x0d\x03" + bytes(20))), "not an unsigned-byte IDX"),
        (lambda d: (d / "emnist-balanced-train-images-idx3-ubyte.gz").write_bytes(
            gzip.compress(b"\x00\x00\x08\x03" + (10).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2 + bytes(100))), "truncated"),
    ],
)
def test_missing_or_corrupt_emnist_is_a_clear_error(tmp_path, damage, message):
    write_idx_dataset(tmp_path, images=47)
    if message.startswith("no "):
        (tmp_path / "emnist-balanced-train-images-idx3-ubyte.gz").unlink()
    damage(tmp_path)
    with pytest.raises(DatasetError, match=message) as err:
        load_emnist(EmnistSettings(data_dir=str(tmp_path)))
    assert "\n" not in str(err.value)


def test_sweep_validation_of_neural_settings(tmp_path):
    base = {"name": "x", "seeds": 1, "optimizers": {"fade_sgd": {"alpha": 0.01, "theta_lambda": 0.1, "gamma0": -4.6}}}
    for steps, window in ((20000, 10000), (5000, 5000), (2_000_000, 500_000)):  # the window suggested passes
        settings = {"steps": steps, "score_window": 2_000_001}
        with pytest.raises(SweepError, match=f"score_window 2000001 exceeds steps {steps}.*e.g. {window},"):
            parse_sweep({**base, "task": "nonlinear_tracking", "task_settings": settings}, "f.yaml")
        parse_sweep({**base, "task": "nonlinear_tracking", "task_settings": {**settings, "score_window": window}}, "f.yaml")
    with pytest.raises(SweepError, match="multiple of bin"):
        parse_sweep({**base, "task": "nonlinear_tracking", "task_settings": {"steps": 20000, "score_window": 5500, "bin": 1000}}, "f.yaml")
    with pytest.raises(SweepError, match="split 'letters' does not have the task's 47 classes"):
        parse_sweep({**base, "task": "emnist_label_permuted", "task_settings": {"split": "letters"}}, "f.yaml")
    with pytest.raises(SweepError, match="fade_sgd does not take lambda"):
        parse_sweep({**base, "task": "emnist_label_permuted",
                     "optimizers": {"fade_sgd": {"alpha": 0.01, "theta_lambda": 0.1, "gamma0": -4.6, "lambda": 0.1}}}, "f.yaml")
    with pytest.raises(SweepError, match="unknown optimizer for task nonlinear_tracking"):
        parse_sweep({**base, "task": "nonlinear_tracking", "task_settings": {"steps": 2000, "score_window": 1000, "bin": 500},
                     "optimizers": {"idbd": {"theta_alpha": 0.01, "beta0": -4.6}}}, "f.yaml")


# ---------------------------------------------------------------- pack invariance
def _experiment(task, optimizer, grid, settings):
    return parse_sweep({"name": "t", "task": task, "task_settings": settings, "seeds": [0, 1, 2],
                        "optimizers": {optimizer: grid}}, "test").experiments[0]


def _outcome(experiment, configs, seeds, chunk_steps, device="cpu"):
    pack = Pack(experiment, tuple(make_config(experiment, c) for c in configs), tuple(seeds))
    runner = make_runner(pack, chunk_steps, torch.float32, device)
    for _ in runner.run():
        pass
    outcome = runner.outcome()
    return {(c.config_id, s): (outcome.score[i * len(seeds) + j], {k: v[i * len(seeds) + j] for k, v in outcome.curves.items() if v is not None})
            for i, c in enumerate(pack.configs) for j, s in enumerate(seeds)}


CASES = {
    "nonlinear": ("nonlinear_tracking", {"steps": 600, "score_window": 200, "bin": 100, "period": 50, "slow_multiplier": 3}),
    "emnist": ("emnist_partial_permuted", {"steps": 300, "bin": 50, "period": 70}),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("optimizer", ["fade_sgd", "fade_adam", "sgd_wclip"])
def test_run_alone_equals_run_in_a_mixed_pack_and_other_chunks(case, optimizer, emnist_dir):
    task, settings = CASES[case]
    if task.startswith("emnist"):
        settings = {**settings, "data_dir": str(emnist_dir)}
    grid = {"alpha": [0.01, 0.003], "theta_lambda": [0.0, 1.0], "gamma0": [-4.6]} if optimizer.startswith("fade") else {"alpha": [0.01, 0.05], "kappa": [1.0, 2.0]}
    experiment = _experiment(task, optimizer, grid, settings)
    configs = experiment.configs()
    packed = _outcome(experiment, configs, [0, 1, 2], chunk_steps=128)
    target = configs[3]
    alone = _outcome(experiment, [target], [1], chunk_steps=1000)
    odd = _outcome(experiment, [configs[0], target], [2, 1], chunk_steps=37)
    key = (make_config(experiment, target).config_id, 1)
    for other in (alone, odd):
        assert packed[key][0] == other[key][0]
        assert packed[key][1].keys() == other[key][1].keys()
        for name, values in packed[key][1].items():
            np.testing.assert_array_equal(values, other[key][1][name], err_msg=name)
    assert np.isfinite(packed[key][0])


def test_checkpoint_resume_equals_straight_run(emnist_dir):
    task, settings = CASES["emnist"]
    experiment = _experiment(task, "fade_adam", {"alpha": [0.003], "theta_lambda": [1.0], "gamma0": [-4.6]},
                             {**settings, "data_dir": str(emnist_dir)})
    pack = Pack(experiment, tuple(make_config(experiment, c) for c in experiment.configs()), (0, 1))
    straight = make_runner(pack, 60)
    for _ in straight.run():
        pass
    first = make_runner(pack, 60)
    progress = first.run()
    next(progress), next(progress)  # 120 steps, mid-bin
    resumed = make_runner(pack, 60)
    resumed.load_state_dict(first.state_dict())
    for _ in resumed.run():
        pass
    a, b = straight.outcome(), resumed.outcome()
    np.testing.assert_array_equal(a.score, b.score)
    for name in a.curves:
        if a.curves[name] is not None:
            np.testing.assert_array_equal(a.curves[name], b.curves[name], err_msg=name)


def test_metrics_of_a_pack(emnist_dir):
    """Accuracy and dead-unit fractions are fractions, the score is the step-weighted
    accuracy, and non-FADE learners log no decay."""
    task, settings = CASES["emnist"]
    for optimizer, grid in (("fade_sgd", {"alpha": [0.01], "theta_lambda": [0.5], "gamma0": [-4.6]}), ("sgd", {"alpha": [0.01]})):
        experiment = _experiment(task, optimizer, grid, {**settings, "data_dir": str(emnist_dir)})
        pack = Pack(experiment, tuple(make_config(experiment, c) for c in experiment.configs()), (0, 1))
        runner = make_runner(pack, 1000)
        for _ in runner.run():
            pass
        out = runner.outcome()
        acc = out.curves["accuracy"]
        assert ((acc >= 0) & (acc <= 1)).all() and out.bin_end.tolist() == [50, 100, 150, 200, 250, 300]
        np.testing.assert_allclose(out.score, acc.mean(axis=1))
        assert ((out.curves["dead_units_layer1"] >= 0) & (out.curves["dead_units_layer1"] <= 1)).all()
        assert (out.curves["weight_norm"] > out.curves["weight_norm_layer3"]).all()
        if optimizer == "sgd":
            assert out.curves["decay_head"] is None
        else:
            assert ((out.curves["decay_head"] > 0) & (out.curves["decay_head"] <= 1)).all()


def test_nonlinear_score_is_mse_over_the_final_window():
    task, settings = CASES["nonlinear"]
    experiment = _experiment(task, "sgd", {"alpha": [0.01]}, settings)
    pack = Pack(experiment, tuple(make_config(experiment, c) for c in experiment.configs()), (0,))
    runner = make_runner(pack, 1000)
    for _ in runner.run():
        pass
    out = runner.outcome()
    np.testing.assert_allclose(out.score, out.curves["mse"][:, -2:].mean(axis=1))  # window 200 = last two bins
    np.testing.assert_allclose(out.curves["mse"], out.curves["output_mse"].mean(axis=2))
    groups = runner.streams[0].groups
    np.testing.assert_allclose(out.curves["mse_fast"][0], out.curves["output_mse"][0][:, groups["fast"]].mean(axis=1))
