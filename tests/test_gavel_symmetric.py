"""The heterogeneity-agnostic LPs return their symmetric optimum: no type is preferred."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from clustertwin.policies.gavel.problem import AllocationInput
from clustertwin.policies.gavel.symmetric import eligible_types, symmetric_split
from clustertwin.policies.registry import make_policy
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_gavel_policies import assert_valid, las_objective, random_instance

RNG = np.random.default_rng(0)
AGNOSTIC = ["las", "ftf", "makespan", "las_water_filling"]


def identical_types(seed: int, n: int, k: int, per_type: int) -> AllocationInput:
    """Every type the same size, every job's throughput the same on every type (and positive)."""
    inp = random_instance(seed, n, k)
    rng = np.random.default_rng(seed + 1)
    row = rng.uniform(0.5, 20.0, n)
    sf = np.minimum(inp.scale_factors, per_type)
    return replace(
        inp,
        num_workers=np.full(k, per_type),
        throughputs=np.repeat(row[:, None], k, axis=1),
        scale_factors=sf,
    )


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 25),
    k=st.integers(2, 3),
    per_type=st.integers(1, 8),
    policy=st.sampled_from(AGNOSTIC),
)
def test_identical_types_get_the_same_agnostic_allocation(
    seed: int, n: int, k: int, per_type: int, policy: str
) -> None:
    inp = identical_types(seed, n, k, per_type)
    alloc = make_policy(policy, aware=False).allocate(inp, RNG)
    assert_valid(inp, alloc)
    x = alloc.fractions
    np.testing.assert_allclose(x, np.repeat(x[:, :1], k, axis=1), atol=1e-9)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 25), k=st.integers(2, 3), per_type=st.integers(1, 8))
def test_agnostic_las_ignores_speeds_and_spreads_over_equal_types(
    seed: int, n: int, k: int, per_type: int
) -> None:
    # Types of equal size that differ only in speed look alike to the agnostic policy: each job that can
    # use every type gets the same time on each.
    inp = random_instance(seed, n, k)
    inp = replace(
        inp,
        num_workers=np.full(k, per_type),
        throughputs=np.maximum(inp.throughputs, 0.1),
        scale_factors=np.minimum(inp.scale_factors, per_type),
    )
    x = make_policy("las", aware=False).allocate(inp, RNG).fractions
    np.testing.assert_allclose(x, np.repeat(x[:, :1], k, axis=1), atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 15),
    k=st.integers(2, 3),
    policy=st.sampled_from(AGNOSTIC),
)
def test_the_symmetric_allocation_is_still_an_optimum(seed: int, n: int, k: int, policy: str) -> None:
    # Arbitrary sizes and eligibility (zeros in T, jobs too large for a type): the symmetric split keeps
    # every job's total time, so the agnostic objective is the vertex solution's, and stays feasible.
    inp = random_instance(seed, n, k)
    vertex = make_policy(policy, aware=False).allocate(inp, RNG)
    eligible = eligible_types(inp.throughputs, inp.scale_factors, inp.num_workers)
    split = symmetric_split(vertex.fractions, eligible, inp.scale_factors, inp.num_workers)
    np.testing.assert_allclose(split.sum(axis=1), vertex.fractions.sum(axis=1), atol=1e-7)
    assert_valid(inp, replace(vertex, fractions=split))
    # The policy itself returns a symmetric optimum: its agnostic objective is unchanged by re-splitting.
    if policy == "las":
        assert las_objective(inp, vertex, aware=False)[0] == pytest.approx(
            las_objective(inp, replace(vertex, fractions=split), aware=False)[0], rel=1e-6, abs=1e-9
        )


def test_proportional_to_type_sizes_when_everything_fits() -> None:
    x = np.array([[1.0, 0.0], [0.0, 0.5]])
    split = symmetric_split(x, np.ones((2, 2), bool), np.array([1, 1]), np.array([3, 1]))
    np.testing.assert_allclose(split, [[0.75, 0.25], [0.375, 0.125]])


def test_falls_back_to_the_closest_split_when_a_type_would_overfill() -> None:
    # Job 0 can only use type 0; job 1 both. Proportional would put 0.5 of job 1 on type 0 (full).
    x = np.array([[1.0, 0.0], [0.0, 1.0]])
    eligible = np.array([[True, False], [True, True]])
    split = symmetric_split(x, eligible, np.array([1, 1]), np.array([1, 1]))
    np.testing.assert_allclose(split, x, atol=1e-9)
