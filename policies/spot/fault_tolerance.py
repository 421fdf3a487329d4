"""Fault-tolerance schemes of a job on transient machines: which stages exist, who holds the parameters,
what an eviction costs (Proteus §3 and §6.3).

Both executors ask a scheme instead of naming it: the simulator for the work rate, the checkpoints and
the cost of each eviction; the real runtime for the stage, the partition owners and whether it keeps
checkpoints. The built-in entries are in :mod:`policies.spot.schemes`.

Pure: counts, times and sizes in; small values out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from clustertwin.policies.agileml import StageThresholds
from clustertwin.policies.registry import Registry


@dataclass(frozen=True)
class FaultToleranceSettings:
    """Every scheme's knobs (each scheme reads its own). Times are in the executor's seconds."""

    thresholds: StageThresholds = StageThresholds()  # AgileML's stage ratios
    reliable_count: int = 3  # AgileML's on-demand reliable machines
    poll_s: float = 5.0  # AgileML's warning poll
    consistent_lag_s: float = 10.0  # progress time an AgileML effective failure loses
    eviction_stall_s: float = 5.0  # AgileML's pause per eviction (migration, re-planning)
    checkpoint_interval_s: float = 1800.0
    checkpoint_overhead: float = 0.17  # Proteus §6.3: 17% measured
    restart_s: float = 300.0  # the checkpoint baseline's restart after an eviction


@dataclass(frozen=True)
class EvictionCost:
    """What an eviction costs the job. ``recovery`` names what happens (none | stateless |
    end_of_life_flush | effective_failure | checkpoint_rollback). ``lost`` says which progress is redone:
    none, the last ``lost_s`` seconds of it, or everything since the last checkpoint. ``stall_s``: the
    job makes no progress for this long."""

    recovery: str
    lost: Literal["none", "recent", "since_checkpoint"] = "none"
    lost_s: float = 0.0
    stall_s: float = 0.0


NO_COST = EvictionCost("none")


class FaultTolerance:
    """Base type of the entries of :data:`FAULT_TOLERANCE`: no stages, no state on transient machines,
    no checkpoints, evictions cost nothing (what an all-on-demand cluster needs: :data:`NO_FAULT_TOLERANCE`).

    ``reliable_count``: on-demand machines the scheme holds for state, whatever the acquisition policy.
    ``partitioned``: parameters live in fixed partitions owned by reliable BackupPSs (and ActivePSs).
    ``checkpoints``: whether the job writes checkpoints (the real runtime's switch).
    """

    partitioned = False
    checkpoints = False

    def __init__(self, settings: FaultToleranceSettings = FaultToleranceSettings()) -> None:
        self.settings = settings

    @property
    def reliable_count(self) -> int:
        return 0

    def stage(self, n_reliable: int, n_transient: int) -> int | None:
        """The stage for this mix of machines: 0 for a scheme without stages, None when the job cannot
        run (no machine to keep its state on)."""
        return 0

    def work_fraction(self) -> float:
        """Share of the machines' work that is training, in a scheme without stages."""
        return 1.0

    def has_active_ps(self, stage: int) -> bool:
        """Whether transient machines hold parameters (ActivePSs) in ``stage``."""
        return False

    def reliable_does_work(self, n_reliable: int, n_transient: int) -> bool:
        """Whether the reliable machines run workers with this mix."""
        return True

    def checkpoint_every_s(self) -> float | None:
        """The simulator's checkpoint period; None: no checkpoints."""
        return None

    def eviction_cost(
        self, stage: int, warning_s: float, unpushed_bytes: float, flush_bps: float
    ) -> EvictionCost:
        """The cost of evicting a working machine in ``stage`` with ``warning_s`` of notice, when it must
        push ``unpushed_bytes`` at ``flush_bps`` before it goes."""
        return NO_COST


NO_FAULT_TOLERANCE = FaultTolerance()

FAULT_TOLERANCE: Registry[Callable[[FaultToleranceSettings], FaultTolerance]] = Registry(
    "spot fault tolerance",
    "how a job on transient machines survives evictions (fault_tolerance of kind spot)",
    builtin="clustertwin.policies.spot",
    noun="fault tolerance",
)
