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

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from clustertwin.policies.gavel.cluster import ClusterLayout

# Jobs that have received nothing yet outrank every job that has (the artifact uses the same device).
UNSERVED_PRIORITY = 1e9


def priorities(allocation: np.ndarray, received: np.ndarray, elapsed: np.ndarray) -> np.ndarray:
    """``X / share`` per combination and type; ``UNSERVED_PRIORITY·X`` where nothing was received yet."""
    share = received / elapsed[:, None]
    # Dividing only where share > 0 gives np.where's values without its 0/0 warnings, and so without
    # an errstate context, which costs more than the arithmetic on a round's ~100 rows.
    prio = np.divide(allocation, share, out=UNSERVED_PRIORITY * allocation, where=share > 0)
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
    singles: bool | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy selection for one round: the chosen combinations and the type each runs on.

    ``members[c]`` lists the jobs of combination c. Types are visited in ``type_order``; within a type
    combinations go in decreasing (priority, deficit, allocation). A job runs in at most one combination.
    ``singles`` says every combination is one job (computed from ``members`` when None); the greedy
    pass is then done a block at a time (:func:`_fill`), with the same result as one at a time.
    """
    if singles is None:
        singles = all(len(key) == 1 for key in members)
    if not singles:
        return _select_with_pairs(prio, deficit, allocation, members, scale_factors, capacity, type_order)
    busy = np.zeros(prio.shape[0], dtype=bool)
    rows: list[np.ndarray] = []
    types: list[int] = []
    one_gpu_each = not scale_factors.size or int(scale_factors.max()) == 1
    for j in type_order:
        free = int(capacity[j])
        if free <= 0:
            continue
        column = prio[:, j]
        # Combinations already chosen on an earlier type drop out; a stable sort keeps the others' order.
        candidates = ((column > 0) & ~busy).nonzero()[0]
        if candidates.size == 0:
            continue
        order = candidates[
            np.lexsort((-allocation[candidates, j], -deficit[candidates, j], -column[candidates]))
        ]
        chosen = order[:free] if one_gpu_each else _fill(order, scale_factors[order], free)
        busy[chosen] = True
        rows.append(chosen)
        types.append(j)
    if not rows:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    sizes = [chosen.size for chosen in rows]
    return np.concatenate(rows).astype(np.int64, copy=False), np.repeat(np.array(types, np.int64), sizes)


def _fill(order: np.ndarray, needs: np.ndarray, free: int) -> np.ndarray:
    """Walk ``order`` taking each entry whose need fits what is left of ``free``, skipping the others.

    Taken a block at a time: the longest prefix whose needs add up to at most ``free`` is taken, the entry
    after it cannot fit and is skipped, and entries needing more than what is left can never fit again.
    Each block ends on an entry larger than everything left after it, so there are at most as many blocks
    as distinct needs.
    """
    taken: list[np.ndarray] = []
    needs = np.asarray(needs, dtype=np.int64)
    while free > 0 and order.size:
        fits = needs <= free
        if not fits.all():
            order, needs = order[fits], needs[fits]
            if not order.size:
                break
        total = np.cumsum(needs)
        a = int(np.searchsorted(total, free, side="right"))
        taken.append(order[:a])
        if a == order.size:
            break
        if a:
            free -= int(total[a - 1])
        order, needs = order[a + 1 :], needs[a + 1 :]
    return np.concatenate(taken) if taken else np.zeros(0, dtype=np.int64)


def _select_with_pairs(
    prio: np.ndarray,
    deficit: np.ndarray,
    allocation: np.ndarray,
    members: Sequence[tuple[int, ...]],
    scale_factors: np.ndarray,
    capacity: np.ndarray,
    type_order: Sequence[int],
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`select_round` one combination at a time: a pair makes both its jobs busy mid-pass."""
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
    fullest server that still fits it (the lowest-numbered among equals), taking that server's
    lowest-numbered free GPUs, otherwise across the emptiest servers.
    """
    types = np.asarray(types, dtype=np.int64)
    scale_factors = np.asarray(scale_factors, dtype=np.int64)
    renewed = np.asarray(last_type) == types
    consolidated = np.where(renewed, last_consolidated, False)
    if renewed.all():
        return list(last_gpus), consolidated, renewed
    if scale_factors.size and int(scale_factors.max()) == 1:
        placed = _place_singles(layout, types, renewed, last_gpus, consolidated)
        if placed is not None:
            return placed
    renews = renewed.tolist()
    gpus: list[tuple[int, ...]] = [held if r else () for held, r in zip(last_gpus, renews, strict=True)]
    for j in np.bincount(types[~renewed], minlength=len(layout.gpus)).nonzero()[0].tolist():
        free = np.ones(layout.gpus[j], dtype=bool)
        on_type = types == j
        kept = [gpus[i] for i in (renewed & on_type).nonzero()[0].tolist()]
        if kept:
            free[np.fromiter(itertools.chain.from_iterable(kept), dtype=np.int64)] = False
        pending = (~renewed & on_type).nonzero()[0]
        pending = pending[np.argsort(-scale_factors[pending], kind="stable")]
        _place_type(layout, j, free, pending, scale_factors[pending], gpus, consolidated)
    return gpus, consolidated, renewed


def _place_singles(
    layout: ClusterLayout,
    types: np.ndarray,
    renewed: np.ndarray,
    last_gpus: Sequence[tuple[int, ...]],
    consolidated: np.ndarray,
) -> tuple[list[tuple[int, ...]], np.ndarray, np.ndarray] | None:
    """:func:`place_round` when every combination needs one GPU (most rounds of a single-GPU trace).

    `_place_type`'s single-GPU rule (the free GPUs in order of their server's free count, then GPU
    number, one per pending combination in row order) for every type at once: GPUs and servers are
    numbered across types (`_FleetIndex`), so one stable sort by (type, server's free count) replaces
    a sort per type. A renewed combination holds exactly one GPU, so the renewed leases' GPUs are one
    flat array.
    """
    fleet = _FleetIndex.of(layout)
    kept = np.fromiter(
        itertools.chain.from_iterable(itertools.compress(last_gpus, renewed.tolist())), np.int64
    )
    if kept.size != np.count_nonzero(renewed):
        return None  # a renewed lease that holds no GPU (only hand-made inputs): the general rule
    free = np.ones(fleet.type_of_gpu.size, dtype=bool)
    free[fleet.first_gpu[types[renewed]] + kept] = False
    ids = free.nonzero()[0]
    server = fleet.server_of_gpu[ids]
    id_types = fleet.type_of_gpu[ids]
    ranked = ids[np.lexsort((np.bincount(server, minlength=fleet.num_servers)[server], id_types))]
    pending = (~renewed).nonzero()[0]
    pending = pending[np.argsort(types[pending], kind="stable")]  # by type, then row
    need = np.bincount(types[pending], minlength=len(layout.gpus))
    have = np.bincount(id_types, minlength=len(layout.gpus))
    if (need > have).any():
        j = int(np.flatnonzero(need > have)[0])
        raise ValueError(f"placement on {layout.worker_types[j]} asked for more GPUs than are free")
    # Type j's free GPUs are ranked[start_j : start_j + have_j]; its pending rows take the first need_j.
    start = np.cumsum(have) - have
    within = np.arange(pending.size) - np.repeat(np.cumsum(need) - need, need)
    chosen = ranked[np.repeat(start, need) + within]
    gpus = list(last_gpus)
    for i, g in zip(pending.tolist(), (chosen - fleet.first_gpu[types[pending]]).tolist(), strict=True):
        gpus[i] = (g,)
    consolidated[pending] = True
    return gpus, consolidated, renewed


@dataclass(frozen=True)
class _FleetIndex:
    """The GPUs of every type numbered one after another (type j's GPU g is ``first_gpu[j] + g``), with
    each one's type and server, servers also numbered across types."""

    first_gpu: np.ndarray
    type_of_gpu: np.ndarray
    server_of_gpu: np.ndarray
    num_servers: int

    @staticmethod
    def of(layout: ClusterLayout) -> _FleetIndex:
        return _fleet_index(layout.gpus, layout.gpus_per_server)


@functools.lru_cache(maxsize=64)
def _fleet_index(gpus: tuple[int, ...], per_server: tuple[int, ...]) -> _FleetIndex:
    counts = np.asarray(gpus, dtype=np.int64)
    servers = -(-counts // np.asarray(per_server, dtype=np.int64))
    type_of_gpu = np.repeat(np.arange(len(gpus)), counts)
    first_gpu = np.cumsum(counts) - counts
    local = np.arange(type_of_gpu.size) - first_gpu[type_of_gpu]
    server_of_gpu = (np.cumsum(servers) - servers)[type_of_gpu] + local // np.asarray(per_server)[type_of_gpu]
    return _FleetIndex(first_gpu, type_of_gpu, server_of_gpu, int(servers.sum()))


def _place_type(
    layout: ClusterLayout,
    j: int,
    free: np.ndarray,
    pending: np.ndarray,
    needs: np.ndarray,
    gpus: list[tuple[int, ...]],
    consolidated: np.ndarray,
) -> None:
    """Place ``pending`` (largest first) on type j's ``free`` GPUs, writing ``gpus`` and ``consolidated``.

    Jobs of one size that fit a server go together: the fullest fitting server stays the fullest while
    it still fits one more (its count only falls), so the jobs fill the fitting servers in order of
    (free GPUs, server number), ``free // need`` jobs each. A job that fits no single server is spread.
    """
    k = layout.gpus_per_server[j]
    if needs[0] == 1:
        # Single-GPU jobs only (the largest comes first): the free GPUs in order of (their server's free
        # count, GPU number), one each.
        ids = np.flatnonzero(free)
        if pending.size > ids.size:
            raise ValueError(f"placement on {layout.worker_types[j]} asked for more GPUs than are free")
        server = ids // k
        chosen = ids[np.argsort(np.bincount(server)[server], kind="stable")[: pending.size]]
        for i, g in zip(pending.tolist(), chosen.tolist(), strict=True):
            gpus[i] = (g,)
        consolidated[pending] = True
        return
    starts = np.arange(0, free.size, k)
    counts = np.add.reduceat(free.astype(np.int64), starts) if free.size else np.zeros(0, dtype=np.int64)
    bounds = np.concatenate([[0], np.flatnonzero(np.diff(needs)) + 1, [len(needs)]]).tolist()
    for lo, hi in itertools.pairwise(bounds):
        sf = int(needs[lo])
        group = pending[lo:hi]
        placed = 0
        if sf <= k:
            eligible = np.flatnonzero(counts >= sf)
            if eligible.size:
                order = eligible[np.argsort(counts[eligible], kind="stable")]
                serves = counts[order] // sf
                total = np.cumsum(serves)
                placed = min(group.size, int(total[-1]))
                used = int(np.searchsorted(total, placed)) + 1
                servers, quota = order[:used], serves[:used].copy()
                quota[-1] = placed - (int(total[used - 2]) if used > 1 else 0)
                chosen = _first_free(free, k, servers, quota * sf)
                free[chosen] = False
                counts[servers] -= quota * sf
                for i, held in zip(group[:placed].tolist(), chosen.reshape(placed, sf).tolist(), strict=True):
                    gpus[i] = tuple(held)
                consolidated[group[:placed]] = True
        for i in group[placed:].tolist():
            order = np.argsort(-counts, kind="stable")
            total = np.cumsum(counts[order])
            if not total.size or total[-1] < sf:
                raise ValueError(f"placement on {layout.worker_types[j]} asked for more GPUs than are free")
            used = int(np.searchsorted(total, sf)) + 1
            servers, quota = order[:used], counts[order[:used]].copy()
            quota[-1] = sf - (int(total[used - 2]) if used > 1 else 0)
            chosen = _first_free(free, k, servers, quota)
            free[chosen] = False
            counts[servers] -= quota
            gpus[i] = tuple(chosen.tolist())
            consolidated[i] = int(np.count_nonzero(quota)) == layout.servers_needed(j, sf)


def _first_free(free: np.ndarray, k: int, servers: np.ndarray, quota: np.ndarray) -> np.ndarray:
    """The ``quota[i]`` lowest-numbered free GPUs of each of ``servers``, server by server in that order."""
    ids = np.flatnonzero(free)
    server = ids // k
    rank = np.arange(ids.size) - np.searchsorted(server, server)
    num_servers = -(-free.size // k)
    position = np.full(num_servers, -1)
    position[servers] = np.arange(servers.size)
    limit = np.zeros(num_servers, dtype=np.int64)
    limit[servers] = quota
    keep = rank < limit[server]
    return ids[keep][np.argsort(position[server[keep]], kind="stable")]
