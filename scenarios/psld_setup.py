"""What both executors of a PSLD scenario build from it the same way: the initial layout and the scheduler's
configuration, from the scenario's placement policy and the random streams both executors share."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
        gain_test=p.gain_test,
    )


@dataclass(frozen=True)
class Change:
    """A step change of PS ``server``'s NIC bandwidth (Gbit/s) or effective CPU cores at ``time_s``."""

    time_s: float
    server: int
    what: str  # bandwidth | cpu
    value: float


def straggler_timeline(scenario: PSLDScenario) -> list[Change]:
    """Step changes (stragglers with recovery, then Markov regime switches), in time order: the same
    timeline drives the simulator's links and CPUs and the real runtime's throttles."""
    c = scenario.cluster
    default = {"bandwidth": c.server_gbps, "cpu": c.server_cores}
    out: list[Change] = []
    for s in scenario.stragglers:
        out.append(Change(s.start_s, s.server, s.what, s.value))
        if s.end_s is not None:
            out.append(Change(s.end_s, s.server, s.what, default[s.what]))
    reg = scenario.regimes
    if reg is not None:
        rng = np.random.default_rng(np.random.SeedSequence([scenario.seed, REGIME_STREAM]))
        for server in reg.servers or range(c.servers + c.standby):
            t = 0.0
            while True:
                t += float(rng.exponential(reg.mean_dwell_s))
                if t >= scenario.duration_s:
                    break
                out.append(Change(t, server, reg.what, float(reg.levels[int(rng.integers(len(reg.levels)))])))
    return sorted(out, key=lambda ch: ch.time_s)
