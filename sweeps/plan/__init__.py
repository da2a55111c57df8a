"""How a sweep is cut into packs: the stages' names, `Pack` (one task and optimizer, several configurations
on all their seeds), the planners of a stage (`plan_packs`, a race's `plan_round`, `plan_confirmation`), cut by
cost so the slots end together, and `CostModel`, what a pack costs on one slot.

No Ray here: the dry run, the store (a stage's packs and manifests) and the driver read this layer.
"""

from sweeps.plan.costs import CostModel
from sweeps.plan.packing import CONFIRMATION, STAGES, TUNING, Pack, plan_confirmation, plan_packs, plan_round

__all__ = ["CONFIRMATION", "STAGES", "TUNING", "CostModel", "Pack", "plan_confirmation", "plan_packs", "plan_round"]
