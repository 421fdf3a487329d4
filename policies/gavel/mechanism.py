"""Gavel's round-based scheduling mechanism (seed 001, §5.5, Algorithm 2).

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
from dataclasses import dataclass

import numpy as np

from policies.gavel.cluster import ClusterLayout

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
) -> list[tuple[int, int]]:
    """Greedy selection of (combination, type) pairs for one round.

    ``members[c]`` lists the job rows of combination c. Types are visited in ``type_order``; within a type
    combinations go in decreasing (priority, deficit, allocation). A job runs in at most one combination.
    """
    chosen: list[tuple[int, int]] = []
    busy: set[int] = set()
    for j in type_order:
        free = int(capacity[j])
        if free <= 0:
            continue
        column = prio[:, j]
        candidates = np.flatnonzero(column > 0)
        if candidates.size == 0:
            continue
        order = candidates[np.lexsort((-allocation[candidates, j], -deficit[candidates, j], -column[candidates]))]
        for c in order.tolist():
            need = int(scale_factors[c])
            if need > free:
                continue
            jobs = members[c]
            if any(m in busy for m in jobs):
                continue
            busy.update(jobs)
            chosen.append((c, j))
            free -= need
            if free == 0:
                break
    return chosen


@dataclass(frozen=True)
class Placement:
    gpus: tuple[int, ...]
    consolidated: bool  # on the fewest servers its scale factor allows
    renewed: bool  # the same GPUs as last round: the lease is extended, no checkpoint


def place(
    layout: ClusterLayout,
    j: int,
    requests: Sequence[tuple[int, tuple[int, ...] | None]],
) -> list[Placement]:
    """Place ``(scale_factor, previous_gpus)`` requests on type ``j``; returns placements in order.

    Requests whose previous GPUs are all still free keep them; the rest are placed largest first, each on
    the server(s) that leave the least fragmentation: the fullest server that still fits it, otherwise the
    emptiest servers first.
    """
    k = layout.gpus_per_server[j]
    total = layout.gpus[j]
    num_servers = -(-total // k)
    free_count = [min(k, total - s * k) for s in range(num_servers)]
    taken: set[int] = set()
    result: list[Placement | None] = [None] * len(requests)

    for index, (sf, previous) in enumerate(requests):
        if previous and len(previous) == sf and taken.isdisjoint(previous):
            taken.update(previous)
            servers = {g // k for g in previous}
            for g in previous:
                free_count[g // k] -= 1
            result[index] = Placement(tuple(previous), len(servers) == layout.servers_needed(j, sf), True)

    rest = sorted((i for i in range(len(requests)) if result[i] is None), key=lambda i: -requests[i][0])
    for index in rest:
        sf = requests[index][0]
        if sf <= k:
            fitting = [s for s in range(num_servers) if free_count[s] >= sf]
            servers = [min(fitting, key=lambda s: free_count[s])] if fitting else []
        else:
            servers = []
        if not servers:
            servers = sorted(range(num_servers), key=lambda s: -free_count[s])
        gpus: list[int] = []
        for s in servers:
            for g in range(s * k, s * k + k):
                if len(gpus) == sf:
                    break
                if g < total and g not in taken:
                    gpus.append(g)
            if len(gpus) == sf:
                break
        if len(gpus) < sf:
            raise ValueError(f"placement on type {layout.worker_types[j]} asked for more GPUs than are free")
        taken.update(gpus)
        for g in gpus:
            free_count[g // k] -= 1
        used = {g // k for g in gpus}
        result[index] = Placement(tuple(gpus), len(used) == layout.servers_needed(j, sf), False)
    return [p for p in result if p is not None]
