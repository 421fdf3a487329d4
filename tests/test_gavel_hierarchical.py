"""Water filling, hierarchical policies and Pareto-efficient LAS ([Narayanan], §5.4.3, §5.4.4)."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
from clustertwin.policies.gavel.problem import Allocation, AllocationInput, PairCandidates
from clustertwin.policies.gavel.water_filling import (
    EntityWeights,
    HierarchicalPolicy,
    LasWaterFillingPolicy,
    WaterFilling,
)
from clustertwin.policies.registry import make_policy

RNG = np.random.default_rng(0)


def _identical_four(entities: np.ndarray, entity_weights: dict[int, float]) -> AllocationInput:
    return AllocationInput(
        job_ids=np.arange(10, 14),
        worker_types=("v100",),
        num_workers=np.array([4]),
        throughputs=np.full((4, 1), 2.5),
        scale_factors=np.ones(4, dtype=int),
        weights=np.array([3.0, 1.0, 1.0, 1.0]),
        entities=entities,
        entity_weights=entity_weights,
    )


@pytest.mark.parametrize(
    "entities, entity_weights",
    [
        (np.zeros(4, dtype=int), {0: 1.0}),  # one entity, fairness splits it 3:1:1:1
        (np.arange(4), {0: 3.0, 1: 1.0, 2: 1.0, 3: 1.0}),  # each job its own entity
    ],
)
def test_dissertation_example_two_iterations(entities: np.ndarray, entity_weights: dict[int, float]) -> None:
    inp = _identical_four(entities, entity_weights)
    assert inp.entities is not None and inp.weights is not None
    problem = WaterFilling(inp)
    history = problem.solve(EntityWeights(inp.entities, inp.entity_weights, inp.weights, "fairness"))

    assert len(history) == 2
    first, second = history
    np.testing.assert_allclose(first.levels, [1.0, 1 / 3, 1 / 3, 1 / 3], atol=1e-6)
    assert first.frozen.tolist() == [True, False, False, False]
    assert second.weights[0] == 0.0 and np.allclose(second.weights[1:], second.weights[1])
    np.testing.assert_allclose(second.levels, 1.0, atol=1e-6)
    np.testing.assert_allclose(second.fractions[:, 0], 1.0, atol=1e-6)
    assert second.frozen.all()
    np.testing.assert_allclose(problem.allocation(history).fractions, second.fractions)


def test_las_water_filling_reproduces_the_example() -> None:
    inp = _identical_four(np.zeros(4, dtype=int), {})
    allocation = make_policy("las_water_filling").allocate(inp, RNG)
    np.testing.assert_allclose(allocation.fractions[:, 0], 1.0, atol=1e-6)


def _random_input(seed: int, n: int = 7, k: int = 3, with_entities: bool = True) -> AllocationInput:
    rng = np.random.default_rng(seed)
    tput = rng.uniform(0.5, 10.0, size=(n, k)) * (rng.random((n, k)) > 0.15)
    tput[:, 0] = np.maximum(tput[:, 0], 1.0)  # every job runs somewhere
    return AllocationInput(
        job_ids=np.arange(n) + 100,
        worker_types=tuple(f"t{j}" for j in range(k)),
        num_workers=rng.integers(1, 4, size=k),
        throughputs=tput,
        scale_factors=rng.choice([1, 1, 2], size=n),
        weights=rng.choice([1.0, 2.0, 5.0], size=n),
        arrival_times=rng.permutation(n).astype(float),
        entities=rng.integers(0, 3, size=n) if with_entities else None,
        entity_weights={0: 1.0, 1: 2.0, 2: 3.0},
    )


def _assert_feasible(allocation: Allocation, inp: AllocationInput) -> None:
    x = allocation.fractions
    assert (x >= -1e-7).all() and (x <= 1 + 1e-7).all()
    assert (allocation.time_share() <= 1 + 1e-6).all()
    used = inp.scale_factors @ x
    if allocation.pair_fractions is not None and inp.pairs is not None:
        used = used + inp.scale_factors[inp.pairs.members[:, 0]] @ allocation.pair_fractions
    assert (used <= inp.num_workers + 1e-6).all()
    assert (x[inp.throughputs <= 0] <= 1e-7).all()


def _pareto_gap(allocation: Allocation, inp: AllocationInput) -> float:
    """How much total throughput one LP can add while no job drops below its current throughput.

    A job may not use a type with fewer GPUs than its scale factor (it could never be placed there).
    """
    tau = allocation.effective_throughput(inp)
    x = cp.Variable((inp.n, inp.k), nonneg=True)
    new_tau = cp.sum(cp.multiply(inp.throughputs, x), axis=1)
    scale = 1.0 / inp.throughputs.max(axis=1)  # compare in units of each job's best throughput
    fits = inp.scale_factors[:, None] <= inp.num_workers[None, :]
    problem = cp.Problem(
        cp.Maximize(cp.sum(cp.multiply(scale, new_tau))),
        [x <= fits, cp.sum(x, axis=1) <= 1, inp.scale_factors @ x <= inp.num_workers, new_tau >= tau],
    )
    problem.solve(solver=cp.HIGHS)
    return float(problem.value - scale @ tau)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    "policy", [HierarchicalPolicy(), HierarchicalPolicy(inner="fifo"), LasWaterFillingPolicy()]
)
def test_random_instances_are_feasible_and_pareto_efficient(seed: int, policy: object) -> None:
    inp = _random_input(seed)
    allocation = policy.allocate(inp, RNG)  # type: ignore[attr-defined]
    _assert_feasible(allocation, inp)
    assert _pareto_gap(allocation, inp) < 1e-3


def test_entities_share_a_homogeneous_cluster_by_weight() -> None:
    n = 12
    inp = AllocationInput(
        job_ids=np.arange(n),
        worker_types=("v100",),
        num_workers=np.array([6]),
        throughputs=np.linspace(1.0, 3.0, n)[:, None],
        scale_factors=np.ones(n, dtype=int),
        entities=np.repeat([0, 1], n // 2),
        entity_weights={0: 1.0, 1: 2.0},
    )
    x = HierarchicalPolicy().allocate(inp, RNG).fractions[:, 0]
    np.testing.assert_allclose([x[:6].sum(), x[6:].sum()], [2.0, 4.0], atol=1e-5)
    np.testing.assert_allclose(x[:6], 1 / 3, atol=1e-5)  # fairness inside each entity too


def test_fifo_inside_entities_serves_jobs_in_arrival_order() -> None:
    inp = AllocationInput(
        job_ids=np.arange(6),
        worker_types=("v100",),
        num_workers=np.array([4]),
        throughputs=np.ones((6, 1)),
        scale_factors=np.ones(6, dtype=int),
        arrival_times=np.array([5.0, 1.0, 3.0, 2.0, 9.0, 0.0]),
        entities=np.array([0, 0, 0, 1, 1, 1]),
        entity_weights={0: 1.0, 1: 1.0},
    )
    x = HierarchicalPolicy(inner="fifo").allocate(inp, RNG).fractions[:, 0]
    # Entity 0 serves jobs 1 then 2 (arrivals 1, 3); entity 1 serves 5 then 3 (arrivals 0, 2).
    np.testing.assert_allclose(x, [0, 1, 1, 1, 0, 1], atol=1e-6)


def test_scale_factor_equalises_gpu_shares() -> None:
    inp = AllocationInput(
        job_ids=np.arange(2),
        worker_types=("v100",),
        num_workers=np.array([2]),
        throughputs=np.array([[4.0], [1.0]]),
        scale_factors=np.array([2, 1]),
    )
    x = LasWaterFillingPolicy().allocate(inp, RNG).fractions[:, 0]
    np.testing.assert_allclose(x, [0.5, 1.0], atol=1e-6)  # one GPU's worth each


def test_agnostic_ignores_throughput_magnitudes() -> None:
    inp = _random_input(3)
    other = AllocationInput(**{**inp.__dict__, "throughputs": (inp.throughputs > 0) * 7.0})
    a = HierarchicalPolicy(aware=False).allocate(inp, RNG).fractions
    b = HierarchicalPolicy(aware=False).allocate(other, RNG).fractions
    np.testing.assert_allclose(a, b, atol=1e-7)


def test_job_that_cannot_run_gets_nothing_and_its_entity_weight_moves_on() -> None:
    inp = AllocationInput(
        job_ids=np.arange(3),
        worker_types=("v100",),
        num_workers=np.array([2]),
        throughputs=np.array([[0.0], [1.0], [1.0]]),
        scale_factors=np.ones(3, dtype=int),
        entities=np.array([0, 0, 1]),
        entity_weights={0: 1.0, 1: 1.0},
    )
    x = HierarchicalPolicy().allocate(inp, RNG).fractions[:, 0]
    np.testing.assert_allclose(x, [0.0, 1.0, 1.0], atol=1e-6)


def test_space_sharing_never_lowers_the_fair_level() -> None:
    inp = AllocationInput(
        job_ids=np.arange(4),
        worker_types=("v100", "k80"),
        num_workers=np.array([1, 1]),
        throughputs=np.array([[4.0, 1.0], [3.0, 1.5], [5.0, 1.0], [2.0, 1.8]]),
        scale_factors=np.ones(4, dtype=int),
        pairs=PairCandidates(
            members=np.array([[0, 1], [2, 3], [0, 3]]),
            throughputs=np.array(
                [[[3.0, 2.4], [0.8, 1.2]], [[4.0, 1.6], [0.0, 0.0]], [[3.2, 1.5], [0.9, 1.6]]]
            ),
        ),
    )
    no_pairs = AllocationInput(**{**inp.__dict__, "pairs": None})
    weights = EntityWeights(np.zeros(4, dtype=int), {0: 4.0}, np.ones(4), "fairness")
    with_pairs = WaterFilling(inp).solve(weights)
    alone = WaterFilling(no_pairs).solve(weights)
    assert with_pairs[0].levels.min() > alone[0].levels.min() + 1e-3
    allocation = WaterFilling(inp).allocation(with_pairs)
    _assert_feasible(allocation, inp)
    assert allocation.pair_fractions is not None
    assert (allocation.pair_fractions[1, 1] <= 1e-7).all()  # the pair does not fit on a K80


def test_hierarchical_needs_entities() -> None:
    inp = _random_input(0, with_entities=False)
    with pytest.raises(ValueError, match="entities"):
        HierarchicalPolicy().allocate(inp, RNG)
    with pytest.raises(ValueError, match="inner"):
        make_policy("hierarchical", inner="lottery")
