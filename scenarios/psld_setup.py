"""What both executors of a PSLD scenario build from it the same way: the scheduler's configuration."""

from __future__ import annotations

from clustertwin.policies.psld.scheduler import SchedulerConfig
from clustertwin.scenarios.psld_schema import PSLDScenario


def scheduler_config(scenario: PSLDScenario) -> SchedulerConfig:
    """The PSLD scheduler's configuration for the scenario's adaptive policy."""
    p = scenario.psld
    return SchedulerConfig(
        policy="strawman" if scenario.policy == "strawman" else "psld",
        epsilon=0.0 if scenario.policy == "psld_noexplore" else p.epsilon,
        theta_ratio=p.theta_ratio,
        z=p.z,
        straggler_threshold=p.straggler_threshold,
        scale_threshold=p.scale_threshold,
        scale_out=p.scale_out,
        history_reports=p.history_reports,
        cooldown_reports=p.cooldown_reports,
        min_gain=p.min_gain,
        speed_metric=p.speed_metric,
        strict_superior=p.strict_superior,
        order=p.order,
        recheck=p.recheck,
    )
