"""Exhaustive search over flat pipeline plans: the oracle the partitioning DP ([PipeDream-arXiv] §3.1,
[Narayanan] §2.4.1) is checked against, in ``tests/test_pipedream_planner.py`` and ``clustertwin reproduce
pipedream``, and the ``brute_force`` planner mode.

Every split of the layers into contiguous stages and every assignment of the devices to those stages is
costed with ``pipeline_time``; only tiny instances are feasible (compositions grow exponentially).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence

from clustertwin.policies.pipedream.partition import Convention, PartitionPlan, StagePlan, pipeline_time
from clustertwin.policies.pipedream.planners import PLANNERS, PlannerInput, StagePlanner

# The brute_force planner's limit on layer blocks (with 8 devices, 12 blocks is ~10^6 plans to cost).
MAX_LAYERS = 12


def compositions(total: int, parts: int) -> Iterator[list[int]]:
    """Ordered ways to write ``total`` as ``parts`` positive integers."""
    for cuts in itertools.combinations(range(1, total), parts - 1):
        bounds = (0, *cuts, total)
        yield [bounds[i + 1] - bounds[i] for i in range(parts)]


def best_flat_plan(
    compute: Sequence[float],
    params: Sequence[float],
    cuts: Sequence[float],
    devices: int,
    bandwidth: float,
    convention: Convention,
    straight: bool = False,
    activation_compression_ratio: float | None = None,
) -> tuple[float, list[StagePlan]]:
    """The smallest ``pipeline_time`` over every plan of the layers on exactly ``devices`` devices
    (one device per stage when ``straight``) and the first plan found with it; ``(inf, [])`` when no
    plan exists."""
    n = len(compute)
    best, best_plan = float("inf"), []
    for stages in range(1, min(n, devices) + 1):
        for sizes in compositions(n, stages):
            for reps in compositions(devices, stages):
                if straight and any(r != 1 for r in reps):
                    continue
                plan, first = [], 0
                for size, r in zip(sizes, reps, strict=True):
                    plan.append(StagePlan(first, first + size - 1, r))
                    first += size
                cost = pipeline_time(
                    plan,
                    compute,
                    params,
                    cuts,
                    bandwidth,
                    convention,
                    activation_compression_ratio=activation_compression_ratio,
                )
                if cost < best:
                    best, best_plan = cost, plan
    return best, best_plan


def brute_force(
    compute: Sequence[float],
    params: Sequence[float],
    cuts: Sequence[float],
    devices: int,
    bandwidth: float,
    convention: Convention,
    straight: bool = False,
    activation_compression_ratio: float | None = None,
) -> float:
    """The smallest ``pipeline_time`` of :func:`best_flat_plan`; ``inf`` when no plan exists."""
    return best_flat_plan(
        compute, params, cuts, devices, bandwidth, convention, straight, activation_compression_ratio
    )[0]


@PLANNERS.register("brute_force")
class BruteForcePlanner(StagePlanner):
    """Exhaustive search over flat plans at the inter-server bandwidth (the flat DP's oracle; tiny models)"""

    @classmethod
    def coarsens(cls, straight: bool) -> bool:
        return True

    def plan(self, inp: PlannerInput) -> PartitionPlan:
        if inp.num_layers > MAX_LAYERS:
            raise ValueError(
                f"brute_force searches every plan: at most {MAX_LAYERS} layer blocks, got {inp.num_layers}"
                " (lower model.max_blocks)"
            )
        if inp.straight:
            inp.check_straight()
            level = inp.straight_level()
            devices, bandwidth = level.count, level.bandwidth
        else:
            devices, bandwidth = inp.devices, inp.inter_bandwidth
        cost, stages = best_flat_plan(
            inp.compute_s,
            inp.parameter_bytes,
            inp.cut_bytes,
            devices,
            bandwidth,
            inp.convention,
            inp.straight,
        )
        noam = math.ceil(sum(s.replicas for s in stages) / stages[0].replicas)  # as plan_partition's
        return PartitionPlan(tuple(stages), cost, noam)
