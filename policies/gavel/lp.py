"""The allocation LP shared by Gavel's policies, built as sparse matrices and solved by HiGHS.

[Narayanan] §5.3.1: every policy optimises over the allocation matrix X subject to (5.1) 0 ≤ X ≤ 1,
(5.2) Σ_j X[m,j] ≤ 1 and (5.3) Σ_m sf_m·X[m,j] ≤ N_j; with space sharing X gains one row per job pair,
(5.2) sums over every row that contains the job, (5.3) counts a pair once with its shared scale factor,
and job m's effective throughput τ_m(X) adds its share of each pair's throughput tuple.

Only the entries of X that can be non-zero become LP columns: a job (or pair) on a type where its
throughput is 0, or whose scale factor exceeds that type's GPU count (it could never be placed), is fixed
at 0 by leaving it out. The matrices go to HiGHS directly (no modelling layer): at 2,048 jobs a cvxpy
rebuild costs more than the solve.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import highspy
import numpy as np
import scipy.sparse as sp
from clustertwin.policies.compiled import compiled
from clustertwin.policies.gavel.problem import Allocation, AllocationInput
from clustertwin.policies.gavel.space_sharing import active_pairs, pair_columns, relative_pair_throughputs

# Phase 2 keeps the phase-1 optimum t* up to this relative slack (see `solve_max_min`).
OPTIMUM_SLACK = 1e-6
# Above this many columns interior point (with crossover, so a basis remains for warm starts) beats
# dual simplex on these LPs from a cold start; below it simplex's lower start-up cost wins (measured:
# 3,000 columns 33 ms vs 88 ms, 760 columns 12 ms vs 2 ms).
IPM_MIN_COLUMNS = 1_500
# HiGHS simplex_strategy values.
_DUAL, _PRIMAL = 1, 4
# highspy's MatrixFormat.kColwise and ObjSense values, for passModel's array form.
_COLWISE = int(highspy.MatrixFormat.kColwise)
_MAXIMIZE, _MINIMIZE = int(highspy.ObjSense.kMaximize), int(highspy.ObjSense.kMinimize)
# HighsBasisStatus members by value (kLower, kBasic, kUpper, kZero, kNonbasic), to build a basis.
_STATUS = tuple(highspy.HighsBasisStatus(v) for v in range(5))
_LOWER, _BASIC = int(highspy.HighsBasisStatus.kLower), int(highspy.HighsBasisStatus.kBasic)


@dataclass(frozen=True)
class Layout:
    """Which entries of X are LP columns, and the sparse maps from columns to jobs and types.

    X rows are the n jobs followed by the p pairs; column v is entry ``X[row[v], col[v]]``.
    """

    n_jobs: int
    n_pairs: int
    k: int
    row: np.ndarray  # (nv,) X row of each column
    col: np.ndarray  # (nv,) accelerator type of each column
    time_share: sp.csr_matrix  # (n_jobs, nv): 1 where the column's row contains the job, for (5.2)
    capacity: sp.csr_matrix  # (k, nv): GPUs the column's row holds on its type, for (5.3)
    throughput: sp.csr_matrix  # (n_jobs, nv): the job's throughput from the column, so τ = throughput @ x
    num_workers: np.ndarray  # (k,) N_j

    @property
    def nv(self) -> int:
        return int(self.row.shape[0])

    def best_throughput(self) -> np.ndarray:
        """Each job's largest throughput from any one column: τ_m can never exceed it (Σ X ≤ 1)."""
        if self.nv == 0:
            return np.zeros(self.n_jobs)
        return np.asarray(self.throughput.max(axis=1).todense()).ravel()

    def runnable(self) -> np.ndarray:
        """Jobs with at least one column; the others can run nowhere and are left out of objectives."""
        return np.diff(self.time_share.indptr) > 0


def build_layout(
    throughputs: np.ndarray,
    scale_factors: np.ndarray,
    num_workers: np.ndarray,
    counts: np.ndarray | None = None,
    pair_members: np.ndarray | None = None,
    pair_throughputs: np.ndarray | None = None,
) -> Layout:
    """Columns and constraint maps for jobs (rows of ``throughputs``) and optional job pairs.

    ``counts[m]`` makes row m stand for that many identical jobs (LAS's class aggregation): its
    columns are each job's share and use ``counts[m]`` times the GPUs. Pair columns come from
    `space_sharing.pair_columns`.
    """
    n, k = throughputs.shape
    sf = np.asarray(scale_factors, dtype=float)
    workers = np.asarray(num_workers, dtype=float)
    counts = np.ones(n) if counts is None else np.asarray(counts, dtype=float)
    job_row, job_col = np.nonzero((throughputs > 0) & (sf[:, None] <= workers[None, :]))
    n_single = job_row.shape[0]
    if pair_members is None or pair_throughputs is None:
        n_pairs, pairs = 0, pair_columns(np.zeros((0, 2), dtype=np.int64), np.zeros((0, k, 2)), sf, workers)
    else:
        n_pairs, pairs = len(pair_members), pair_columns(pair_members, pair_throughputs, sf, workers)
    nv = n_single + len(pairs)
    single_vars = np.arange(n_single)
    pair_vars = np.arange(n_single, nv)
    # Rows of the job-indexed maps: each single column belongs to its job, each pair column to both.
    job_of = np.concatenate([job_row, pairs.first, pairs.second])
    var_of = np.concatenate([single_vars, pair_vars, pair_vars])

    def csr(r: np.ndarray, c: np.ndarray, v: np.ndarray, rows: int) -> sp.csr_matrix:
        # (r, c) pairs are distinct: sorting them gives the canonical CSR that scipy's COO path builds,
        # without its conversions (they cost more than the solve on small LPs).
        order = np.lexsort((c, r))
        indptr = np.zeros(rows + 1, dtype=np.int32)
        np.cumsum(np.bincount(r, minlength=rows), out=indptr[1:])
        matrix = sp.csr_matrix((v[order], c[order].astype(np.int32), indptr), shape=(rows, nv))
        matrix.has_canonical_format = True
        return matrix

    return Layout(
        n_jobs=n,
        n_pairs=n_pairs,
        k=k,
        row=np.concatenate([job_row, n + pairs.pair]),
        col=np.concatenate([job_col, pairs.col]),
        time_share=csr(job_of, var_of, np.ones(job_of.shape[0]), n),
        capacity=csr(
            np.concatenate([job_col, pairs.col]),
            np.arange(nv),
            np.concatenate([sf[job_row] * counts[job_row], pairs.sf]),
            k,
        ),
        throughput=csr(
            job_of,
            var_of,
            np.concatenate([throughputs[job_row, job_col], pairs.first_throughput, pairs.second_throughput]),
            n,
        ),
        num_workers=workers,
    )


def layout_for(inp: AllocationInput, throughputs: np.ndarray, pair_throughputs: np.ndarray | None) -> Layout:
    """The layout of ``inp`` with (possibly substituted) throughputs; pairs only when given."""
    members = inp.pairs.members if pair_throughputs is not None and inp.pairs is not None else None
    return build_layout(throughputs, inp.scale_factors, inp.num_workers, None, members, pair_throughputs)


class _Spare(threading.local):
    def __init__(self) -> None:
        self.solvers: list[highspy.Highs] = []


_SPARE = _Spare()


def _spare_solver() -> highspy.Highs:
    """A released solver of this thread, else a new one (quiet, no presolve: the layout already drops
    the columns presolve would remove, and skipping it saves ~15%)."""
    if _SPARE.solvers:
        return _SPARE.solvers.pop()
    highs = highspy.Highs()
    highs.setOptionValue("output_flag", False)
    highs.setOptionValue("presolve", "off")
    return highs


class HighsModel:
    """One HiGHS LP kept alive so later solves can change bounds or costs and warm-start.

    :meth:`release` hands the solver back for the next model in this thread: building one costs more
    than a small solve. A passed model replaces the previous one with its basis, and every solve sets
    the options it reads, so a reused solver solves exactly as a new one would.
    """

    def __init__(
        self,
        matrix: sp.spmatrix | CscArrays,
        row_lower: np.ndarray,
        row_upper: np.ndarray,
        cost: np.ndarray,
        col_lower: np.ndarray,
        col_upper: np.ndarray,
        maximize: bool,
    ) -> None:
        a = matrix if isinstance(matrix, CscArrays) else sp.csc_matrix(matrix)
        num_row, num_col = a.shape
        self._highs = _spare_solver()
        self._highs.passModel(
            num_col,
            num_row,
            len(a.data),
            _COLWISE,
            _MAXIMIZE if maximize else _MINIMIZE,
            0.0,
            np.asarray(cost, dtype=float),
            np.asarray(col_lower, dtype=float),
            np.asarray(col_upper, dtype=float),
            np.asarray(row_lower, dtype=float),
            np.asarray(row_upper, dtype=float),
            np.asarray(a.indptr, dtype=np.int32),
            np.asarray(a.indices, dtype=np.int32),
            np.asarray(a.data, dtype=float),
            # Every column continuous (HiGHS reads this array only when it is given).
            np.zeros(num_col, dtype=np.int32),
        )
        self.num_col = num_col

    def release(self) -> None:
        """Give the solver back for reuse; the model cannot be solved again."""
        _SPARE.solvers.append(self._highs)
        self._highs = None

    def solve(self, warm: str | None = None) -> np.ndarray | None:
        """Column values at an optimum, or None when the LP is infeasible (or the solve failed).

        A cold solve (``warm=None``) picks interior point or dual simplex by size. A re-solve reuses the
        previous basis: ``warm="primal"`` after changes that keep it primal feasible (new costs, looser
        bounds), where primal simplex needs a handful of pivots (dual simplex took 10x longer on the
        2,048-job LAS efficiency phase); ``warm="dual"`` after changes that keep it dual feasible (any
        bound change on a feasibility LP with zero costs).
        """
        if warm is None and self.num_col >= IPM_MIN_COLUMNS:
            self._highs.setOptionValue("solver", "ipm")
        else:
            self._highs.setOptionValue("solver", "simplex")
            self._highs.setOptionValue("simplex_strategy", _PRIMAL if warm == "primal" else _DUAL)
        self._highs.run()
        if self._highs.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return None
        return np.asarray(self._highs.getSolution().col_value)

    def set_basis(self, col_status: np.ndarray, row_status: np.ndarray) -> None:
        """Start the next solve from this basis (HighsBasisStatus values per column and row)."""
        basis = highspy.HighsBasis()
        basis.col_status = list(map(_STATUS.__getitem__, col_status.tolist()))
        basis.row_status = list(map(_STATUS.__getitem__, row_status.tolist()))
        basis.valid = True
        self._highs.setBasis(basis)

    def basis(self) -> tuple[np.ndarray, np.ndarray]:
        """The current basis as HighsBasisStatus values: (per column, per row)."""
        basis = self._highs.getBasis()
        return (
            np.array([s.value for s in basis.col_status], dtype=np.int8),
            np.array([s.value for s in basis.row_status], dtype=np.int8),
        )

    def set_row_bounds(self, rows: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> None:
        rows = np.asarray(rows, dtype=np.int32)
        self._highs.changeRowsBounds(len(rows), rows, np.asarray(lower, float), np.asarray(upper, float))

    def set_col_bounds(self, cols: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> None:
        cols = np.asarray(cols, dtype=np.int32)
        self._highs.changeColsBounds(len(cols), cols, np.asarray(lower, float), np.asarray(upper, float))

    def set_costs(self, cost: np.ndarray) -> None:
        cols = np.arange(self.num_col, dtype=np.int32)
        self._highs.changeColsCost(self.num_col, cols, np.asarray(cost, dtype=float))


@dataclass(frozen=True)
class CscArrays:
    """A column-compressed matrix as bare arrays, for HiGHS (what ``scipy.sparse.csc_matrix`` holds)."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    shape: tuple[int, int]

    @classmethod
    def from_distinct_triplets(
        cls, rows: np.ndarray, cols: np.ndarray, values: np.ndarray, shape: tuple[int, int]
    ) -> CscArrays:
        """The canonical CSC of entries at distinct (row, col): columns in order, rows sorted in each."""
        order = np.lexsort((rows, cols))
        indptr = np.zeros(shape[1] + 1, dtype=np.int64)
        np.cumsum(np.bincount(cols, minlength=shape[1]), out=indptr[1:])
        return cls(indptr, rows[order], values[order], shape)


@dataclass(frozen=True)
class ExtraRows:
    """Policy rows over the X columns plus a coefficient on the epigraph column t (when there is one)."""

    matrix: sp.spmatrix  # (r, nv)
    lower: np.ndarray
    upper: np.ndarray
    t_coeff: np.ndarray | None = None  # (r,)


def equal_share_throughput(throughputs: np.ndarray, num_workers: np.ndarray) -> np.ndarray:
    """τ_m(X^eq) with X^eq[m,j] = N_j / Σ N: each job's throughput on a fleet-proportional time split."""
    workers = np.asarray(num_workers, dtype=float)
    return throughputs @ (workers / workers.sum())


def base_rows(layout: Layout) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
    """(5.2) and (5.3) as rows over the X columns: time share ≤ 1 per job, GPUs ≤ N_j per type."""
    matrix = sp.vstack([layout.time_share, layout.capacity], format="csr")
    lower = np.full(layout.n_jobs + layout.k, -np.inf)
    upper = np.concatenate([np.ones(layout.n_jobs), layout.num_workers])
    return matrix, lower, upper


def efficiency_costs(layout: Layout, reference: np.ndarray) -> np.ndarray:
    """Per-column weights of Σ_m τ_m(X)/reference_m, the total normalised throughput (jobs with a zero
    reference contribute nothing)."""
    inv = np.divide(1.0, reference, out=np.zeros(layout.n_jobs), where=reference > 0)
    t = layout.throughput
    # Σ_m T[m, v]·inv[m] per column: the same products, and a column has at most two (a pair's
    # members), so the sum does not depend on the order of addition.
    weighted = t.data * np.repeat(inv, np.diff(t.indptr))
    return np.bincount(t.indices, weights=weighted, minlength=layout.nv).astype(float)


def solve_max_linear(
    layout: Layout, objective: np.ndarray, extra: ExtraRows | None = None
) -> np.ndarray | None:
    """max objective·x over the base polytope (plus ``extra`` rows); None if infeasible."""
    matrix, lower, upper = base_rows(layout)
    if extra is not None:
        matrix = sp.vstack([matrix, extra.matrix], format="csr")
        lower = np.concatenate([lower, extra.lower])
        upper = np.concatenate([upper, extra.upper])
    model = HighsModel(matrix, lower, upper, objective, np.zeros(layout.nv), np.ones(layout.nv), True)
    return model.solve()


def solve_max_min(
    layout: Layout,
    coeff: np.ndarray,
    reference: np.ndarray,
    extra: ExtraRows | None = None,
    counts: np.ndarray | None = None,
) -> tuple[np.ndarray, float]:
    """max_X min_m coeff_m·τ_m(X) over runnable jobs with coeff_m > 0, then the efficiency phase.

    Returns (x, t*).

    Phase 1 is the epigraph LP max t s.t. coeff_m·τ_m(X) − t ≥ 0. Its optimum pins only the
    bottleneck jobs: the rest may sit anywhere in a face of optima, and a vertex solver can return
    one that leaves GPUs idle. Phase 2 therefore keeps t ≥ (1 − 1e-6)·t* and maximises the total
    normalised throughput Σ_m counts_m·τ_m(X)/reference_m. (Gavel instead took whatever point
    ECOS's interior-point path ended at; water filling (§5.4.3) is the full lexicographic remedy.)
    Warm-started from phase 1's basis, phase 2 is a few simplex pivots.
    """
    idx = np.flatnonzero(layout.runnable() & (coeff > 0))
    if idx.size == 0:
        return np.zeros(layout.nv), 0.0

    def efficiency() -> np.ndarray:
        return efficiency_costs(layout, reference if counts is None else reference / counts)

    # The constraint matrix [base, 0; coeff·throughput[idx], −1; extra, t_coeff] is assembled from
    # triplets in one conversion: block-stacking through scipy cost more than the solve on small LPs.
    if extra is None:
        matrix, lower, upper = _epigraph_model(layout, coeff, idx)
        return _solve_epigraph(layout.nv, matrix, lower, upper, efficiency)[:2]
    base, lower, upper = base_rows(layout)
    epigraph = layout.throughput[idx]
    scaled = epigraph.data * np.repeat(coeff[idx], np.diff(epigraph.indptr))
    nv = layout.nv
    parts = [_triplets(base, 0), (*_triplets(epigraph, base.shape[0])[:2], scaled)]
    rows_so_far = base.shape[0] + idx.size
    t_rows, t_vals = [base.shape[0] + np.arange(idx.size)], [np.full(idx.size, -1.0)]
    lowers, uppers = [lower, np.zeros(idx.size)], [upper, np.full(idx.size, np.inf)]
    if extra is not None:
        parts.append(_triplets(sp.csr_matrix(extra.matrix), rows_so_far))
        if extra.t_coeff is not None:
            t_rows.append(rows_so_far + np.flatnonzero(extra.t_coeff))
            t_vals.append(extra.t_coeff[extra.t_coeff != 0])
        rows_so_far += extra.lower.shape[0]
        lowers.append(extra.lower)
        uppers.append(extra.upper)
    t_rows_all = np.concatenate(t_rows)
    matrix = sp.csc_matrix(
        (
            np.concatenate([p[2] for p in parts] + t_vals),
            (
                np.concatenate([p[0] for p in parts] + [t_rows_all]),
                np.concatenate([p[1] for p in parts] + [np.full(t_rows_all.size, nv)]),
            ),
        ),
        shape=(rows_so_far, nv + 1),
    )
    return _solve_epigraph(nv, matrix, np.concatenate(lowers), np.concatenate(uppers), efficiency)[:2]


def _epigraph_model(
    layout: Layout, coeff: np.ndarray, idx: np.ndarray
) -> tuple[CscArrays, np.ndarray, np.ndarray]:
    """Rows (5.2), (5.3) and coeff_m·τ_m(X) − t ≥ 0 for the jobs ``idx``, straight from the layout's
    arrays: the same matrix the general assembly in :func:`solve_max_min` builds."""
    nv, n, k = layout.nv, layout.n_jobs, layout.k
    share, cap, thr = layout.time_share, layout.capacity, layout.throughput
    share_rows = np.repeat(np.arange(n), np.diff(share.indptr))
    cap_rows = n + np.repeat(np.arange(k), np.diff(cap.indptr))
    # The epigraph row of idx[p] holds that job's throughput entries, scaled by its coefficient.
    counts = np.diff(thr.indptr)[idx]
    starts = np.repeat(thr.indptr[idx], counts)
    within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    entries = starts + within
    epi_rows = n + k + np.repeat(np.arange(idx.size), counts)
    t_rows = n + k + np.arange(idx.size)
    matrix = CscArrays.from_distinct_triplets(
        np.concatenate([share_rows, cap_rows, epi_rows, t_rows]),
        np.concatenate([share.indices, cap.indices, thr.indices[entries], np.full(idx.size, nv)]).astype(
            np.int64
        ),
        np.concatenate(
            [share.data, cap.data, thr.data[entries] * np.repeat(coeff[idx], counts), np.full(idx.size, -1.0)]
        ),
        (n + k + idx.size, nv + 1),
    )
    lower = np.concatenate([np.full(n + k, -np.inf), np.zeros(idx.size)])
    upper = np.concatenate([np.ones(n), layout.num_workers, np.full(idx.size, np.inf)])
    return matrix, lower, upper


def solve_rows_max_min(
    throughputs: np.ndarray,
    scale_factors: np.ndarray,
    num_workers: np.ndarray,
    counts: np.ndarray,
    coeff: np.ndarray,
    reference: np.ndarray,
    keys: np.ndarray | None = None,
    start: ClassBasis | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, ClassBasis | None]:
    """:func:`solve_max_min` on ``build_layout(throughputs, scale_factors, num_workers, counts)`` (single
    rows, no pairs), built straight from the arrays: the same LP entry for entry and the same solves,
    without the layout's sparse maps, whose set-up cost more than the solve on LAS's few dozen class
    rows. Returns the columns' X rows and types and their values (``Layout.row``, ``.col``, x), and,
    when ``keys`` names each row's class, phase 1's optimal basis filed under those names; phase 1 then
    starts from ``start`` (see :class:`ClassBasis`).
    """
    k = throughputs.shape[1]
    row, col, idx, indptr, indices, data, lower, upper, costs = _class_lp(
        np.ascontiguousarray(throughputs, dtype=float),
        np.ascontiguousarray(scale_factors, dtype=float),
        np.ascontiguousarray(num_workers, dtype=float),
        np.ascontiguousarray(counts, dtype=float),
        np.ascontiguousarray(coeff, dtype=float),
        np.ascontiguousarray(reference, dtype=float),
    )
    nv = row.shape[0]
    if idx.size == 0:
        return row, col, np.zeros(nv), None
    matrix = CscArrays(indptr, indices, data, (lower.shape[0], nv + 1))
    initial = None if keys is None or start is None else start.mapped(keys, row, col, idx, k)
    x, _, basis = _solve_epigraph(nv, matrix, lower, upper, lambda: costs, initial, keys is not None)
    carried = None if keys is None or basis is None else ClassBasis.of(keys, row, col, idx, *basis)
    return row, col, x, carried


@compiled
def _class_lp(
    throughputs: np.ndarray,
    sf: np.ndarray,
    workers: np.ndarray,
    counts: np.ndarray,
    coeff: np.ndarray,
    reference: np.ndarray,
) -> tuple[np.ndarray, ...]:
    """The class LP of :func:`solve_rows_max_min` as arrays: the X columns' rows and types, the rows in
    the min, the CSC matrix, the row bounds and phase 2's costs.

    Column v = X[row[v], col[v]] (row-major over the entries a row can use) holds, in row order, its row's
    (5.2) entry, its type's (5.3) entry (its row's count times its scale factor) and, when its row is in
    the min, its epigraph entry (throughput times coefficient); column nv is t, -1 in every epigraph
    row. Phase 2's cost of a column is its throughput over its row's reference per job
    (`efficiency_costs`, one entry per column)."""
    n, k = throughputs.shape
    usable = np.zeros((n, k), dtype=np.bool_)
    nv = 0
    for m in range(n):
        for j in range(k):
            if throughputs[m, j] > 0 and sf[m] <= workers[j]:
                usable[m, j] = True
                nv += 1
    row = np.empty(nv, dtype=np.int64)
    col = np.empty(nv, dtype=np.int64)
    placed = np.zeros(n, dtype=np.bool_)
    v = 0
    for m in range(n):
        for j in range(k):
            if usable[m, j]:
                row[v], col[v] = m, j
                placed[m] = True
                v += 1
    epigraph = np.full(n, -1, dtype=np.int64)
    in_min = 0
    for m in range(n):
        if placed[m] and coeff[m] > 0:
            epigraph[m] = n + k + in_min
            in_min += 1
    idx = np.empty(in_min, dtype=np.int64)
    for m in range(n):
        if epigraph[m] >= 0:
            idx[epigraph[m] - n - k] = m
    indptr = np.empty(nv + 2, dtype=np.int64)
    indptr[0] = 0
    for v in range(nv):
        indptr[v + 1] = indptr[v] + (3 if epigraph[row[v]] >= 0 else 2)
    indptr[nv + 1] = indptr[nv] + in_min
    indices = np.empty(indptr[nv + 1], dtype=np.int64)
    data = np.empty(indptr[nv + 1])
    costs = np.empty(nv)
    for v in range(nv):
        m, j, at = row[v], col[v], indptr[v]
        indices[at], data[at] = m, 1.0
        indices[at + 1], data[at + 1] = n + j, sf[m] * counts[m]
        if epigraph[m] >= 0:
            indices[at + 2], data[at + 2] = epigraph[m], throughputs[m, j] * coeff[m]
        per_job = reference[m] / counts[m]
        costs[v] = throughputs[m, j] * (1.0 / per_job if per_job > 0 else 0.0)
    for p in range(in_min):
        indices[indptr[nv] + p], data[indptr[nv] + p] = n + k + p, -1.0
    lower = np.empty(n + k + in_min)
    upper = np.empty(n + k + in_min)
    for r in range(n + k):
        lower[r] = -np.inf
        upper[r] = 1.0 if r < n else workers[r - n]
    for p in range(in_min):
        lower[n + k + p], upper[n + k + p] = 0.0, np.inf
    return row, col, idx, indptr, indices, data, lower, upper, costs


@dataclass(frozen=True)
class ClassBasis:
    """Phase 1's optimal basis of a class LP (:func:`solve_rows_max_min`), each status filed under what
    its column or row stands for, so that the next reset's LP can start from it.

    Between two resets a few jobs come and go: most classes, and so most of the LP, are unchanged, and
    the last optimum is a few dual simplex pivots from the new one, where a cold start from the slack
    basis takes ~73 on the simulator's ~24-class LPs. A column is X[class, type], a row is a class's
    (5.2) row, a type's (5.3) row or a class's epigraph row; classes are matched by their key (the
    caller's row of ``keys``: what makes jobs interchangeable). A new class's columns start at 0 and its
    rows' slacks basic; a class that left takes its statuses with it; then the count of basic variables
    is repaired (:func:`_repair_basis`). Any basis is a valid start: a poor one costs pivots, not the
    optimum. Statuses are HighsBasisStatus values.
    """

    keys: np.ndarray  # (c, d) each class's key, in the LP's row order
    columns: np.ndarray  # (c, k) status of X[class, type]; -1 where it was no column
    time: np.ndarray  # (c,) status of the class's (5.2) row
    capacity: np.ndarray  # (k,) status of each type's (5.3) row
    epigraph: np.ndarray  # (c,) status of the class's epigraph row; -1 where the class was not in the min
    t: int  # status of the epigraph column t

    @classmethod
    def of(
        cls,
        keys: np.ndarray,
        row: np.ndarray,
        col: np.ndarray,
        idx: np.ndarray,
        col_status: np.ndarray,
        row_status: np.ndarray,
    ) -> ClassBasis:
        """File a basis of the LP with X columns (``row``, ``col``) and epigraph rows ``idx``."""
        n = keys.shape[0]
        k = row_status.shape[0] - n - idx.size
        columns = np.full((n, k), -1, dtype=np.int8)
        columns[row, col] = col_status[:-1]
        epigraph = np.full(n, -1, dtype=np.int8)
        epigraph[idx] = row_status[n + k :]
        return cls(keys, columns, row_status[:n], row_status[n : n + k], epigraph, int(col_status[-1]))

    def mapped(
        self, keys: np.ndarray, row: np.ndarray, col: np.ndarray, idx: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """(column, row) statuses for the LP of classes ``keys`` on ``k`` types with X columns (``row``,
        ``col``) and epigraph rows ``idx``; None when the number of types or the key's width differs, or
        no class carries over (a cold start is then as good)."""
        if k != self.capacity.shape[0] or keys.shape[1] != self.keys.shape[1]:
            return None
        known = {key.tobytes(): i for i, key in enumerate(self.keys)}
        old = np.fromiter((known.get(key.tobytes(), -1) for key in keys), np.int64, keys.shape[0])
        had = old >= 0
        if not had.any():
            return None
        columns = np.where(had[row], self.columns[old[row], col], -1)
        # A class left without columns (the cluster shrank below its scale factor) has a slack time row.
        placed = np.bincount(row, minlength=keys.shape[0]) > 0
        time = np.where(had & placed, self.time[old], _BASIC)
        epigraph = np.where(had[idx], self.epigraph[old[idx]], -1)
        col_status = np.append(np.where(columns >= 0, columns, _LOWER), self.t).astype(np.int8)
        row_status = np.concatenate([time, self.capacity, np.where(epigraph >= 0, epigraph, _BASIC)])
        return _repair_basis(col_status, row_status.astype(np.int8), keys.shape[0], k)


def _repair_basis(
    col_status: np.ndarray, row_status: np.ndarray, n: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Make the number of basic variables equal the number of rows, as a basis needs. Too few (a class
    that left had more basic variables than rows): the slacks of tight rows become basic, (5.3) rows
    first, since a departure frees its GPUs. Too many (it had fewer): basic X columns move to their lower
    bound, the last first; t keeps its status."""
    excess = int((col_status == _BASIC).sum() + (row_status == _BASIC).sum()) - row_status.shape[0]
    if excess < 0:
        order = np.concatenate([np.arange(n, n + k), np.arange(n), np.arange(n + k, row_status.shape[0])])
        tight = order[row_status[order] != _BASIC][:-excess]
        row_status[tight] = _BASIC
    elif excess > 0:
        basic = np.flatnonzero(col_status[:-1] == _BASIC)
        col_status[basic[::-1][:excess]] = _LOWER
    return col_status, row_status


def _solve_epigraph(
    nv: int,
    matrix: sp.spmatrix | CscArrays,
    lower: np.ndarray,
    upper: np.ndarray,
    efficiency: Callable[[], np.ndarray],
    start: tuple[np.ndarray, np.ndarray] | None = None,
    keep_basis: bool = False,
) -> tuple[np.ndarray, float, tuple[np.ndarray, np.ndarray] | None]:
    """Phase 1 (max t) and the warm-started efficiency phase of :func:`solve_max_min`; ``efficiency``
    gives phase 2's costs on the ``nv`` X columns. Phase 1 starts from the basis ``start`` (column and
    row statuses) when given, and its optimal basis is returned when ``keep_basis``."""
    model = HighsModel(
        matrix,
        lower,
        upper,
        np.concatenate([np.zeros(nv), [1.0]]),
        np.zeros(nv + 1),
        np.concatenate([np.ones(nv), [np.inf]]),
        True,
    )
    if start is not None:
        model.set_basis(*start)
    # From a basis, dual simplex: the last optimum stays dual feasible where the classes did not change.
    first = model.solve(warm=None if start is None else "dual")
    if first is None:
        raise RuntimeError("max-min allocation LP failed; the base polytope always contains X = 0")
    basis = model.basis() if keep_basis else None
    t_star = float(first[nv])
    model.set_col_bounds(np.array([nv]), np.array([(1.0 - OPTIMUM_SLACK) * t_star]), np.array([np.inf]))
    model.set_costs(np.concatenate([efficiency(), [0.0]]))
    second = model.solve(warm="primal")
    model.release()
    x = first[:nv] if second is None else second[:nv]
    return x, t_star, basis


def _triplets(matrix: sp.csr_matrix, row_offset: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, cols, values) of a CSR matrix, its rows shifted by ``row_offset``."""
    rows = row_offset + np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))
    return rows, matrix.indices, matrix.data


def to_allocation(inp: AllocationInput, layout: Layout, x: np.ndarray) -> Allocation:
    """Scatter LP columns back into X (and pair rows), clipped to [0, 1]."""
    values = np.clip(x, 0.0, 1.0)
    fractions = np.zeros((inp.n, inp.k))
    single = layout.row < layout.n_jobs
    fractions[layout.row[single], layout.col[single]] = values[single]
    if inp.pairs is None or layout.n_pairs == 0:
        return Allocation(inp.job_ids, inp.worker_types, fractions)
    pair_fractions = np.zeros((layout.n_pairs, inp.k))
    pair_fractions[layout.row[~single] - layout.n_jobs, layout.col[~single]] = values[~single]
    return Allocation(
        inp.job_ids,
        inp.worker_types,
        fractions,
        pair_members=inp.job_ids[inp.pairs.members],
        pair_fractions=pair_fractions,
    )


def policy_throughputs(
    inp: AllocationInput, aware: bool, space_sharing: bool
) -> tuple[np.ndarray, np.ndarray | None]:
    """The throughputs a policy optimises over: T itself, or the heterogeneity-agnostic view.

    Agnostic (Gavel's baseline): every positive entry of T becomes 1, so the LP sees only
    time shares; pair tuples become `space_sharing.relative_pair_throughputs`, which keeps
    colocation's benefit visible without revealing which type is faster. Pair throughputs are None
    unless the policy space-shares and ``inp`` has candidates.
    """
    t = np.asarray(inp.throughputs, dtype=float)
    pairs = active_pairs(inp, space_sharing)
    if aware:
        return t, None if pairs is None else np.asarray(pairs.throughputs, dtype=float)
    ones = (t > 0).astype(float)
    return ones, None if pairs is None else relative_pair_throughputs(pairs, t)
