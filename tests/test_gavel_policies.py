"""Gavel's LP and greedy allocation policies: worked examples, invariants and independent oracles."""

from __future__ import annotations

from dataclasses import replace

import cvxpy as cp
import numpy as np
import pytest
from clustertwin.policies.gavel import lp
from clustertwin.policies.gavel.cost import MakespanBudget, MinCost, MinCostSLO
from clustertwin.policies.gavel.fifo import FIFO
from clustertwin.policies.gavel.finish_time_fairness import finish_time_ratios
from clustertwin.policies.gavel.isolated import isolated_fractions
from clustertwin.policies.gavel.las import job_classes, las_allocation
from clustertwin.policies.gavel.makespan import Makespan, reference_type_throughputs
from clustertwin.policies.gavel.problem import Allocation, AllocationInput, PairCandidates
from clustertwin.policies.gavel.sjf import ShortestJobFirst
from clustertwin.policies.registry import make_policy
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

TOL = 1e-6
RNG = np.random.default_rng(0)
LP_POLICIES = ["las", "makespan", "ftf", "max_sum_throughput", "min_cost", "min_cost_slo", "makespan_budget"]
ALL_POLICIES = [*LP_POLICIES, "fifo", "sjf"]
HAS_AWARE = {"las", "makespan", "ftf", "fifo", "sjf"}
HAS_SPACE_SHARING = set(ALL_POLICIES) - {"sjf"}


def random_instance(
    seed: int, n: int, k: int, with_pairs: bool = False, distinct: int = 0
) -> AllocationInput:
    """A random instance: T with ~20% zeros, sf in {1,2,4,8} within the largest type, and every
    optional field filled. ``distinct > 0`` draws only that many different (T, sf, w) rows."""
    rng = np.random.default_rng(seed)
    workers = rng.integers(1, 9, size=k)
    sf_choices = np.array([s for s in (1, 2, 4, 8) if s <= workers.max()])
    rows = distinct or n
    t = rng.uniform(0.5, 20.0, (rows, k)) * (rng.random((rows, k)) > 0.2)
    sf = rng.choice(sf_choices, size=rows)
    weights = rng.choice([1.0, 2.0, 5.0], size=rows)
    if distinct:
        pick = rng.integers(0, distinct, size=n)
        t, sf, weights = t[pick], sf[pick], weights[pick]
    elapsed = rng.uniform(0.0, 5e3, n)
    pairs = None
    if with_pairs and n >= 2:
        a, b = np.triu_indices(n, 1)
        keep = rng.random(a.shape[0]) < 0.5
        members = np.column_stack([a[keep], b[keep]])
        shares = rng.uniform(0.3, 0.9, (members.shape[0], k, 2)) * (
            rng.random((members.shape[0], k, 1)) > 0.3
        )
        alone = np.stack([t[members[:, 0]], t[members[:, 1]]], axis=2)
        pairs = PairCandidates(members, shares * alone)
    return AllocationInput(
        job_ids=np.arange(100, 100 + n),
        worker_types=("v100", "p100", "k80")[:k],
        num_workers=workers,
        throughputs=t,
        scale_factors=sf,
        weights=weights,
        remaining_steps=rng.uniform(1e2, 1e5, n),
        arrival_times=-elapsed,
        now=0.0,
        iso_elapsed=elapsed * rng.uniform(0.5, 1.5, n),
        slo_deadlines=np.where(rng.random(n) < 0.5, np.inf, rng.uniform(1e2, 1e5, n)),
        prices=rng.uniform(0.1, 3.0, k),
        budget=float(rng.uniform(1.0, 1e3)),
        pairs=pairs,
    )


def assert_valid(inp: AllocationInput, alloc: Allocation) -> None:
    """Shape, (5.1)–(5.3) with pairs, and no time where a job (or pair) cannot run."""
    x = alloc.fractions
    assert x.shape == (inp.n, inp.k)
    assert np.all((x >= 0) & (x <= 1))
    assert np.all(x[inp.throughputs <= 0] == 0)
    assert np.all(alloc.time_share() <= 1 + TOL)
    used = (x * inp.scale_factors[:, None]).sum(axis=0)
    if alloc.pair_fractions is not None:
        pf = alloc.pair_fractions
        assert inp.pairs is not None and pf.shape == (len(inp.pairs), inp.k)
        assert np.all((pf >= 0) & (pf <= 1))
        assert np.all(pf[(inp.pairs.throughputs <= 0).any(axis=2)] == 0)
        np.testing.assert_array_equal(alloc.pair_members, inp.job_ids[inp.pairs.members])
        used += (pf * inp.scale_factors[inp.pairs.members[:, 0]][:, None]).sum(axis=0)
    assert np.all(used <= inp.num_workers + TOL)


def las_objective(inp: AllocationInput, alloc: Allocation, aware: bool = True) -> tuple[float, float]:
    """(min, sum) over runnable jobs of (sf/w)·τ/τ(X^eq) and τ/τ(X^eq), in the aware or agnostic view."""
    t = inp.throughputs if aware else (inp.throughputs > 0).astype(float)
    view = replace(inp, throughputs=t)
    if inp.pairs is not None and not aware:
        alone = np.stack(
            [inp.throughputs[inp.pairs.members[:, 0]], inp.throughputs[inp.pairs.members[:, 1]]], 2
        )
        rel = np.divide(inp.pairs.throughputs, alone, out=np.zeros(alone.shape), where=alone > 0)
        view = replace(view, pairs=PairCandidates(inp.pairs.members, rel))
    ref = lp.equal_share_throughput(t, inp.num_workers)
    runnable = ((t > 0) & (inp.scale_factors[:, None] <= inp.num_workers[None, :])).any(axis=1)
    if not runnable.any():
        return 0.0, 0.0
    norm = alloc.effective_throughput(view)[runnable] / ref[runnable]
    scale = (inp.scale_factors / inp.weights_or_ones())[runnable]
    return float(np.min(norm * scale)), float(np.sum(norm))


# ---------------------------------------------------------------- LAS (§5.4.1)

WORKED = AllocationInput(
    job_ids=np.arange(3),
    worker_types=("v100", "k80"),
    num_workers=np.array([1, 1]),
    throughputs=np.array([[40.0, 10.0], [12.0, 4.0], [100.0, 50.0]]),
    scale_factors=np.ones(3, dtype=int),
)


@pytest.mark.parametrize("aggregate", [True, False])
def test_las_reproduces_the_worked_example(aggregate: bool) -> None:
    alloc = las_allocation(WORKED, aggregate=aggregate)
    expected = np.array([[0.45, 0.0], [0.45, 0.09], [0.09, 0.91]])
    np.testing.assert_allclose(alloc.fractions, expected, atol=0.01)
    normalised = alloc.effective_throughput(WORKED) / np.array([25.0, 8.0, 75.0])
    np.testing.assert_allclose(normalised, 8 / 11, atol=1e-4)  # every job is a bottleneck at 0.727


def test_aware_las_beats_agnostic_on_a_heterogeneous_cluster() -> None:
    aware, agnostic = las_allocation(WORKED), las_allocation(WORKED, aware=False)
    np.testing.assert_allclose(agnostic.fractions, 1 / 3, atol=1e-6)  # equal time, type-blind
    aware_min, aware_sum = las_objective(WORKED, aware)
    agnostic_min, agnostic_sum = las_objective(WORKED, agnostic)
    assert aware_sum > agnostic_sum + 0.15
    assert aware_min > agnostic_min + 0.05


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 12), k=st.integers(2, 3))
def test_aware_las_min_is_at_least_the_agnostic_allocations(seed: int, n: int, k: int) -> None:
    inp = random_instance(seed, n, k)
    aware_min, _ = las_objective(inp, las_allocation(inp))
    agnostic_min, _ = las_objective(inp, las_allocation(inp, aware=False))
    assert aware_min >= agnostic_min * (1 - 1e-5)  # 1e-5: the efficiency phase may give up 1e-6


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 30), distinct=st.integers(1, 4), k=st.integers(1, 3))
def test_class_aggregation_matches_the_per_job_lp(seed: int, n: int, distinct: int, k: int) -> None:
    inp = random_instance(seed, n, k, distinct=distinct)
    for aware in (True, False):
        merged = las_allocation(inp, aware=aware, aggregate=True)
        per_job = las_allocation(inp, aware=aware, aggregate=False)
        assert_valid(inp, merged)
        m_min, m_sum = las_objective(inp, merged, aware)
        p_min, p_sum = las_objective(inp, per_job, aware)
        assert m_min == pytest.approx(p_min, rel=1e-5, abs=1e-8)
        assert m_sum == pytest.approx(p_sum, rel=1e-5, abs=1e-8)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 30), distinct=st.integers(1, 6), k=st.integers(1, 3))
def test_class_lp_built_from_arrays_is_the_layout_lp_bit_for_bit(
    seed: int, n: int, distinct: int, k: int
) -> None:
    # The simulator's event log depends on the solver's exact vertex: the direct build must pass HiGHS
    # the very LP the layout path passes it, so that both return the same bits.
    inp = random_instance(seed, n, k, distinct=distinct)
    keys = np.column_stack([inp.throughputs, inp.scale_factors, inp.weights])
    unique = np.unique(keys, axis=0, return_index=True, return_inverse=True, return_counts=True)
    classes, first, member_class, counts = job_classes(keys)
    for ours, numpys in zip((classes, first, member_class, counts), unique, strict=True):
        np.testing.assert_array_equal(ours, numpys.reshape(ours.shape))
    t, sf = classes[:, :k], classes[:, k]
    reference = lp.equal_share_throughput(t, inp.num_workers)
    coeff = np.divide(sf / classes[:, k + 1], reference, out=np.zeros(len(classes)), where=reference > 0)
    layout = lp.build_layout(t, sf, inp.num_workers, counts)
    x_layout, _ = lp.solve_max_min(layout, coeff, reference, counts=counts)
    row, col, x, _ = lp.solve_rows_max_min(t, sf, inp.num_workers, counts, coeff, reference)
    np.testing.assert_array_equal(row, layout.row)
    np.testing.assert_array_equal(col, layout.col)
    assert x.tobytes() == x_layout.tobytes()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 8), k=st.integers(1, 3))
def test_space_sharing_never_lowers_the_las_objective(seed: int, n: int, k: int) -> None:
    inp = random_instance(seed, n, k, with_pairs=True)
    alone, _ = las_objective(inp, las_allocation(inp))
    shared_alloc = las_allocation(inp, space_sharing=True)
    shared, _ = las_objective(inp, shared_alloc)
    assert shared >= alone * (1 - 1e-6) - 1e-9


def test_space_sharing_lets_two_jobs_share_one_gpu() -> None:
    # One GPU, two jobs that each keep 80% of their speed when colocated: the pair row should win.
    inp = AllocationInput(
        job_ids=np.array([7, 9]),
        worker_types=("v100",),
        num_workers=np.array([1]),
        throughputs=np.array([[10.0], [4.0]]),
        scale_factors=np.array([1, 1]),
        pairs=PairCandidates(np.array([[0, 1]]), np.array([[[8.0, 3.2]]])),
    )
    alloc = las_allocation(inp, space_sharing=True)
    assert_valid(inp, alloc)
    np.testing.assert_array_equal(alloc.pair_members, [[7, 9]])
    assert alloc.pair_fractions[0, 0] == pytest.approx(1.0, abs=1e-6)
    np.testing.assert_allclose(alloc.effective_throughput(inp), [8.0, 3.2], rtol=1e-6)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 10))
def test_homogeneous_cluster_aware_equals_agnostic(seed: int, n: int) -> None:
    # §5.4.4: with one type, τ_m(X) = X_m·T_m, so the aware LPs reduce to the agnostic ones.
    inp = random_instance(seed, n, 1)
    inp = replace(inp, throughputs=np.maximum(inp.throughputs, 1.0))
    for policy in ("las", "makespan"):
        aware = make_policy(policy, aware=True).allocate(inp, RNG)
        agnostic = make_policy(policy, aware=False).allocate(inp, RNG)
        if policy == "las":
            for a, b in zip(las_objective(inp, aware), las_objective(inp, agnostic), strict=True):
                assert a == pytest.approx(b, rel=1e-5)
        else:
            assert makespan_of(inp, aware) == pytest.approx(makespan_of(inp, agnostic), rel=1e-5)


# ---------------------------------------------------------------- invariants of every policy


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(0, 10),
    k=st.integers(1, 3),
    with_pairs=st.booleans(),
    policy=st.sampled_from(ALL_POLICIES),
    aware=st.booleans(),
)
def test_every_policy_returns_a_valid_allocation(
    seed: int, n: int, k: int, with_pairs: bool, policy: str, aware: bool
) -> None:
    inp = random_instance(seed, n, k, with_pairs=with_pairs)
    params: dict[str, bool] = {}
    if policy in HAS_AWARE:
        params["aware"] = aware
    if policy in HAS_SPACE_SHARING:
        params["space_sharing"] = with_pairs
    alloc = make_policy(policy, **params).allocate(inp, np.random.default_rng(seed))
    assert_valid(inp, alloc)
    np.testing.assert_array_equal(alloc.job_ids, inp.job_ids)
    if policy in LP_POLICIES and policy != "makespan_budget" and n:
        # Every LP here either maximises throughput outright or has the efficiency phase, so a type
        # some job could still use is never left idle.
        free = inp.num_workers - (alloc.fractions * inp.scale_factors[:, None]).sum(axis=0)
        if alloc.pair_fractions is not None:
            free -= (alloc.pair_fractions * inp.scale_factors[inp.pairs.members[:, 0]][:, None]).sum(axis=0)
        share = alloc.time_share()
        hungry = (share < 1 - 1e-6)[:, None] & (inp.throughputs > 0)
        hungry &= inp.scale_factors[:, None] <= free[None, :] - 1e-6
        assert not hungry.any()


# ---------------------------------------------------------------- makespan (§5.4.2, §6.4.3)


def makespan_of(inp: AllocationInput, alloc: Allocation) -> float:
    tau = alloc.effective_throughput(inp)
    steps = inp.remaining_steps
    return float(np.max(np.divide(steps, tau, out=np.full(inp.n, np.inf), where=tau > 0)))


def bisection_makespan(inp: AllocationInput, budget: float | None = None) -> float:
    """Gavel's method with scipy's linprog: the smallest M whose feasibility LP τ_m ≥ s_m/M (and
    M·cost/3600 ≤ B) has a solution, to a 1e-7 relative gap."""
    n, k = inp.n, inp.k
    t, sf = inp.throughputs, inp.scale_factors
    allowed = ((t > 0) & (sf[:, None] <= inp.num_workers[None, :])).ravel()
    a_share = np.kron(np.eye(n), np.ones(k))
    a_cap = np.kron(sf[None, :], np.eye(k))
    a_tau = -np.kron(np.eye(n), np.ones(k)) * t.ravel()[None, :]
    cost = (inp.prices[None, :] * sf[:, None]).ravel()[None, :] if budget is not None else None

    def feasible(m: float) -> bool:
        a = np.vstack([a_share, a_cap, a_tau] + ([cost] if cost is not None else []))
        b = np.concatenate(
            [np.ones(n), inp.num_workers, -inp.remaining_steps / m]
            + ([[3600 * budget / m]] if cost is not None else [])
        )
        bounds = [(0, 1 if ok else 0) for ok in allowed]
        return linprog(np.zeros(n * k), A_ub=a, b_ub=b, bounds=bounds, method="highs").status == 0

    lo, hi = 1e-3, 1e3
    while not feasible(hi):
        lo, hi = hi, hi * 10
    while hi - lo > 1e-7 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if feasible(mid) else (mid, hi)
    return hi


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 6), k=st.integers(1, 3))
def test_makespan_lp_equals_bisection(seed: int, n: int, k: int) -> None:
    inp = random_instance(seed, n, k)
    inp = replace(inp, remaining_steps=inp.remaining_steps / 100)  # keep M in the bisection's range
    if not ((inp.throughputs > 0) & (inp.scale_factors[:, None] <= inp.num_workers)).any(axis=1).all():
        inp = replace(inp, scale_factors=np.ones(n, dtype=int), throughputs=inp.throughputs + 0.1)
    alloc = Makespan().allocate(inp, RNG)
    assert makespan_of(inp, alloc) == pytest.approx(bisection_makespan(inp), rel=1e-5)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 5), k=st.integers(1, 3))
def test_makespan_budget_lp_equals_bisection_and_respects_the_budget(seed: int, n: int, k: int) -> None:
    inp = random_instance(seed, n, k)
    inp = replace(
        inp,
        scale_factors=np.ones(n, dtype=int),
        throughputs=inp.throughputs + 0.1,
        remaining_steps=inp.remaining_steps / 100,
    )
    unlimited = makespan_of(inp, Makespan().allocate(inp, RNG))
    cheapest = float(
        np.sum(inp.remaining_steps * np.min(inp.prices[None, :] / inp.throughputs, axis=1)) / 3600
    )
    budget = cheapest * 1.5  # enough to finish, too little for the unconstrained makespan (usually)
    inp = replace(inp, budget=budget)
    alloc = MakespanBudget().allocate(inp, RNG)
    m = makespan_of(inp, alloc)
    spend = m / 3600 * float(np.sum(alloc.fractions * inp.prices[None, :]))
    assert spend <= budget * (1 + 1e-5)
    assert m >= unlimited * (1 - 1e-5)
    assert m == pytest.approx(bisection_makespan(inp, budget), rel=1e-5)


def test_makespan_budget_too_small_falls_back_to_min_cost() -> None:
    inp = replace(random_instance(3, 6, 3), budget=1e-9)
    np.testing.assert_allclose(
        MakespanBudget().allocate(inp, RNG).fractions, MinCost().allocate(inp, RNG).fractions, atol=1e-9
    )


def test_agnostic_makespan_sees_only_the_reference_type() -> None:
    t = np.array([[1.0, 10.0, 0.0], [4.0, 0.0, 2.0]])
    # Job 0 runs at its V100 speed wherever it can run; job 1 cannot use a V100 and falls back to
    # its best speed.
    np.testing.assert_array_equal(reference_type_throughputs(t, 1), [[10.0, 10.0, 0.0], [4.0, 0.0, 4.0]])


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 8), k=st.integers(2, 3))
def test_agnostic_makespan_is_never_better_than_aware(seed: int, n: int, k: int) -> None:
    inp = random_instance(seed, n, k)
    aware = makespan_of(inp, Makespan().allocate(inp, RNG))
    # Within the efficiency phase's 1e-6 slack on the optimum.
    assert makespan_of(inp, Makespan(aware=False).allocate(inp, RNG)) >= aware * (1 - 1e-5)


# ---------------------------------------------------------------- finish-time fairness (Themis)


def ftf_inputs(inp: AllocationInput) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    x_iso = isolated_fractions(inp.num_workers, inp.scale_factors)
    tau_iso = (inp.throughputs * x_iso).sum(axis=1)
    elapsed = inp.now - inp.arrival_times
    duration = inp.iso_elapsed + inp.remaining_steps / tau_iso
    return inp.remaining_steps, elapsed, duration, tau_iso


def cvxpy_ftf(inp: AllocationInput) -> float:
    """The convex program as Gavel writes it (inv_pos), solved by Clarabel."""
    steps, elapsed, duration, _ = ftf_inputs(inp)
    x = cp.Variable((inp.n, inp.k), nonneg=True)
    allowed = (inp.throughputs > 0) & (inp.scale_factors[:, None] <= inp.num_workers[None, :])
    tau = cp.sum(cp.multiply(inp.throughputs, x), axis=1)
    rho = cp.multiply(elapsed + cp.multiply(steps, cp.inv_pos(tau)), 1.0 / duration)
    constraints = [
        cp.sum(x, axis=1) <= 1,
        inp.scale_factors @ x <= inp.num_workers,
        cp.multiply(x, (~allowed).astype(float)) == 0,
    ]
    problem = cp.Problem(cp.Minimize(cp.max(rho)), constraints)
    problem.solve(solver=cp.CLARABEL)
    return float(problem.value)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 6), k=st.integers(1, 3))
def test_ftf_bisection_matches_the_convex_oracle(seed: int, n: int, k: int) -> None:
    inp = random_instance(seed, n, k)
    inp = replace(inp, scale_factors=np.ones(n, dtype=int), throughputs=inp.throughputs + 0.1)
    alloc = make_policy("ftf").allocate(inp, RNG)
    steps, elapsed, duration, _ = ftf_inputs(inp)
    ours = float(np.max(finish_time_ratios(alloc.effective_throughput(inp), steps, elapsed, duration)))
    assert ours == pytest.approx(cvxpy_ftf(inp), rel=1e-4)


def test_ftf_gives_the_job_furthest_behind_more_than_an_equal_share() -> None:
    # Two identical jobs, one GPU; job 0 has waited long (t_m large), job 1 just arrived.
    inp = AllocationInput(
        job_ids=np.arange(2),
        worker_types=("v100",),
        num_workers=np.array([1]),
        throughputs=np.array([[1.0], [1.0]]),
        scale_factors=np.ones(2, dtype=int),
        remaining_steps=np.array([100.0, 100.0]),
        arrival_times=np.array([-1000.0, 0.0]),
        iso_elapsed=np.array([200.0, 0.0]),
    )
    alloc = make_policy("ftf").allocate(inp, RNG)
    assert alloc.fractions[0, 0] > 0.6
    steps, elapsed, duration, _ = ftf_inputs(inp)
    rho = finish_time_ratios(alloc.effective_throughput(inp), steps, elapsed, duration)
    assert rho[0] == pytest.approx(rho[1], rel=1e-5)  # the min-max equalises the two ratios


# ---------------------------------------------------------------- cost objectives (§6.4)

# Table 6.1's throughputs relative to K80 for ResNet-50 and A3C, with GCP on-demand $/hour: ResNet-50
# is cheapest per step on a V100, A3C on a K80.
CLOUD = AllocationInput(
    job_ids=np.arange(2),
    worker_types=("v100", "p100", "k80"),
    num_workers=np.array([1, 1, 1]),
    throughputs=np.array([[9.6, 3.7, 1.0], [2.2, 1.2, 1.0]]),
    scale_factors=np.ones(2, dtype=int),
    remaining_steps=np.array([1e4, 1e4]),
    slo_deadlines=np.array([np.inf, 1e4 / 1.5]),
    prices=np.array([2.48, 1.46, 0.45]),
)


def test_min_cost_puts_each_job_on_its_cheapest_type_per_step() -> None:
    np.testing.assert_allclose(MinCost().allocate(CLOUD, RNG).fractions, [[1, 0, 0], [0, 0, 1]], atol=1e-9)
    throughput = make_policy("max_sum_throughput").allocate(CLOUD, RNG)
    np.testing.assert_allclose(throughput.fractions, [[1, 0, 0], [0, 1, 0]], atol=1e-9)


def test_cost_policies_reject_non_positive_prices() -> None:
    with pytest.raises(ValueError, match="positive"):
        MinCost().allocate(replace(CLOUD, prices=np.array([2.48, 0.0, 0.45])), RNG)


def test_min_cost_slo_meets_the_deadline_and_falls_back_when_it_cannot() -> None:
    alloc = MinCostSLO().allocate(CLOUD, RNG)
    assert alloc.effective_throughput(CLOUD)[1] >= 1.5 - 1e-6  # A3C needs 1.5 steps/s: not K80 alone
    assert alloc.fractions[1, 2] < 1.0
    # Two SLOs that each fit alone but not together: both need the V100 ≥ 80% of the time.
    tight = replace(CLOUD, slo_deadlines=np.array([1e4 / 9.0, 1e4 / 2.0]))
    fallback = MinCostSLO().allocate(tight, RNG)
    np.testing.assert_allclose(fallback.fractions, MinCost().allocate(tight, RNG).fractions, atol=1e-9)


# ---------------------------------------------------------------- FIFO and SJF (greedy)

QUEUE = AllocationInput(
    job_ids=np.array([10, 11, 12, 13]),
    worker_types=("v100", "k80"),
    num_workers=np.array([2, 1]),
    throughputs=np.array([[4.0, 1.0], [3.0, 2.0], [5.0, 1.0], [1.0, 1.0]]),
    scale_factors=np.array([1, 2, 1, 1]),
    remaining_steps=np.array([400.0, 10.0, 50.0, 5.0]),
    arrival_times=np.array([0.0, 1.0, 2.0, 3.0]),
)


def test_fifo_aware_places_in_arrival_order_on_the_fastest_free_type() -> None:
    alloc = FIFO().allocate(QUEUE, RNG)
    # Job 10 takes a V100; job 11 (2 GPUs) finds one V100 and one K80 free: it fits nowhere, and
    # strict FIFO stops there although job 12 would fit.
    np.testing.assert_array_equal(alloc.fractions, [[1, 0], [0, 0], [0, 0], [0, 0]])


def test_fifo_agnostic_keeps_previous_placements() -> None:
    inp = replace(QUEUE, scale_factors=np.ones(4, dtype=int))
    previous = Allocation(np.array([12]), inp.worker_types, np.array([[0.0, 1.0]]))
    for seed in range(5):
        alloc = FIFO(aware=False).allocate(replace(inp, previous=previous), np.random.default_rng(seed))
        assert alloc.fractions[2, 1] == 1.0  # job 12 stays on the K80
        np.testing.assert_array_equal(alloc.fractions.sum(axis=1), [1, 1, 1, 0])  # 10, 11 get the V100s


def test_fifo_packed_pairs_a_waiting_job_with_a_good_partner() -> None:
    inp = replace(
        QUEUE,
        scale_factors=np.ones(4, dtype=int),
        num_workers=np.array([1, 1]),
        pairs=PairCandidates(
            np.array([[0, 2], [1, 3]]), np.array([[[3.6, 4.5], [0, 0]], [[0, 0], [1.0, 0.2]]])
        ),
    )
    alloc = FIFO(space_sharing=True).allocate(inp, RNG)
    assert_valid(inp, alloc)
    # 10 → V100, 11 → K80; waiting 12 packs with 10 (3.6/4 + 4.5/5 = 1.8 > 1.5); 13 with 11 only
    # reaches 0.5 + 0.2 = 0.7, so packing stops.
    np.testing.assert_array_equal(alloc.pair_fractions, [[1, 0], [0, 0]])
    np.testing.assert_array_equal(alloc.fractions, [[0, 0], [0, 1], [0, 0], [0, 0]])


def test_sjf_gives_the_shortest_job_its_fastest_type_and_backfills() -> None:
    alloc = ShortestJobFirst().allocate(QUEUE, RNG)
    # Remaining time at best speed: 100, 3.3, 10, 5 → order 11, 13, 12, 10. Job 11 takes both V100s,
    # job 13 the K80; 12 and 10 find no room.
    np.testing.assert_array_equal(alloc.fractions, [[0, 0], [1, 0], [0, 0], [0, 1]])
