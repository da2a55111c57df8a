"""One learner model for both families: the registry (fade_core/learners.py), each learner's
hyperparameters read from its rules' signatures, what it adapts, and the engines' refusal of a
neural part their hand-written code does not implement."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fade_core import learners
from fade_core.engines import EngineError, get_engine
from fade_core.learner import DECAY, STEP_SIZE, Learner
from fade_core.linear.rules import LINEAR_LEARNERS, LinearLearner, sgd
from fade_core.mlp import Architecture
from fade_core.neural import NEURAL_LEARNERS, NeuralLearner, make_runs, parts
from fade_core.neural import rules as neural_rules
from fade_core.rulebind import parameters

ROOT = Path(__file__).resolve().parents[1]


def test_every_built_in_learner_of_both_families_is_one_kind_of_record():
    every = learners.every_learner()
    assert [(l.family, l.name) for l in every] == [("linear", n) for n in LINEAR_LEARNERS] + [
        ("neural", n) for n in NEURAL_LEARNERS]
    for learner in every:
        assert isinstance(learner, Learner) and callable(learner.rule) and learner.key == learner.name
        assert learners.get_learner(learner.family, learner.name) is learner and learners.registered(learner)
        assert learner.adaptive == bool(learner.adapts) and learner.adapts <= {STEP_SIZE, DECAY}


def test_hyperparameters_are_read_from_the_rules_signatures():
    """Linear: the rule's trailing parameters (`lam` is lambda). Neural: the parameters of its parts'
    rules that name a hyperparameter, then what starts an adapted state (gamma0)."""
    for learner in LINEAR_LEARNERS.values():
        names = parameters(learner.rule)[9:]
        assert learner.hyperparameters == tuple("lambda" if n == "lam" else n for n in names)
    fade_adamw_clip = NeuralLearner("fade_adamw_clip", "adam", weight_decay="decoupled", clip=True, fade="all")
    assert parameters(parts.shrink) == ("alpha", "lam") and parameters(parts.clip_bound) == ("kappa", "fan_in")
    assert parameters(parts.fade_decay)[-1] == "theta_lambda"
    assert fade_adamw_clip.hyperparameters == ("alpha", "lambda", "kappa", "theta_lambda", "gamma0")
    assert fade_adamw_clip.adapts == {DECAY} and NEURAL_LEARNERS["adamw"].adapts == frozenset()
    assert LINEAR_LEARNERS["coupled"].adapts == {STEP_SIZE, DECAY} and LINEAR_LEARNERS["idbd"].adapts == {STEP_SIZE}


def test_a_neural_learners_rule_is_update_with_the_flags_its_parts_set():
    learner = NEURAL_LEARNERS["fade_adam"]
    assert learner.flags() == {"base": "adam", "weight_decay": "none", "clip_on": False, "fade_on": True}
    assert learner.flags(fade_on=False)["fade_on"] is False
    assert learner.rule.func is parts.update and learner.rule.keywords == learner.flags()
    assert [part.field for part in neural_rules.PARTS] == ["base", "weight_decay", "clip", "fade"]


def test_a_researchers_learner_is_registered_by_key_never_under_a_built_in_name():
    own = LinearLearner("sgd_copy", sgd, "a copy", key="sgd_copy@0123")
    assert learners.register(own) is own and learners.learner_for_key("sgd_copy@0123") is own
    assert learners.register(dataclasses.replace(own)) is own  # the same key: the first one stays
    assert learners.learner_for_key("fade") is LINEAR_LEARNERS["fade"]
    assert learners.learner_for_key("adamw", "neural") is NEURAL_LEARNERS["adamw"]
    with pytest.raises(ValueError, match="^sgd: the name of a built-in linear learner"):
        learners.register(LinearLearner("sgd", sgd, "a copy", key="sgd@0123"))
    with pytest.raises(ValueError, match="^unknown neural learner 'idbd'; choose one of sgd, "):
        learners.get_learner("neural", "idbd")


def test_an_engine_written_by_hand_refuses_a_part_it_does_not_implement(monkeypatch):
    """A part offered by the registry (here a third base step) runs on the engines that take their
    arithmetic from parts.update (torch); one whose code is written for the built-in parts refuses
    it in one line instead of running something else."""
    base = neural_rules.PARTS[0]
    monkeypatch.setattr(neural_rules, "PARTS", (dataclasses.replace(base, choices={**base.choices, "sign_sgd": (parts.sgd,)}),
                                                *neural_rules.PARTS[1:]))
    learner = NeuralLearner("sign", "sign_sgd")
    assert learner.parts_beyond({"base": ("sgd", "adam")}) == ("base='sign_sgd'",)
    assert get_engine("torch", "neural", "cpu", learner).name == "torch"
    for engine in ("cpu", "triton", "triton_step", "persistent", "cuda"):
        with pytest.raises(EngineError, match=rf"^engine '{engine}' does not run base='sign_sgd' of sign: its code is "
                                              r"written for the built-in parts .*; choose torch$"):
            get_engine(engine, "neural", None, learner)
    with pytest.raises(EngineError, match="^engine 'cpu' does not run base='sign_sgd'"):
        make_runs(learner, Architecture((2, 4, 1)), [0], {"alpha": [0.1]}, "squared_error", engine="cpu")
    for builtin in NEURAL_LEARNERS.values():  # every built-in learner runs on every engine
        assert all(get_engine(e, "neural", None, builtin) for e in ("cpu", "torch", "triton", "persistent", "cuda"))


def test_the_registry_loads_neither_torch_nor_numba():
    code = "import sys, fade_core.learners; print(sorted(m for m in ('torch', 'numba') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_make_runs_takes_a_learner_record_of_any_built_in_parts():
    learner = NeuralLearner("fade_sgd_wd_clip", "sgd", weight_decay="coupled", clip=True, fade="head")
    runs = make_runs(learner, Architecture((2, 4, 1)), [0], {n: [0.1] if n != "gamma0" else [-3.0]
                                                             for n in learner.hyperparameters}, "squared_error")
    assert runs.engine.name == "cpu" and runs.learner is learner
    assert isinstance(runs.hp["kappa"], torch.Tensor)
