"""What to run: sweep files and presets, validated into a typed `Sweep`, and planned into packs.

No Ray here: `fade-sweep presets`, validation and the results side use this layer alone.
"""

from sweeps.spec.config import LOCATION_SETTINGS, Config, make_config
from sweeps.spec.costs import CostModel
from sweeps.spec.plan import CONFIRMATION, STAGES, TUNING, Pack, plan_confirmation, plan_packs, plan_round
from sweeps.spec.presets import preset_description, preset_names, resolve_sweep
from sweeps.spec.race import Race, with_race
from sweeps.spec.resources import PackResources
from sweeps.spec.sweep import Experiment, Sweep, confirmation_seeds, gpus_unusable
from sweeps.spec.sweepfile import SweepError, check_task_data, load_sweep, parse_sweep, parse_sweep_text

__all__ = [
    "CONFIRMATION",
    "STAGES",
    "TUNING",
    "confirmation_seeds",
    "plan_confirmation",
    "LOCATION_SETTINGS",
    "Config",
    "CostModel",
    "Experiment",
    "Pack",
    "PackResources",
    "Sweep",
    "SweepError",
    "check_task_data",
    "gpus_unusable",
    "load_sweep",
    "make_config",
    "parse_sweep",
    "parse_sweep_text",
    "plan_packs",
    "preset_description",
    "plan_round",
    "Race",
    "with_race",
    "preset_names",
    "resolve_sweep",
]
