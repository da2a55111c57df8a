"""The task registry: the one table that sweep validation, presets and the engines read."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from fade_core.architecture import Architecture
from tasks import emnist, linear_tracking, nonlinear_tracking
from tasks.stream import CounterStream


@dataclass(frozen=True)
class TaskSpec:
    """A registered task: its settings type, which learner family runs on it, its score."""

    name: str
    settings_type: type  # a frozen dataclass; its fields are the task settings
    family: str  # "linear": fade_core.linear's learners; "neural": fade_core.neural's
    make_stream: Callable[[Any, int], CounterStream]  # (settings, seed) -> stream
    score: str  # what the score column holds
    higher_is_better: bool
    curve_metric: str  # the online metric column of curves/ (learning curves plot it)
    runs_on_gpu: bool = False  # whether its engine can use a GPU
    architecture: Architecture | None = None  # neural tasks: the student network
    loss: str | None = None  # neural tasks: "squared_error" or "cross_entropy"
    output_groups: tuple[str, ...] = ()  # output groups whose metrics are logged apart (streams' `groups`)
    check_data: Callable[[Any], None] | None = None  # raises if the task's data is missing or unreadable
    # The stream's version, bumped whenever its numbers change, so a store records which one its runs saw;
    # shared_steps(settings): the first steps every version draws the same (None: every step, one version).
    stream_version: int = 1
    shared_steps: Callable[[Any], int] | None = None

    def reaches_past_shared(self, settings: Any) -> bool:
        """Whether streams of `settings` have steps that another version of the stream draws differently:
        only then do runs of two versions differ (a store's runs and a resume's must be of one version)."""
        return self.shared_steps is not None and settings.steps > self.shared_steps(settings)

    def settings(self, values: dict[str, Any]) -> Any:
        """Build the settings dataclass from a mapping, coercing to each field's type."""
        fields = {f.name: f for f in dataclasses.fields(self.settings_type)}
        unknown = sorted(set(values) - set(fields))
        if unknown:
            raise ValueError(
                f"unknown setting(s) {', '.join(unknown)} for task {self.name}; allowed: {', '.join(fields)}"
            )
        coerced = {}
        for key, value in values.items():
            kind = type(getattr(self.settings_type(), key))
            if isinstance(value, bool) and kind is not bool or isinstance(value, (list, dict)):
                raise ValueError(f"setting {key} of task {self.name} must be a single {kind.__name__}, got {value!r}")
            try:
                coerced[key] = kind(value)
            except (TypeError, ValueError, OverflowError):  # OverflowError: int(inf)
                raise ValueError(f"setting {key} of task {self.name} must be a {kind.__name__}, got {value!r}") from None
            if kind is int and coerced[key] != value:
                raise ValueError(f"setting {key} of task {self.name} must be a whole number, got {value!r}")
        settings = self.settings_type(**coerced)
        check = getattr(settings, "check", None)
        if check:
            check()
        return settings


TASKS: dict[str, TaskSpec] = {
    "linear_tracking": TaskSpec(
        name="linear_tracking",
        settings_type=linear_tracking.LinearTrackingSettings,
        family="linear",
        make_stream=linear_tracking.LinearTrackingStream,
        score="lifetime MSE (mean squared error over all steps)",
        higher_is_better=False,
        curve_metric="mse",
        stream_version=linear_tracking.STREAM_VERSION,
        shared_steps=linear_tracking.shared_steps,
    ),
    "nonlinear_tracking": TaskSpec(
        name="nonlinear_tracking",
        settings_type=nonlinear_tracking.NonlinearTrackingSettings,
        family="neural",
        make_stream=nonlinear_tracking.NonlinearTrackingStream,
        score="MSE per output over the final score_window steps",
        higher_is_better=False,
        curve_metric="mse",
        runs_on_gpu=True,
        architecture=nonlinear_tracking.STUDENT,
        loss="squared_error",
        output_groups=tuple(nonlinear_tracking.GROUP_SIZES),
        stream_version=nonlinear_tracking.STREAM_VERSION,
        shared_steps=nonlinear_tracking.shared_steps,
    ),
    **{
        name: TaskSpec(
            name=name,
            settings_type=settings_type,
            family="neural",
            make_stream=emnist.LabelPermutedStream,
            score="average online accuracy over all steps",
            higher_is_better=True,
            curve_metric="accuracy",
            runs_on_gpu=True,
            architecture=emnist.STUDENT,
            loss="cross_entropy",
            check_data=emnist.check_data,
        )
        for name, settings_type in (
            ("emnist_label_permuted", emnist.EmnistSettings),
            ("emnist_partial_permuted", emnist.PartialEmnistSettings),
        )
    },
}


def get_task(name: str) -> TaskSpec:
    """The registered task `name`; an unknown name is an error that lists the known ones."""
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; choose one of {', '.join(TASKS)}") from None


def make_stream(name: str, settings: Any = None, seed: int = 0) -> CounterStream:
    """Task `name`'s stream of `seed`, from its settings dataclass or a mapping (None: defaults).

    A mapping is checked and coerced as a sweep file's task_settings are, so a notebook
    gets the same errors as a sweep file.
    """
    spec = get_task(name)
    if settings is None or isinstance(settings, Mapping):
        settings = spec.settings(dict(settings or {}))
    return spec.make_stream(settings, seed)
