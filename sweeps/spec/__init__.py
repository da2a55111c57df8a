"""What to run: sweep files and presets, validated into a typed `Sweep` (sweeps.plan cuts it into packs).

No Ray here: `fade-sweep presets`, validation and the results side use this layer alone.
"""

from sweeps.spec.config import LOCATION_SETTINGS, Config, make_config
from sweeps.spec.presets import preset_description, preset_names, resolve_sweep
from sweeps.spec.race import Race, with_race
from sweeps.spec.resources import PackResources
from sweeps.spec.sweep import Experiment, Sweep, confirmation_seeds, gpus_unusable
from sweeps.spec.sweepfile import SweepError, check_task_data, load_sweep, parse_sweep, parse_sweep_text

__all__ = [
    "confirmation_seeds",
    "LOCATION_SETTINGS",
    "Config",
    "Experiment",
    "PackResources",
    "Sweep",
    "SweepError",
    "check_task_data",
    "gpus_unusable",
    "load_sweep",
    "make_config",
    "parse_sweep",
    "parse_sweep_text",
    "preset_description",
    "Race",
    "with_race",
    "preset_names",
    "resolve_sweep",
]
