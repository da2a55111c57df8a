"""`fade-sweep schema`: the sweep file's JSON Schema, from the same pydantic models that validate a file.

An editor checks a file against the schema alone, so it must accept every shipped preset and reject
every bad file whose problem does not depend on the task; what depends on the task is named here."""

import json
import subprocess
import sys
from pathlib import Path

import jsonschema  # installed with ray[default]
import pytest
from sweeps.spec import preset_names
from sweeps.spec.learners import every_optimizer
from sweeps.spec.presets import PRESETS_DIR
from sweeps.spec.yamlfile import read_yaml
from tests.test_sweep_validation import CASES, GOOD

ROOT = Path(__file__).resolve().parents[1]

# Bad files the schema cannot see: what is wrong depends on the task (or on two keys at once).
TASK_DEPENDENT = {
    "optimizers.adam",  # adam is a neural optimizer; the file's task is linear
    "task_settings: linear_tracking: noise must be >= 0",  # the task's own checks of its settings
    "task_settings: linear_tracking: period must be positive",
    "task_settings: linear_tracking: bin 300 does not divide steps 2000",
    "resources.gpus_per_pack: linear_tracking runs on CPUs only",
    "optimizers.sgd_wd.lambda: 1.5 is out of range",  # lambda <= 1 holds for the linear learners only
    "optimizers.idbd_wd.lambda: 2 is out of range",
    "task: missing",  # for the sweep, or in every variant
}


@pytest.fixture(scope="module")
def schema(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("schema") / "schema.json"
    code = "import sys; from sweeps.cli import main; sys.exit(main(['schema']))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    out.write_text(done.stdout)
    schema = json.loads(out.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def _errors(schema: dict, document) -> list[str]:
    return [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(document)]


def test_the_schema_names_every_key_and_optimizer(schema):
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert set(schema["properties"]) == {"name", "description", "task", "task_settings", "seeds", "optimizers",
                                         "variants", "resources", "confirm", "race", "engine", "learners"}
    assert schema["required"] == ["name"] and schema["additionalProperties"] is False
    grids = schema["$defs"]["Optimizers"]["properties"]
    assert set(grids) == set(every_optimizer())
    for name, takes in every_optimizer().items():
        assert schema["$defs"][name]["required"] == list(takes), name


def test_one_optimizer_name_takes_the_same_hyperparameters_in_every_family():
    """The schema has one grid per optimizer name: true while a name means one rule in every family."""
    from fade_core.linear import LINEAR_LEARNERS
    from fade_core.neural import NEURAL_LEARNERS

    shared = set(LINEAR_LEARNERS) & set(NEURAL_LEARNERS)
    assert shared and all(LINEAR_LEARNERS[n].hyperparameters == NEURAL_LEARNERS[n].hyperparameters for n in shared)


@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_validates_against_the_schema(schema, preset):
    assert _errors(schema, read_yaml(PRESETS_DIR / f"{preset}.yaml")) == []


@pytest.mark.parametrize("doc, message", CASES, ids=[c[1].split(":")[0] for c in CASES])
def test_the_schema_rejects_every_bad_file_whose_problem_is_not_the_tasks(schema, doc, message):
    errors = _errors(schema, doc)
    if any(message.startswith(known) for known in TASK_DEPENDENT):
        assert errors == [], "the schema got stricter: move the case out of TASK_DEPENDENT"
    else:
        assert errors, f"the schema accepts a file the models refuse ({message})"


def test_the_schema_rejects_what_editors_catch_while_typing(schema):
    good = GOOD
    assert _errors(schema, good) == []
    assert _errors(schema, good | {"race": True}) == [] and _errors(schema, good | {"race": {"min_seeds": 1}})
    assert _errors(schema, good | {"engine": "cpu"}) == [] and _errors(schema, good | {"engine": "gpu"})
    assert _errors(schema, good | {"seeds": [1, 1]}) and _errors(schema, good | {"variants": []})
    assert _errors(schema, good | {"optimizers": {}}) and _errors(schema, good | {"optimizers": {"sgd": None}})
    assert _errors(schema, good | {"task_settings": {"steps": 1.5}})

