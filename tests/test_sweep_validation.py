"""Bad sweep files: one clear line naming the file and key, exit code 2, nothing written."""

import re

import pytest
import yaml

from sweeps.cli import main

GOOD = {
    "name": "ok",
    "task": "linear_tracking",
    "task_settings": {"steps": 100},
    "seeds": 2,
    "optimizers": {"fade": {"alpha": [0.1], "theta_lambda": 0.01, "gamma0": [-1.2]}},
}


def _with(**changes):
    doc = yaml.safe_load(yaml.safe_dump(GOOD))
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = doc
        for p in parents:
            node = node[p]
        if value is None:
            del node[leaf]
        else:
            node[leaf] = value
    return doc


CASES = [
    (_with(colour="red"), "colour: unknown key; allowed keys are"),
    (_with(optimizers={"adam": {"alpha": 0.1}}), "optimizers.adam: unknown optimizer for task linear_tracking; choose one of sgd"),
    (_with(optimizers__fade__theta=0.1), "optimizers.fade.theta: fade does not take theta; it takes alpha, theta_lambda, gamma0"),
    (_with(optimizers__fade__gamma0=None), "optimizers.fade: missing hyperparameter(s) gamma0"),
    (_with(optimizers__fade__alpha=[-0.1]), "optimizers.fade.alpha: -0.1 is out of range; alpha (step size) must be > 0"),
    (_with(optimizers__fade__alpha="fast"), "optimizers.fade.alpha: 'fast' is out of range"),
    (_with(seeds=0), "seeds: must be a positive int"),
    (_with(task="cartpole"), "task: unknown task 'cartpole'; choose one of linear_tracking"),
    (_with(task_settings={"noise": -1}), "task_settings: linear_tracking needs noise >= 0"),
    (_with(task_settings={"nosie": 1}), "task_settings: unknown setting(s) nosie for task linear_tracking; allowed: noise"),
    (_with(task_settings={"steps": 10.5}), "task_settings: setting steps of task linear_tracking must be a whole number"),
    (_with(name="../escape"), "name: must be a directory-safe name"),
    (_with(variants=[{"optimizers": {"sgd": {"alpha": 0.1}}, "learning": 1}]), "variants[0].learning: unknown key"),
    (_with(resources={"gpus_per_pack": 0.5}), "resources.gpus_per_pack: linear_tracking runs on CPUs only"),
    (_with(resources={"cpus_per_pack": 0}), "resources.cpus_per_pack: must be a number > 0"),
]


@pytest.mark.parametrize("doc, message", CASES, ids=[c[1].split(":")[0] for c in CASES])
def test_bad_sweep_file(tmp_path, capsys, doc, message):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump(doc))
    storage = tmp_path / "results"
    assert main(["run", str(sweep), "--storage", str(storage)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    assert err.startswith(f"fade-sweep: error: {sweep}: "), err
    assert message in err, err
    assert not storage.exists()


def test_malformed_yaml_and_missing_file(tmp_path, capsys):
    sweep = tmp_path / "broken.yaml"
    sweep.write_text("name: x\noptimizers: {sgd: [\n")
    assert main(["run", str(sweep), "--storage", str(tmp_path / "r")]) == 2
    assert "broken.yaml: not valid YAML at line" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml: no such sweep file" in capsys.readouterr().err
    assert main(["run", "no-such-preset"]) == 2
    assert "neither a sweep file nor a preset; presets are emnist, emnist-best" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_every_preset_is_valid_and_sized(capsys):
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"linear-noise0\s+4,640\s+9\.280e\+08", out)  # 464 configs x 10 seeds x 200,000 steps
    assert re.search(r"linear-noise1\s+4,700\s+9\.400e\+08", out)
    assert "linear-best" in out and "linear-demo" in out
    # grids.md: nonlinear 164 configs x 5 seeds x 2M steps; EMNIST 320 configs x 5 seeds x 5M steps
    assert re.search(r"nonlinear\s+820\s+1\.640e\+09", out)
    assert re.search(r"emnist\s+1,600\s+8\.000e\+09", out)
    assert re.search(r"emnist-sensitivity\s+320\s+1\.600e\+09", out)  # 2 x 16 cells x 2 variants x 5 seeds
