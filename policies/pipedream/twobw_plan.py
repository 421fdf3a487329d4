"""The planner entry ``2bw``: PipeDream-2BW's planner ([Narayanan] §3.3, Algorithm 1) on a profiled model.

Algorithm 1 sweeps the data-parallel width ``d`` and the depth ``p = N/d`` of equi-replicated pipelines
(§3.2.3) and keeps the configuration of highest THROUGHPUT whose MEMORY fits. ``twobw_planner`` does it
in closed form for a model of identical blocks; here the stages of a profiled model come from the
straight partitioning DP (memory-aware when the input says so), and THROUGHPUT is §3.3.3's

    t = max_i max( T^comp_i + Σ_j T^comm_{j→i},  T^comm_i / m ),   throughput = d / t,

with the DP's slowest stage (compute and boundary transfers at the in-pipeline bandwidth) as the first
term and each stage's ring all-reduce over the ``d`` pipelines, ``2(d-1)/d·|W_i| / bw_cross(d)`` with
``bw_cross(d)`` the intra-server bandwidth when ``d`` is below the GPUs per server and the inter-server one
otherwise, amortised over the ``m`` microbatches of a weight update. The microbatch size and
recomputation are the scenario's (the profile is already at that size), not swept. A ``d`` whose depth
leaves a stage without a layer, or whose stages do not fit, is skipped; ties keep the smaller ``d``
(Algorithm 1's order).
"""

from __future__ import annotations

import math
from dataclasses import replace

from clustertwin.policies.pipedream.partition import Level, PartitionPlan
from clustertwin.policies.pipedream.planners import PLANNERS, PlannerInput, StagePlanner, _dp, _memory


def _allreduce_s(inp: PlannerInput, plan: PartitionPlan, d: int) -> float:
    """The slowest stage's ring all-reduce over ``d`` copies of the pipeline."""
    if d == 1:
        return 0.0
    bandwidth = inp.intra_bandwidth if d < inp.devices_per_server else inp.inter_bandwidth
    biggest = max(sum(inp.parameter_bytes[st.first : st.last + 1]) for st in plan.stages)
    return 2 * (d - 1) / d * biggest / bandwidth


@PLANNERS.register("2bw")
class TwoBWPlanner(StagePlanner):
    """PipeDream-2BW's planner (§3.3, Algorithm 1): pipeline depth and width of straight pipelines"""

    def plan(self, inp: PlannerInput) -> PartitionPlan:
        if not inp.straight or inp.chunks_per_device != 1:
            raise ValueError("the 2bw planner plans straight, non-interleaved pipelines (2bw, flush, gpipe)")
        best: tuple[float, PartitionPlan] | None = None
        for d in range(1, inp.devices + 1):
            if inp.devices % d:
                continue
            p = inp.devices // d
            if p > inp.num_layers:
                continue
            spans = p > inp.devices_per_server
            level = Level(p, inp.inter_bandwidth if spans else inp.intra_bandwidth)
            try:
                plan = _dp(inp, [level], True, _memory(inp, p))
            except ValueError:
                continue  # no p-stage pipeline fits a device
            t = max(plan.time_per_input, _allreduce_s(inp, plan, d) / max(inp.microbatches, 1))
            throughput = d / t if t > 0 else math.inf
            if best is None or throughput > best[0] * (1 + 1e-12):
                best = (throughput, replace(plan, time_per_input=t, data_parallel=d))
        if best is None:
            raise ValueError(
                f"no straight pipeline of {inp.devices} devices (any depth) fits a device's memory"
            )
        return best[1]
