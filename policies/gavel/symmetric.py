"""The symmetric optimum of a heterogeneity-agnostic allocation LP ([Narayanan] §5.4, the agnostic
baselines of §5.7.3).

An agnostic policy sees every type a job can use as the same: its throughput row is constant over the
job's *eligible* types (T > 0 and sf_m ≤ N_j): ones for LAS and FTF, the reference type's throughput
for makespan. Its objective therefore depends on X only through each job's total time share
y_m = Σ_j X[m,j], and the LP has a whole face of optima that differ in how y_m is split over the types.
A vertex solver (HiGHS) returns a corner of that face, which favours some types: at light load one type
sits nearly idle, in a static batch the last jobs land on the slowest type. An agnostic scheduler
cannot prefer a type, so among the optima we take the symmetric one:

    X[m,j] = y_m · N_j / Σ_{j' eligible for m} N_j'          (j eligible for m, else 0)

each job spreads its time over its eligible types in proportion to their sizes: equal time on every
type when the types have equal counts, as in the paper's 36:36:36 cluster. This is where an
interior-point solver (Gavel's ECOS) lands: the analytic centre of the optimal face is invariant under
permuting identical types, hence symmetric in them.

Why it is an optimum: the row sums y are unchanged, so every objective value is; (5.1) holds since
X[m,j] ≤ y_m ≤ 1, (5.2) since Σ_j X[m,j] = y_m. (5.3): when every job can use every type,
Σ_m sf_m·X[m,j] = (N_j / N)·Σ_m sf_m·y_m ≤ N_j, because Σ_m sf_m·y_m ≤ N = Σ_j N_j holds for any
feasible X. When eligibility differs between jobs the proportional split can overfill a type; then a
second LP keeps y fixed and maximises the smallest ratio X[m,j] / (proportional share) over eligible
entries, within (5.3) — the split closest to symmetric in the max-min sense (feasible at ratio 0 by the
original solution).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from clustertwin.policies.gavel.lp import HighsModel
from clustertwin.policies.gavel.problem import Allocation, AllocationInput

# Capacity slack allowed for the proportional split (LP solutions meet (5.3) only to this tolerance).
CAPACITY_TOLERANCE = 1e-7


def eligible_types(throughputs: np.ndarray, scale_factors: np.ndarray, num_workers: np.ndarray) -> np.ndarray:
    """(n, k) bool: the types each job can use (positive throughput, fits in the type)."""
    sf = np.asarray(scale_factors, dtype=float)
    return (np.asarray(throughputs) > 0) & (sf[:, None] <= np.asarray(num_workers, dtype=float)[None, :])


def symmetric_split(
    fractions: np.ndarray,
    eligible: np.ndarray,
    scale_factors: np.ndarray,
    num_workers: np.ndarray,
    counts: np.ndarray | None = None,
) -> np.ndarray:
    """The symmetric allocation with the same row sums as ``fractions`` (module docstring).

    ``counts[m]`` makes row m stand for that many identical jobs in (5.3) (LAS's classes).
    """
    n, k = fractions.shape
    if n == 0:
        return fractions.copy()
    workers = np.asarray(num_workers, dtype=float)
    sf = np.asarray(scale_factors, dtype=float)
    counts = np.ones(n) if counts is None else np.asarray(counts, dtype=float)
    y = np.where(eligible, fractions, 0.0).sum(axis=1)
    sizes = np.where(eligible, workers[None, :], 0.0)
    total = sizes.sum(axis=1, keepdims=True)
    share = np.divide(sizes, total, out=np.zeros_like(sizes), where=total > 0)
    x = y[:, None] * share
    used = (counts * sf) @ x
    if np.all(used <= workers * (1 + CAPACITY_TOLERANCE) + CAPACITY_TOLERANCE):
        return x
    return _closest_to_symmetric(fractions, eligible, y, share, sf * counts, workers)


def _closest_to_symmetric(
    fractions: np.ndarray,
    eligible: np.ndarray,
    y: np.ndarray,
    share: np.ndarray,
    gpus: np.ndarray,
    workers: np.ndarray,
) -> np.ndarray:
    """max s s.t. Σ_j X[m,j] = y_m, (5.3), X[m,j] ≥ s·y_m·share[m,j] on eligible entries, 0 ≤ s ≤ 1."""
    n, k = fractions.shape
    rows, cols = np.nonzero(eligible)
    nv = rows.size
    var = np.arange(nv)
    target = y[rows] * share[rows, cols]
    keep = target > 0
    floor_rows = np.arange(int(keep.sum()))
    # Rows: n time sums, k capacities, one floor per eligible entry with a positive target.
    triplets_r = [rows, n + cols, n + k + floor_rows, n + k + floor_rows]
    triplets_c = [var, var, var[keep], np.full(floor_rows.size, nv)]
    triplets_v = [np.ones(nv), gpus[rows], np.ones(floor_rows.size), -target[keep]]
    matrix = sp.csc_matrix(
        (np.concatenate(triplets_v), (np.concatenate(triplets_r), np.concatenate(triplets_c))),
        shape=(n + k + floor_rows.size, nv + 1),
    )
    lower = np.concatenate([y, np.full(k, -np.inf), np.zeros(floor_rows.size)])
    upper = np.concatenate([y, workers, np.full(floor_rows.size, np.inf)])
    cost = np.zeros(nv + 1)
    cost[nv] = 1.0
    model = HighsModel(matrix, lower, upper, cost, np.zeros(nv + 1), np.ones(nv + 1), True)
    solution = model.solve()
    model.release()
    if solution is None:  # only within solver tolerance of the given optimum: keep it
        return np.where(eligible, fractions, 0.0)
    x = np.zeros((n, k))
    x[rows, cols] = np.clip(solution[:nv], 0.0, 1.0)
    return x


def symmetric_allocation(inp: AllocationInput, allocation: Allocation, throughputs: np.ndarray) -> Allocation:
    """``allocation`` (an optimum of an agnostic LP over ``throughputs``, without pairs) made symmetric."""
    if allocation.pair_fractions is not None and len(allocation.pair_fractions):
        return allocation  # pair rows have per-type tuples: no longer agnostic in the sense above
    eligible = eligible_types(throughputs, inp.scale_factors, inp.num_workers)
    fractions = symmetric_split(allocation.fractions, eligible, inp.scale_factors, inp.num_workers)
    return Allocation(allocation.job_ids, allocation.worker_types, fractions)
