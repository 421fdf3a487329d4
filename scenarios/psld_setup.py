"""What both executors of a PSLD scenario build from it the same way: the initial layout and the scheduler's
configuration, from the scenario's placement policy and the random streams both executors share."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from clustertwin.policies.psld.blocks import Tensor
from clustertwin.policies.psld.policies import Layout
from clustertwin.policies.psld.scheduler import SchedulerConfig
from clustertwin.scenarios.psld_schema import PSLDScenario

# SeedSequence([seed, stream]): the layout's draws (MXNet's random small tensors), the scheduler's
# (exploration); the simulator also draws PS regime switches and timing noise
LAYOUT_STREAM, POLICY_STREAM, REGIME_STREAM, NOISE_STREAM = 1, 2, 3, 4


def initial_layout(scenario: PSLDScenario, tensors: Sequence[Tensor], block_bytes: int) -> Layout:
    """Blocks of ``tensors`` and their initial PSs under the scenario's placement policy (``block_bytes``
    in the unit of the tensors' sizes)."""
    rng = np.random.default_rng(np.random.SeedSequence([scenario.seed, LAYOUT_STREAM]))
    servers = list(range(scenario.cluster.servers))
    return scenario.placement.layout(tensors, servers, block_bytes, rng, scenario.mxnet_small)


def scheduler_config(scenario: PSLDScenario) -> SchedulerConfig:
    """The PSLD scheduler's configuration for the scenario's adaptive policy."""
    p = scenario.psld
    policy = scenario.placement
    if policy.reassign is None:
        raise ValueError(f"policy {scenario.policy!r} never reassigns: it has no scheduler")
    return SchedulerConfig(
        policy=policy.reassign,
        epsilon=p.epsilon if policy.explore else 0.0,
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
