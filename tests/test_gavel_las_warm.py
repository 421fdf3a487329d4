"""LAS's class LP started from the previous reset's basis: the same optimum as a cold solve, and a carried
basis that does not fit the new LP is mapped safely or ignored."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from clustertwin.policies.gavel import lp
from clustertwin.policies.gavel.las import carried_basis, job_classes, las_allocation
from clustertwin.policies.gavel.problem import Allocation, AllocationInput
from hypothesis import given, settings
from hypothesis import strategies as st

TYPES = ("v100", "p100", "k80")


def job_pool(seed: int, kinds: int, k: int, zeros: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``kinds`` job kinds (T row, with ~20% zeros if ``zeros``; sf; weight): jobs of one kind form one
    LP class."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(0.5, 20.0, (kinds, k)) * (rng.random((kinds, k)) > (0.2 if zeros else -1.0))
    t[:, 0] = np.maximum(t[:, 0], 0.5)  # every kind runs somewhere
    return t, rng.choice([1, 2, 4], size=kinds), rng.choice([1.0, 2.0], size=kinds)


def instance(
    pool: tuple[np.ndarray, np.ndarray, np.ndarray],
    kind_of: np.ndarray,
    workers: tuple[int, ...],
    previous: Allocation | None = None,
    types: tuple[str, ...] = TYPES,
) -> AllocationInput:
    t, sf, w = pool
    return AllocationInput(
        job_ids=np.arange(len(kind_of)),
        worker_types=types[: t.shape[1]],
        num_workers=np.array(workers),
        throughputs=t[kind_of],
        scale_factors=sf[kind_of],
        weights=w[kind_of],
        previous=previous,
    )


def objectives(inp: AllocationInput, allocation: Allocation, aware: bool = True) -> tuple[float, float]:
    """LAS's two objectives in the policy's view of T: phase 1's t* = min over jobs of
    (sf/w)·τ_m(X)/τ_m(X^eq), and phase 2's total normalised throughput Σ_m τ_m(X)/τ_m(X^eq)."""
    t, _ = lp.policy_throughputs(inp, aware, False)
    reference = lp.equal_share_throughput(t, inp.num_workers)
    normalised = (t * allocation.fractions).sum(axis=1) / reference
    return float(np.min(inp.scale_factors / inp.weights * normalised)), float(normalised.sum())


def assert_same_optimum(
    inp: AllocationInput, warm: Allocation, cold: Allocation, aware: bool = True, vertex: bool = True
) -> None:
    """Both phases' optimal values agree; with ``vertex``, so does X (where the optimum is unique)."""
    for ours, theirs in zip(objectives(inp, warm, aware), objectives(inp, cold, aware), strict=True):
        assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-12)
    if vertex:
        np.testing.assert_allclose(warm.fractions, cold.fractions, rtol=0, atol=1e-9)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    kinds=st.integers(1, 8),
    k=st.integers(1, 3),
    steps=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=2, max_size=8),
    aware=st.booleans(),
    zeros=st.booleans(),
)
def test_warm_started_las_equals_the_cold_solve_as_jobs_come_and_go(
    seed: int, kinds: int, k: int, steps: list[tuple[int, int]], aware: bool, zeros: bool
) -> None:
    # The optimum's values are unique; X is where phase 2's costs per GPU, (thr/reference)/sf, tie
    # nowhere: aware, on 2+ types, every kind running everywhere (random rows are then never
    # proportional). Elsewhere phase 2 may end at either of two tied vertices, from a cold start too.
    generic = aware and k >= 2 and not zeros
    pool = job_pool(seed, kinds, k, zeros)
    rng = np.random.default_rng(seed)
    workers = tuple(int(n) for n in rng.integers(4, 9, size=k))
    active = rng.integers(0, kinds, size=3)
    previous = None
    for leave, arrive in steps:
        # Departures from the front, arrivals of random kinds: classes shrink, vanish, grow and appear.
        active = np.concatenate([active[leave:], rng.integers(0, kinds, size=arrive)])
        if active.size == 0:
            continue
        inp = instance(pool, active, workers, previous)
        cold = las_allocation(inp, aware=aware)
        warm = las_allocation(inp, aware=aware, warm_start=True)
        assert_same_optimum(inp, warm, cold, aware, vertex=generic)
        assert cold.solver_state is None and warm.solver_state is not None
        start = carried_basis(inp, aware)
        if start is not None:
            assert_basis_fits(inp, start, aware)
        previous = warm


def assert_basis_fits(inp: AllocationInput, start: lp.ClassBasis, aware: bool) -> None:
    """The mapped start has one basic variable per row of the new LP, and a status for every column."""
    t, _ = lp.policy_throughputs(inp, aware, False)
    sf = inp.scale_factors.astype(float)
    classes, _, _, _ = job_classes(np.column_stack([t, sf, inp.weights]))
    row, col = np.nonzero((classes[:, : inp.k] > 0) & (classes[:, inp.k, None] <= inp.num_workers[None, :]))
    idx = np.unique(row)  # every class is in the min here (positive weights and references)
    mapped = start.mapped(classes, row, col, idx, inp.k)
    if mapped is None:
        return
    col_status, row_status = mapped
    assert col_status.shape == (row.size + 1,)
    assert row_status.shape == (len(classes) + inp.k + idx.size,)
    assert (col_status == lp._BASIC).sum() + (row_status == lp._BASIC).sum() == row_status.size


def warm_pair(
    before: AllocationInput, after: AllocationInput, aware: bool = True
) -> tuple[Allocation, Allocation, Allocation]:
    """(the allocation ``before``, ``after`` warm-started from it, ``after`` cold)."""
    first = las_allocation(before, aware=aware, warm_start=True)
    warm = las_allocation(replace(after, previous=first), aware=aware, warm_start=True)
    return first, warm, las_allocation(after, aware=aware)


POOL = job_pool(7, 6, 3, zeros=False)  # X is unique (see above)


def test_a_vanished_class_and_a_new_one_are_mapped() -> None:
    before = instance(POOL, np.array([0, 0, 1, 2, 3]), (4, 4, 4))
    after = instance(POOL, np.array([0, 1, 1, 3, 4, 5]), (4, 4, 4))  # class 2 left, 4 and 5 arrived
    _, warm, cold = warm_pair(before, after)
    assert carried_basis(replace(after, previous=warm), True) is not None
    assert_same_optimum(after, warm, cold)


def test_a_basis_of_entirely_different_classes_is_a_cold_start() -> None:
    before = instance(POOL, np.array([0, 1, 1]), (4, 4, 4))
    after = instance(POOL, np.array([2, 3, 4, 5]), (4, 4, 4))
    _, warm, cold = warm_pair(before, after)
    assert warm.fractions.tobytes() == cold.fractions.tobytes()


def test_a_changed_cluster_size_is_mapped() -> None:
    # Types shrink and grow (a 4-GPU class loses its columns on a 2-GPU type): same classes, new LP.
    before = instance(POOL, np.array([0, 1, 2, 3, 4, 5, 5]), (8, 8, 8))
    for workers in ((2, 8, 8), (8, 3, 12), (1, 1, 1)):
        after = instance(POOL, np.array([0, 1, 2, 3, 4, 5, 5]), workers)
        _, warm, cold = warm_pair(before, after)
        assert_same_optimum(after, warm, cold)


def test_a_basis_over_other_types_or_the_other_view_is_ignored() -> None:
    before = instance(POOL, np.array([0, 1, 2]), (4, 4, 4))
    first = las_allocation(before, warm_start=True)
    renamed = instance(POOL, np.array([0, 1, 2]), (4, 4, 4), first, ("a100", "p100", "k80"))
    assert carried_basis(renamed, True) is None
    assert carried_basis(replace(before, previous=first), False) is None  # agnostic reads no aware basis
    fewer = AllocationInput(
        job_ids=before.job_ids,
        worker_types=TYPES[:2],
        num_workers=np.array([4, 4]),
        throughputs=before.throughputs[:, :2],
        scale_factors=before.scale_factors,
        weights=before.weights,
        previous=first,
    )
    assert carried_basis(fewer, True) is None
    warm = las_allocation(fewer, warm_start=True)
    assert warm.fractions.tobytes() == las_allocation(fewer).fractions.tobytes()
    foreign = replace(before, previous=replace(first, solver_state=object()))
    cold = las_allocation(before).fractions
    assert las_allocation(foreign, warm_start=True).fractions.tobytes() == cold.tobytes()


def test_the_basis_count_is_repaired_both_ways() -> None:
    basic, lower, upper = lp._BASIC, lp._LOWER, 2
    # Too few basic variables: tight rows' slacks become basic, (5.3) rows (here rows 2 and 3) first.
    cols = np.array([lower, lower, basic], dtype=np.int8)
    rows = np.array([upper, upper, upper, upper, basic], dtype=np.int8)
    cols, rows = lp._repair_basis(cols, rows, n=2, k=2)
    assert rows.tolist() == [basic, upper, basic, basic, basic]
    # Too many: basic X columns go to their lower bound; t (the last column) stays basic.
    cols = np.array([basic, basic, basic, basic], dtype=np.int8)
    rows = np.array([basic, upper], dtype=np.int8)
    cols, rows = lp._repair_basis(cols, rows, n=1, k=1)
    assert cols[-1] == basic and (cols == basic).sum() + (rows == basic).sum() == rows.size


def test_phase_one_from_the_carried_basis_takes_a_fraction_of_the_pivots(monkeypatch) -> None:
    pivots = {None: 0, "dual": 0}
    solve = lp.HighsModel.solve

    def counted(self: lp.HighsModel, warm: str | None = None) -> np.ndarray | None:
        x = solve(self, warm)
        if warm != "primal":
            pivots[warm] += self._highs.getInfo().simplex_iteration_count
        return x

    monkeypatch.setattr(lp.HighsModel, "solve", counted)
    pool = job_pool(3, 24, 3, zeros=False)
    rng = np.random.default_rng(3)
    active = rng.integers(0, 24, size=60)
    previous = las_allocation(instance(pool, active, (36, 36, 36)), warm_start=True)
    pivots[None] = 0
    cold_pivots = 0
    for _ in range(10):
        active = np.concatenate([active[2:], rng.integers(0, 24, size=2)])
        inp = instance(pool, active, (36, 36, 36), previous)
        previous = las_allocation(inp, warm_start=True)
        before = pivots[None]
        assert_same_optimum(inp, previous, las_allocation(inp))
        cold_pivots += pivots[None] - before
    assert pivots[None] == cold_pivots  # every warm solve started from a basis
    assert pivots["dual"] < cold_pivots / 3
