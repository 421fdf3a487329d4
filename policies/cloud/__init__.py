"""Which cloud, region and instance a training job should run on ([Narayanan] ch. 6, §6.3.2): the
options on offer at one instant, the pick by cost per unit of work, and when to move (dynamic re-picking)."""

from clustertwin.policies.cloud.picking import Allowed, Option, cost_per_work, pick
from clustertwin.policies.cloud.switching import repick

__all__ = ["Allowed", "Option", "cost_per_work", "pick", "repick"]
