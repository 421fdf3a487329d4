"""Gavel's round-based scheduling mechanism ([Narayanan], §5.5, Algorithm 2).

Each round every runnable *combination* (one job, or a pair sharing an accelerator) has a priority per
worker type: the allocation it should get divided by the share it has received,
``priority[c, j] = X[c, j] / share[c, j]`` with ``share = time received on j / time elapsed``. Combinations
are taken greedily in decreasing priority, one combination per job per round; a combination needing more
GPUs than remain is skipped. Chosen combinations are then placed largest first, a job keeping the GPUs it
held last round when they are free (its lease is renewed and no checkpoint is needed), others packed onto
as few servers as possible.

The greedy pass and the single-GPU placement are loops compiled by numba, written as the rule reads: on a
round's ~100 rows numpy's per-call cost, not the arithmetic, set the time of the vectorised forms.

Departure from the artifact: Gavel's code divides by the job's share of all time spent on type j by every
job; we divide by the job's own share of elapsed time, so a job exactly on track has priority 1 whatever its
scale factor. Both raise the priority of a job that fell behind its allocation, which is the property the
mechanism needs (§5.5: "a job that doesn't run gains priority").
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
from clustertwin.policies.compiled import compiled
from clustertwin.policies.gavel.cluster import ClusterLayout

# Jobs that have received nothing yet outrank every job that has (the artifact uses the same device).
UNSERVED_PRIORITY = 1e9


@compiled
def priorities(allocation: np.ndarray, received: np.ndarray, elapsed: np.ndarray) -> np.ndarray:
    """``X / share`` per combination and type (``share = received / elapsed``); ``UNSERVED_PRIORITY·X``
    where nothing was received yet; 0 where X is (numerically) 0."""
    prio = np.zeros(allocation.shape)
    for c in range(allocation.shape[0]):
        for j in range(allocation.shape[1]):
            x = allocation[c, j]
            if x > 1e-9:
                share = received[c, j] / elapsed[c]
                prio[c, j] = x / share if share > 0 else UNSERVED_PRIORITY * x
    return prio


def load_compiled() -> None:
    """Load the compiled loops (compiling them, the first time on a machine), so that a real run's first
    round is not held up by it: one tiny round through each, with the argument types rounds use."""
    layout = ClusterLayout(("t",), (2,), (2,))
    none = np.full(1, -1, dtype=np.int64)
    plan_single_gpu_round(
        np.ones((1, 1)),
        np.ones((1, 1)),
        np.ones(1),
        np.zeros((1, 1)),
        layout,
        [0],
        none,
        none,
        np.zeros(1, bool),
    )
    select_round(
        np.ones((1, 1)), np.zeros((1, 1)), np.ones((1, 1)), [(0,)], np.ones(1, np.int64), np.ones(1), [0]
    )
    place_round(
        layout, np.zeros(2, np.int64), np.ones(2, np.int64), np.array([0, -1]), [(1,), ()], np.ones(2, bool)
    )


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
    ``singles`` says every combination is one job (computed from ``members`` when None); the pass is then
    a compiled loop (:func:`_greedy_singles`).
    """
    if singles is None:
        singles = all(len(key) == 1 for key in members)
    if not singles:
        return _select_with_pairs(prio, deficit, allocation, members, scale_factors, capacity, type_order)
    return _greedy_singles(
        prio,
        deficit,
        allocation,
        np.asarray(scale_factors, dtype=np.int64),
        np.asarray(capacity, dtype=np.int64),
        np.asarray(type_order, dtype=np.int64),
    )


@compiled
def _greedy_singles(
    prio: np.ndarray,
    deficit: np.ndarray,
    allocation: np.ndarray,
    scale_factors: np.ndarray,
    capacity: np.ndarray,
    type_order: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 2's pass over single-job combinations: per type, in decreasing (priority, deficit,
    allocation), ties by row, take each combination not chosen yet whose GPUs fit what is left."""
    n = prio.shape[0]
    busy = np.zeros(n, dtype=np.bool_)
    rows = np.empty(n, dtype=np.int64)
    types = np.empty(n, dtype=np.int64)
    candidates = np.empty(n, dtype=np.int64)
    taken = 0
    for j in type_order:
        free = capacity[j]
        if free <= 0:
            continue
        count = 0
        for c in range(n):
            if prio[c, j] > 0 and not busy[c]:
                candidates[count] = c
                count += 1
        for c in _by_priority(candidates[:count], prio[:, j], deficit[:, j], allocation[:, j]):
            if scale_factors[c] > free:
                continue
            busy[c] = True
            rows[taken] = c
            types[taken] = j
            taken += 1
            free -= scale_factors[c]
            if free == 0:
                break
    return rows[:taken], types[:taken]


@compiled
def _by_priority(
    rows: np.ndarray, prio: np.ndarray, deficit: np.ndarray, allocation: np.ndarray
) -> np.ndarray:
    """``rows`` in decreasing (priority, deficit, allocation), ties in their given order: a bottom-up
    merge sort that takes from the right run only what comes strictly first."""
    src, dst = rows.copy(), np.empty_like(rows)
    width = 1
    while width < rows.size:
        for lo in range(0, rows.size, 2 * width):
            mid, hi = min(lo + width, rows.size), min(lo + 2 * width, rows.size)
            a, b = lo, mid
            for out in range(lo, hi):
                if b < hi and (a == mid or _first(src[b], src[a], prio, deficit, allocation)):
                    dst[out] = src[b]
                    b += 1
                else:
                    dst[out] = src[a]
                    a += 1
        src, dst = dst, src
        width *= 2
    return src


@compiled
def _first(b: int, a: int, prio: np.ndarray, deficit: np.ndarray, allocation: np.ndarray) -> bool:
    """Whether row b comes strictly before row a."""
    if prio[b] != prio[a]:
        return prio[b] > prio[a]
    if deficit[b] != deficit[a]:
        return deficit[b] > deficit[a]
    return allocation[b] > allocation[a]


def plan_single_gpu_round(
    allocation: np.ndarray,
    received: np.ndarray,
    elapsed: np.ndarray,
    deficit: np.ndarray,
    layout: ClusterLayout,
    type_order: Sequence[int],
    last_type: np.ndarray,
    last_gpu: np.ndarray,
    last_consolidated: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`priorities`, :func:`select_round` and :func:`place_round` at once, when every combination is
    one job on one GPU (most rounds of a single-GPU trace): ``(rows, types, gpu, consolidated, renewed)``,
    with ``gpu`` the GPU of each chosen combination. ``last_gpu[c]`` is the GPU combination c held last
    round, read where ``last_type[c]`` is that round's type."""
    rows, types, gpu, consolidated, renewed, short = _plan_single_gpu_round(
        allocation,
        received,
        elapsed,
        deficit,
        layout.gpu_counts,
        layout.server_sizes,
        np.asarray(type_order, dtype=np.int64),
        last_type,
        last_gpu,
        last_consolidated,
    )
    _check_placed(layout, short)
    return rows, types, gpu, consolidated, renewed


@compiled
def _plan_single_gpu_round(
    allocation: np.ndarray,
    received: np.ndarray,
    elapsed: np.ndarray,
    deficit: np.ndarray,
    gpus: np.ndarray,
    per_server: np.ndarray,
    type_order: np.ndarray,
    last_type: np.ndarray,
    last_gpu: np.ndarray,
    last_consolidated: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    prio = priorities(allocation, received, elapsed)
    one_each = np.ones(allocation.shape[0], dtype=np.int64)
    rows, types = _greedy_singles(prio, deficit, allocation, one_each, gpus, type_order)
    held = np.empty(rows.size, dtype=np.int64)
    renewed = np.empty(rows.size, dtype=np.bool_)
    consolidated = np.empty(rows.size, dtype=np.bool_)
    for i in range(rows.size):
        held[i] = last_gpu[rows[i]]
        renewed[i] = last_type[rows[i]] == types[i]
        consolidated[i] = last_consolidated[rows[i]] if renewed[i] else True
    gpu, short = _single_gpus(types, renewed, held, gpus, per_server)
    return rows, types, gpu, consolidated, renewed, short


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
    """:func:`place_round` when every combination needs one GPU (most rounds of a single-GPU trace):
    `_place_type`'s single-GPU rule for every type in one compiled pass (:func:`_single_gpus`). A renewed
    combination holds exactly one GPU, so the renewed leases' GPUs are one flat array."""
    kept = np.fromiter(
        itertools.chain.from_iterable(itertools.compress(last_gpus, renewed.tolist())), np.int64
    )
    if kept.size != np.count_nonzero(renewed):
        return None  # a renewed lease that holds no GPU (only hand-made inputs): the general rule
    held = np.full(types.size, -1, dtype=np.int64)
    held[renewed] = kept
    chosen, short = _single_gpus(types, renewed, held, layout.gpu_counts, layout.server_sizes)
    _check_placed(layout, short)
    pending = (~renewed).nonzero()[0]
    gpus = list(last_gpus)
    for i, g in zip(pending.tolist(), chosen[pending].tolist(), strict=True):
        gpus[i] = (g,)
    consolidated[pending] = True
    return gpus, consolidated, renewed


def _check_placed(layout: ClusterLayout, short: int) -> None:
    """Raise for what :func:`_single_gpus` reports: a type short of free GPUs, or a renewed lease on a
    GPU its type does not have (-2)."""
    if short >= 0:
        raise ValueError(f"placement on {layout.worker_types[short]} asked for more GPUs than are free")
    if short == -2:
        raise ValueError("a renewed lease holds a GPU its worker type does not have")


@compiled
def _single_gpus(
    types: np.ndarray, renewed: np.ndarray, held: np.ndarray, gpus: np.ndarray, per_server: np.ndarray
) -> tuple[np.ndarray, int]:
    """One GPU for each combination that is not ``renewed``: per type, the free GPUs in order of (their
    server's free count, GPU number), one per pending combination in row order; a renewed combination
    keeps ``held``. Returns the GPU per row and -1, or a type short of free GPUs (-2: a renewed lease on a
    GPU its type does not have)."""
    chosen = held.copy()
    for j in range(gpus.size):
        free = np.ones(gpus[j], dtype=np.bool_)
        need = 0
        for i in range(types.size):
            if types[i] != j:
                continue
            if not renewed[i]:
                need += 1
            elif 0 <= held[i] < gpus[j]:
                free[held[i]] = False
            else:
                return chosen, -2
        if need == 0:
            continue
        k = per_server[j]
        free_on_server = np.zeros((gpus[j] + k - 1) // k, dtype=np.int64)
        for g in range(gpus[j]):
            if free[g]:
                free_on_server[g // k] += 1
        # A counting sort of the free GPUs by their server's free count (1 … k), stable in GPU number.
        start = np.zeros(k + 2, dtype=np.int64)
        for g in range(gpus[j]):
            if free[g]:
                start[free_on_server[g // k] + 1] += 1
        for c in range(1, k + 2):
            start[c] += start[c - 1]
        if need > start[k + 1]:
            return chosen, j
        ranked = np.empty(start[k + 1], dtype=np.int64)
        for g in range(gpus[j]):
            if free[g]:
                c = free_on_server[g // k]
                ranked[start[c]] = g
                start[c] += 1
        taken = 0
        for i in range(types.size):
            if types[i] == j and not renewed[i]:
                chosen[i] = ranked[taken]
                taken += 1
    return chosen, -1


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
