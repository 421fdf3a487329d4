"""AgileML (Proteus, Harlap et al., EuroSys'17; [Proteus] §3): tiered-reliability elastic parameter server.

* :mod:`policies.agileml.stages` — stage 1/2/3 by the transient:reliable ratio.
* :mod:`policies.agileml.partitions` — N fixed partitions, ActivePS placement, migration plans.
* :mod:`policies.agileml.recovery` — end-of-life flush vs effective failure (roll back).
"""

from clustertwin.policies.agileml.partitions import (
    Migration,
    PartitionTable,
    active_ps_target,
    choose_active_ps_hosts,
    num_partitions,
    plan_evictions,
)
from clustertwin.policies.agileml.recovery import RecoveryPlan, plan_recovery
from clustertwin.policies.agileml.stages import (
    StageThresholds,
    choose_stage,
    has_active_ps,
    workers_on_reliable,
)

__all__ = [
    "Migration",
    "PartitionTable",
    "RecoveryPlan",
    "StageThresholds",
    "active_ps_target",
    "choose_active_ps_hosts",
    "choose_stage",
    "has_active_ps",
    "num_partitions",
    "plan_evictions",
    "plan_recovery",
    "workers_on_reliable",
]
