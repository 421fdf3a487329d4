"""The built-in fault-tolerance schemes: AgileML's tiered reliability and the checkpoint/restart baseline.

* ``agileml`` (Proteus §3): state on a few on-demand reliable machines (BackupPSs), ActivePSs on
  transient machines in stages 2 and 3, stage by the transient:reliable ratio, no work on the reliable
  machines in stage 3. An eviction in stages 2/3 is an end-of-life flush if the doomed ActivePSs' pushes
  fit in the warning, an effective failure (roll back to the last consistent state) if not; in stage 1
  the transient machines hold no state.
* ``checkpoint`` (§6.3, the Standard+Checkpoint baseline): a traditional PS on every machine, a
  checkpoint every interval at a fixed overhead; an eviction loses the progress since the last
  checkpoint and costs a restart.
"""

from __future__ import annotations

from clustertwin.policies.agileml import choose_stage, has_active_ps, plan_recovery, workers_on_reliable
from clustertwin.policies.spot.fault_tolerance import FAULT_TOLERANCE, EvictionCost, FaultTolerance


@FAULT_TOLERANCE.register("agileml")
class AgileML(FaultTolerance):
    """AgileML: tiered reliability, three stages by the transient:reliable ratio (Proteus §3)"""

    partitioned = True

    @property
    def reliable_count(self) -> int:
        return self.settings.reliable_count

    def stage(self, n_reliable: int, n_transient: int) -> int | None:
        return choose_stage(n_reliable, n_transient, self.settings.thresholds)

    def has_active_ps(self, stage: int) -> bool:
        return has_active_ps(stage)

    def reliable_does_work(self, n_reliable: int, n_transient: int) -> bool:
        stage = self.stage(n_reliable, n_transient)
        return stage is None or workers_on_reliable(stage)

    def eviction_cost(
        self, stage: int, warning_s: float, unpushed_bytes: float, flush_bps: float
    ) -> EvictionCost:
        if not has_active_ps(stage):
            return EvictionCost("stateless")
        plan = plan_recovery(
            warning_s=warning_s,
            poll_s=self.settings.poll_s,
            unpushed_bytes=unpushed_bytes,
            flush_bandwidth_bps=flush_bps,
            since_consistent_s=self.settings.consistent_lag_s,
        )
        return EvictionCost(plan.kind, "recent", plan.lost_s, self.settings.eviction_stall_s)


@FAULT_TOLERANCE.register("checkpoint")
class Checkpoint(FaultTolerance):
    """Checkpoint/restart: a traditional PS that checkpoints every interval (Proteus §6.3)"""

    checkpoints = True

    def work_fraction(self) -> float:
        return 1.0 - self.settings.checkpoint_overhead

    def checkpoint_every_s(self) -> float | None:
        # No overhead means no checkpoint is modelled: the run pays nothing and keeps nothing.
        return self.settings.checkpoint_interval_s if self.settings.checkpoint_overhead > 0 else None

    def eviction_cost(
        self, stage: int, warning_s: float, unpushed_bytes: float, flush_bps: float
    ) -> EvictionCost:
        return EvictionCost("checkpoint_rollback", "since_checkpoint", stall_s=self.settings.restart_s)
