"""The online non-stationary streams of tasks.md, usable without Ray.

    from tasks import make_stream
    stream = make_stream("linear_tracking", {"noise": 1.0, "steps": 10_000}, seed=3)
    x, y = stream.chunk(0, 4096)  # a Chunk of torch tensors, the same however it is chunked

`TASKS` is the one registry that sweep validation, presets and the engines read.
"""

from tasks.emnist import (
    DatasetError,
    EmnistSettings,
    LabelPermutedStream,
    PartialEmnistSettings,
    check_data,
    load_emnist,
    pixels_to_inputs,
)
from tasks.linear_tracking import LinearTrackingSettings, LinearTrackingStream
from tasks.nonlinear_tracking import NonlinearTrackingSettings, NonlinearTrackingStream
from tasks.registry import TASKS, TaskSpec, get_task, make_stream
from tasks.stream import BLOCK, Chunk, CounterStream, counter_rng

__all__ = [
    "BLOCK",
    "TASKS",
    "Chunk",
    "CounterStream",
    "DatasetError",
    "EmnistSettings",
    "LabelPermutedStream",
    "LinearTrackingSettings",
    "LinearTrackingStream",
    "NonlinearTrackingSettings",
    "NonlinearTrackingStream",
    "PartialEmnistSettings",
    "TaskSpec",
    "check_data",
    "counter_rng",
    "get_task",
    "load_emnist",
    "make_stream",
    "pixels_to_inputs",
]
