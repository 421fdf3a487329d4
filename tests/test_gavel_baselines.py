"""Baselines of [Narayanan] §5.7: the isolated 1/n split, Gandiva-style packing and AlloX."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from clustertwin.policies.gavel.allox import AlloXPolicy
from clustertwin.policies.gavel.gandiva import GandivaPolicy, packed_scores
from clustertwin.policies.gavel.isolated import IsolatedPolicy, isolated_fractions
from clustertwin.policies.gavel.problem import Allocation, AllocationInput, PairCandidates
from clustertwin.policies.registry import make_policy

RNG = np.random.default_rng(0)


# --- isolated ---------------------------------------------------------------------------------------


def test_isolated_split_is_rescaled_row_by_row() -> None:
    x = isolated_fractions(np.array([4, 2]), np.array([1, 1, 2]))
    # Raw rows: [4/3, 2/3] (sum 2) for single-GPU jobs, divided by 2; the 2-GPU job's [2/3, 1/3] sums to 1.
    np.testing.assert_allclose(x, [[2 / 3, 1 / 3], [2 / 3, 1 / 3], [2 / 3, 1 / 3]])


def test_isolated_uses_the_whole_cluster_when_jobs_outnumber_gpus() -> None:
    sf = np.array([1, 2, 1, 4, 1])
    x = isolated_fractions(np.array([1, 2]), sf)
    assert x.sum(axis=1).max() <= 1.0
    np.testing.assert_allclose(sf @ x, [1, 2])  # every job's 1/n share of every type, nothing idle


def test_isolated_policy_withholds_types_a_job_cannot_use() -> None:
    inp = AllocationInput(
        job_ids=np.array([7, 8]),
        worker_types=("v100", "k80"),
        num_workers=np.array([2, 2]),
        throughputs=np.array([[3.0, 0.0], [2.0, 1.0]]),
        scale_factors=np.array([1, 1]),
    )
    x = make_policy("isolated").allocate(inp, RNG).fractions
    np.testing.assert_allclose(x, [[0.5, 0.0], [0.5, 0.5]])
    assert IsolatedPolicy.name == "isolated"


# --- gandiva ----------------------------------------------------------------------------------------


def _packing_input(n: int, gpus: int, previous: Allocation | None = None) -> AllocationInput:
    members = np.array(list(itertools.combinations(range(n), 2)))
    shared = np.full((len(members), 1, 2), 0.7)  # every pair: 0.7 + 0.7 = 1.4 of isolated
    return AllocationInput(
        job_ids=np.arange(n) + 50,
        worker_types=("v100",),
        num_workers=np.array([gpus]),
        throughputs=np.ones((n, 1)),
        scale_factors=np.ones(n, dtype=int),
        pairs=PairCandidates(members, shared),
        previous=previous,
    )


def _check_gandiva(allocation: Allocation, inp: AllocationInput) -> int:
    """Feasibility plus the equal split over combinations; returns the number of pairs formed."""
    assert allocation.pair_fractions is not None and inp.pairs is not None
    used_pairs = allocation.pair_fractions.sum(axis=1) > 0
    singles = allocation.fractions.sum(axis=1) > 0
    in_pairs = np.bincount(inp.pairs.members[used_pairs].ravel(), minlength=inp.n)
    assert in_pairs.max(initial=0) <= 1 and not (singles & (in_pairs > 0)).any()
    combos = int(used_pairs.sum() + singles.sum())
    assert combos == int(used_pairs.sum()) + inp.n - 2 * int(used_pairs.sum())  # everyone is served
    share = min(inp.num_workers[0] / combos, 1.0)
    np.testing.assert_allclose(allocation.pair_fractions[used_pairs], share)
    np.testing.assert_allclose(allocation.fractions[singles], share)
    assert (allocation.time_share() <= 1 + 1e-12).all()
    assert inp.scale_factors @ allocation.fractions + allocation.pair_fractions.sum(axis=0) <= inp.num_workers
    return int(used_pairs.sum())


def test_gandiva_does_not_pack_when_everything_fits() -> None:
    inp = _packing_input(4, gpus=4)
    allocation = make_policy("gandiva").allocate(inp, RNG)
    assert _check_gandiva(allocation, inp) == 0
    np.testing.assert_allclose(allocation.fractions, 1.0)


def test_gandiva_packs_at_random_when_overloaded() -> None:
    inp = _packing_input(6, gpus=2)
    formed = [_check_gandiva(GandivaPolicy().allocate(inp, np.random.default_rng(s)), inp) for s in range(10)]
    assert min(formed) >= 1
    first = GandivaPolicy().allocate(inp, np.random.default_rng(3))
    again = GandivaPolicy().allocate(inp, np.random.default_rng(3))
    np.testing.assert_array_equal(first.pair_fractions, again.pair_fractions)


def test_gandiva_keeps_pairs_that_paid_off_and_drops_those_that_did_not() -> None:
    base = _packing_input(6, gpus=2)
    assert base.pairs is not None
    shared = base.pairs.throughputs.copy()
    bad = [i for i, (a, b) in enumerate(base.pairs.members) if (a, b) == (2, 3)][0]
    shared[bad] = 0.3  # 0.3 + 0.3 < 1: packing 2 with 3 slowed both down
    previous = Allocation(
        job_ids=base.job_ids,
        worker_types=base.worker_types,
        fractions=np.zeros((6, 1)),
        pair_members=np.array([[50, 51], [52, 53]]),  # job ids of rows (0, 1) and (2, 3)
        pair_fractions=np.full((2, 1), 0.5),
    )
    inp = AllocationInput(**{**base.__dict__, "pairs": PairCandidates(base.pairs.members, shared)})
    inp = AllocationInput(**{**inp.__dict__, "previous": previous})
    good = [i for i, (a, b) in enumerate(base.pairs.members) if (a, b) == (0, 1)][0]
    kept_good = kept_bad = 0
    for seed in range(20):
        allocation = GandivaPolicy().allocate(inp, np.random.default_rng(seed))
        assert allocation.pair_fractions is not None
        kept_good += allocation.pair_fractions[good, 0] > 0
        kept_bad += allocation.pair_fractions[bad, 0] > 0
    assert kept_good == 20
    assert kept_bad < 10  # only re-drawn by chance


def test_packed_score_sums_types_and_zeroes_pairs_that_do_not_fit() -> None:
    inp = AllocationInput(
        job_ids=np.arange(3),
        worker_types=("v100", "k80"),
        num_workers=np.array([1, 1]),
        throughputs=np.array([[2.0, 1.0], [4.0, 2.0], [1.0, 1.0]]),
        scale_factors=np.ones(3, dtype=int),
        pairs=PairCandidates(
            np.array([[0, 1], [0, 2]]),
            np.array([[[1.0, 2.0], [0.5, 0.5]], [[1.0, 0.5], [0.0, 0.0]]]),
        ),
    )
    np.testing.assert_allclose(packed_scores(inp), [0.5 + 0.5 + 0.5 + 0.25, 0.0])


# --- allox ------------------------------------------------------------------------------------------


def _allox_input(steps: np.ndarray, tput: np.ndarray, workers: np.ndarray, **extra) -> AllocationInput:
    n = steps.shape[0]
    return AllocationInput(
        job_ids=np.arange(n) + 10,
        worker_types=tuple(f"t{j}" for j in range(tput.shape[1])),
        num_workers=workers,
        throughputs=tput,
        scale_factors=np.ones(n, dtype=int),
        remaining_steps=steps,
        arrival_times=extra.pop("arrival_times", np.arange(n, dtype=float)),
        now=100.0,
        **extra,
    )


def _best_first_jobs(steps: np.ndarray, tput: np.ndarray) -> set[tuple[int, int]]:
    """Brute force over job-to-worker maps (one worker per type), SPT order on each: min total JCT."""
    n, k = tput.shape
    best, lead = np.inf, set()
    for workers in itertools.product(range(k), repeat=n):
        total, first = 0.0, set()
        for w in range(k):
            times = sorted((steps[i] / tput[i, w], i) for i in range(n) if workers[i] == w)
            total += sum(t * (len(times) - pos) for pos, (t, _) in enumerate(times))
            if times:
                first.add((times[0][1], w))
        if total < best:
            best, lead = total, first
    return lead


@pytest.mark.parametrize("seed", range(5))
def test_allox_runs_first_the_jobs_of_a_min_total_jct_schedule(seed: int) -> None:
    rng = np.random.default_rng(seed)
    steps = rng.uniform(100, 1000, size=5)
    tput = rng.uniform(0.5, 5.0, size=(5, 2))
    x = AlloXPolicy().allocate(_allox_input(steps, tput, np.array([1, 1])), RNG).fractions
    assert set(zip(*np.nonzero(x), strict=True)) == _best_first_jobs(steps, tput)


def test_allox_keeps_running_jobs_on_their_workers() -> None:
    steps, tput = np.array([900.0, 10.0, 500.0]), np.ones((3, 2))
    previous = Allocation(
        np.array([10, 11, 12]), ("t0", "t1"), np.array([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    )
    x = AlloXPolicy().allocate(_allox_input(steps, tput, np.array([1, 1]), previous=previous), RNG).fractions
    # Job 10 is long but keeps its t0 worker; the one free worker goes to the shortest waiting job.
    np.testing.assert_array_equal(x, [[1, 0], [0, 1], [0, 0]])


def test_allox_alpha_limits_matching_to_the_longest_waiting() -> None:
    steps, tput = np.array([900.0, 500.0, 10.0]), np.ones((3, 1))
    arrivals = np.array([0.0, 5.0, 50.0])  # the shortest job arrived last
    inp = _allox_input(steps, tput, np.array([1]), arrival_times=arrivals)
    np.testing.assert_array_equal(AlloXPolicy(alpha=1.0).allocate(inp, RNG).fractions[:, 0], [0, 0, 1])
    np.testing.assert_array_equal(AlloXPolicy(alpha=0.0).allocate(inp, RNG).fractions[:, 0], [1, 0, 0])


def test_allox_never_places_a_job_where_it_cannot_run() -> None:
    steps, tput = np.array([10.0, 800.0]), np.array([[0.0, 1.0], [1.0, 1.0]])
    x = AlloXPolicy().allocate(_allox_input(steps, tput, np.array([2, 0])), RNG).fractions
    np.testing.assert_array_equal(x, [[0, 0], [1, 0]])


def test_allox_rejects_multi_gpu_jobs() -> None:
    inp = _allox_input(np.array([5.0, 5.0]), np.ones((2, 1)), np.array([4]))
    wide = AllocationInput(**{**inp.__dict__, "scale_factors": np.array([1, 2])})
    with pytest.raises(ValueError, match="single-GPU"):
        AlloXPolicy().allocate(wide, RNG)
