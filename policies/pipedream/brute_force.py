"""Exhaustive search over flat pipeline plans: the oracle the partitioning DP (seed 004 §3.1, seed 001
§2.4.1) is checked against, in ``tests/test_pipedream_planner.py`` and ``clustertwin reproduce pipedream``.

Every split of the layers into contiguous stages and every assignment of the devices to those stages is
costed with ``pipeline_time``; only tiny instances are feasible (compositions grow exponentially).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

from clustertwin.policies.pipedream.partition import Convention, StagePlan, pipeline_time


def compositions(total: int, parts: int) -> Iterator[list[int]]:
    """Ordered ways to write ``total`` as ``parts`` positive integers."""
    for cuts in itertools.combinations(range(1, total), parts - 1):
        bounds = (0, *cuts, total)
        yield [bounds[i + 1] - bounds[i] for i in range(parts)]


def brute_force(
    compute: Sequence[float],
    params: Sequence[float],
    cuts: Sequence[float],
    devices: int,
    bandwidth: float,
    convention: Convention,
    straight: bool = False,
) -> float:
    """The smallest ``pipeline_time`` over every plan of the layers on exactly ``devices`` devices
    (one device per stage when ``straight``); ``inf`` when no plan exists."""
    n = len(compute)
    best = float("inf")
    for stages in range(1, min(n, devices) + 1):
        for sizes in compositions(n, stages):
            for reps in compositions(devices, stages):
                if straight and any(r != 1 for r in reps):
                    continue
                plan, first = [], 0
                for size, r in zip(sizes, reps, strict=True):
                    plan.append(StagePlan(first, first + size - 1, r))
                    first += size
                best = min(best, pipeline_time(plan, compute, params, cuts, bandwidth, convention))
    return best
