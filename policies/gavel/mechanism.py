"""Gavel's round-based scheduling mechanism ([Narayanan], §5.5, Algorithm 2).

Each round every runnable *combination* (one job, or a pair sharing an accelerator) has a priority per
worker type: the allocation it should get divided by the share it has received,
``priority[c, j] = X[c, j] / share[c, j]`` with ``share = time received on j / time elapsed``. Combinations
are taken greedily in decreasing priority, one combination per job per round; a combination needing more
GPUs than remain is skipped. Chosen combinations are then placed largest first, a job keeping the GPUs it
held last round when they are free (its lease is renewed and no checkpoint is needed), others packed onto
as few servers as possible.

Departure from the artifact: Gavel's code divides by the job's share of all time spent on type j by every
job; we divide by the job's own share of elapsed time, so a job exactly on track has priority 1 whatever its
scale factor. Both raise the priority of a job that fell behind its allocation, which is the property the
mechanism needs (§5.5: "a job that doesn't run gains priority").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from clustertwin.policies.gavel.cluster import ClusterLayout

# Jobs that have received nothing yet outrank every job that has (the artifact uses the same device).
UNSERVED_PRIORITY = 1e9


def priorities(allocation: np.ndarray, received: np.ndarray, elapsed: np.ndarray) -> np.ndarray:
    """``X / share`` per combination and type; ``UNSERVED_PRIORITY·X`` where nothing was received yet."""
    share = received / elapsed[:, None]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        prio = np.where(share > 0, allocation / share, UNSERVED_PRIORITY * allocation)
    prio[allocation <= 1e-9] = 0.0
    return prio


def select_round(
    prio: np.ndarray,
    deficit: np.ndarray,
    allocation: np.ndarray,
    members: Sequence[tuple[int, ...]],
    scale_factors: np.ndarray,
    capacity: np.ndarray,
    type_order: Sequence[int],
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy selection for one round: the chosen combinations and the type each runs on.

    ``members[c]`` lists the jobs of combination c. Types are visited in ``type_order``; within a type
    combinations go in decreasing (priority, deficit, allocation). A job runs in at most one combination.
    """
    rows: list[int] = []
    types: list[int] = []
    busy: set[int] = set()
    for j in type_order:
        free = int(capacity[j])
        if free <= 0:
            continue
        column = prio[:, j]
        candidates = np.flatnonzero(column > 0)
        if candidates.size == 0:
            continue
        order = candidates[
            np.lexsort((-allocation[candidates, j], -deficit[candidates, j], -column[candidates]))
        ]
        needs = scale_factors[order].tolist()
        for c, need in zip(order.tolist(), needs, strict=True):
            if need > free:
                continue
            jobs = members[c]
            if len(jobs) == 1:
                if jobs[0] in busy:
                    continue
                busy.add(jobs[0])
            else:
                if not busy.isdisjoint(jobs):
                    continue
                busy.update(jobs)
            rows.append(c)
            types.append(j)
            free -= need
            if free == 0:
                break
    return np.array(rows, dtype=np.int64), np.array(types, dtype=np.int64)


def place_round(
    layout: ClusterLayout,
    types: np.ndarray,
    scale_factors: np.ndarray,
    last_type: np.ndarray,
    last_gpus: Sequence[tuple[int, ...]],
    last_consolidated: np.ndarray,
) -> tuple[list[tuple[int, ...]], np.ndarray, np.ndarray]:
    """GPUs for each chosen combination: ``(gpus, consolidated, renewed)``, aligned with the inputs.

    A combination that ran on the same type last round keeps its GPUs (its lease is renewed): last round's
    placements were disjoint, so these never collide. The rest are placed largest first, each on the
    fullest server that still fits it, otherwise across the emptiest servers.
    """
    renewed = last_type == types
    gpus: list[tuple[int, ...]] = [last_gpus[i] if renewed[i] else () for i in range(len(types))]
    consolidated = np.where(renewed, last_consolidated, False)
    for j in np.unique(types[~renewed]).tolist():
        k = layout.gpus_per_server[j]
        taken = {g for i in np.flatnonzero(renewed & (types == j)).tolist() for g in gpus[i]}
        free = [
            [g for g in range(s, min(s + k, layout.gpus[j])) if g not in taken]
            for s in range(0, layout.gpus[j], k)
        ]
        pending = np.flatnonzero(~renewed & (types == j))
        for i in pending[np.argsort(-scale_factors[pending], kind="stable")].tolist():
            sf = int(scale_factors[i])
            fitting = [s for s in range(len(free)) if len(free[s]) >= sf] if sf <= k else []
            if fitting:
                servers = [min(fitting, key=lambda s: len(free[s]))]
            else:
                servers = sorted(range(len(free)), key=lambda s: -len(free[s]))
            chosen: list[int] = []
            for s in servers:
                take = min(sf - len(chosen), len(free[s]))
                chosen.extend(free[s][:take])
                del free[s][:take]
                if len(chosen) == sf:
                    break
            if len(chosen) < sf:
                raise ValueError(f"placement on {layout.worker_types[j]} asked for more GPUs than are free")
            gpus[i] = tuple(chosen)
            consolidated[i] = len({g // k for g in chosen}) == layout.servers_needed(j, sf)
    return gpus, consolidated, renewed
