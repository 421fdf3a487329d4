"""Gavel's round mechanism: greedy selection, placement and the scheduler's bookkeeping."""

from __future__ import annotations

import numpy as np
from clustertwin.policies.gavel.cluster import ClusterLayout
from clustertwin.policies.gavel.mechanism import place_round, priorities, select_round
from clustertwin.policies.gavel.problem import Allocation, AllocationInput
from clustertwin.policies.gavel.scheduler import GavelScheduler, JobSpec, SchedulerConfig
from hypothesis import given, settings
from hypothesis import strategies as st


@st.composite
def round_instances(draw):
    k = draw(st.integers(1, 3))
    capacity = np.array(draw(st.lists(st.integers(0, 8), min_size=k, max_size=k)))
    n = draw(st.integers(1, 12))
    sf = np.array(draw(st.lists(st.sampled_from([1, 2, 4]), min_size=n, max_size=n)))
    alloc = np.array(
        draw(st.lists(st.lists(st.floats(0, 1), min_size=k, max_size=k), min_size=n, max_size=n))
    )
    received = np.array(
        draw(st.lists(st.lists(st.floats(0, 100), min_size=k, max_size=k), min_size=n, max_size=n))
    )
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=4))
    members = [(m,) for m in range(n)] + [(a, b) for a, b in pairs if a != b and sf[a] == sf[b]]
    extra = len(members) - n
    alloc = np.vstack([alloc, np.full((extra, k), 0.3)])
    received = np.vstack([received, np.zeros((extra, k))])
    sf_c = np.array([sf[m[0]] for m in members])
    return capacity, members, sf_c, alloc, received


@settings(max_examples=200, deadline=None)
@given(round_instances())
def test_selection_respects_capacity_and_runs_each_job_once(instance):
    capacity, members, sf, alloc, received = instance
    prio = priorities(alloc, received, np.full(len(members), 180.0))
    rows, types = select_round(prio, np.zeros_like(alloc), alloc, members, sf, capacity, range(len(capacity)))
    used = np.zeros(len(capacity))
    seen: list[int] = []
    for c, j in zip(rows, types, strict=True):
        assert prio[c, j] > 0
        used[j] += sf[c]
        seen.extend(members[c])
    assert np.all(used <= capacity)
    assert len(seen) == len(set(seen))


def test_unserved_job_outranks_served_ones():
    alloc = np.array([[0.5], [0.5]])
    prio = priorities(alloc, np.array([[0.0], [200.0]]), np.array([400.0, 400.0]))
    assert prio[0, 0] > prio[1, 0] > 0


def _place_fresh(layout: ClusterLayout, sfs: list[int]):
    n = len(sfs)
    return place_round(
        layout, np.zeros(n, dtype=np.int64), np.array(sfs), np.full(n, -1), [()] * n, np.zeros(n, dtype=bool)
    )


@settings(max_examples=200, deadline=None)
@given(
    per_server=st.sampled_from([1, 2, 4, 8]),
    servers=st.integers(1, 4),
    sfs=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=8),
)
def test_placement_is_disjoint_and_consolidates_when_it_can(per_server, servers, sfs):
    layout = ClusterLayout(("v100",), (per_server * servers,), (per_server,))
    fitting, total = [], 0
    for sf in sfs:
        if total + sf <= layout.gpus[0]:
            fitting.append(sf)
            total += sf
    if not fitting:
        return
    gpus, consolidated, renewed = _place_fresh(layout, fitting)
    flat = [g for held in gpus for g in held]
    assert len(flat) == len(set(flat)) == total
    assert all(0 <= g < layout.gpus[0] for g in flat)
    assert [len(held) for held in gpus] == fitting
    assert not renewed.any()
    # Largest-first on an empty cluster: the largest job always gets the fewest servers possible.
    assert consolidated[int(np.argmax(fitting))]


def test_previous_gpus_are_kept_when_the_type_is_the_same():
    layout = ClusterLayout(("v100", "k80"), (8, 4), (4, 4))
    gpus, consolidated, renewed = place_round(
        layout,
        types=np.array([0, 0, 0, 1]),
        scale_factors=np.array([4, 2, 2, 1]),
        last_type=np.array([-1, 0, 0, 0]),
        last_gpus=[(), (6, 7), (0, 1), (3,)],
        last_consolidated=np.array([False, True, True, True]),
    )
    assert gpus[1] == (6, 7) and gpus[2] == (0, 1) and renewed[1] and renewed[2]
    assert not renewed[0] and not set(gpus[0]) & {0, 1, 6, 7} and len(gpus[0]) == 4
    assert not renewed[3] and len(gpus[3]) == 1  # it moved type: a new placement, no renewal


class FixedPolicy:
    """Hands every job the same allocation row: enough to test the mechanism alone."""

    name = "fixed"
    aware = True

    def __init__(self, row: list[float]) -> None:
        self.row = np.array(row)

    def allocate(self, inp: AllocationInput, rng: np.random.Generator) -> Allocation:
        return Allocation(inp.job_ids, inp.worker_types, np.tile(self.row, (inp.n, 1)))


def _spec(job_id: int, sf: int = 1) -> JobSpec:
    return JobSpec(job_id, "t", sf, 1e9, 0.0, np.array([2.0, 1.0]))


def test_rounds_track_the_allocation():
    """Over many rounds each job's time on each type approaches X (§5.5: rounds approximate X)."""
    layout = ClusterLayout(("v100", "k80"), (2, 2), (1, 1))
    # Four jobs, two GPUs of each type: X = 0.5 on each type per job saturates both.
    sched = GavelScheduler(
        layout, FixedPolicy([0.5, 0.5]), np.random.default_rng(0), SchedulerConfig(360, 1e9)
    )
    for m in range(4):
        sched.add_job(_spec(m))
    sched.reset(0.0)
    time_on = np.zeros((4, 2))
    rounds = 200
    for _ in range(rounds):
        plan = sched.next_round()
        used = np.zeros(2)
        for a in plan.assignments():
            used[a.worker_type] += len(a.gpus)
            time_on[a.job_ids[0], a.worker_type] += 360
        assert np.all(used <= layout.num_workers)
        sched.record_round(plan, np.full(len(plan), 360.0), {key[0]: 1.0 for key in plan.job_ids}, 360.0)
    fractions = time_on / (rounds * 360)
    assert np.allclose(fractions, 0.5, atol=0.03)


def test_reset_is_rate_limited_and_triggered_by_arrivals():
    layout = ClusterLayout(("v100", "k80"), (1, 1), (1, 1))
    sched = GavelScheduler(
        layout, FixedPolicy([0.5, 0.5]), np.random.default_rng(0), SchedulerConfig(360, 1920)
    )
    assert not sched.reset_due(0.0)
    sched.add_job(_spec(0))
    assert sched.reset_due(0.0)
    sched.reset(0.0)
    assert not sched.reset_due(100.0)
    sched.add_job(_spec(1))
    assert not sched.reset_due(1000.0) and sched.reset_due(1920.0)
    assert sched.next_reset_s() == 1920.0


def test_lease_renewed_when_the_same_job_keeps_its_gpu():
    layout = ClusterLayout(("v100", "k80"), (1, 1), (1, 1))
    sched = GavelScheduler(
        layout, FixedPolicy([1.0, 0.0]), np.random.default_rng(0), SchedulerConfig(360, 1e9)
    )
    sched.add_job(_spec(0))
    sched.reset(0.0)
    first = sched.next_round()
    assert len(first) == 1 and not first.renewed[0]
    sched.record_round(first, np.array([360.0]), {0: 1.0}, 360.0)
    second = sched.next_round()
    assert second.renewed[0] and second.gpus[0] == first.gpus[0]


def test_a_price_change_resets_once_the_rate_limit_allows_and_a_resize_at_once():
    layout = ClusterLayout(("v100", "k80"), (2, 2), (1, 1))
    sched = GavelScheduler(
        layout, FixedPolicy([0.5, 0.5]), np.random.default_rng(0), SchedulerConfig(360, 1920)
    )
    assert not sched.set_prices(np.array([3.0, 1.0]), 0.0)  # the first prices are not a change
    assert not sched.cluster_reset_due(0.0, resized=True)  # nothing to allocate yet
    sched.add_job(_spec(0))
    sched.reset(0.0)
    assert not sched.set_prices(np.array([3.0, 1.0]), 100.0) and not sched.cluster_reset_due(100.0, False)
    assert sched.set_prices(np.array([2.0, 1.0]), 200.0)
    assert not sched.cluster_reset_due(1000.0, False)  # the rate limit holds the price change back
    assert sched.cluster_reset_due(1000.0, True)  # workers came or went: re-plan at once
    assert sched.cluster_reset_due(1920.0, False)
    sched.reset(1920.0)
    assert not sched.cluster_reset_due(5000.0, False)  # that reset saw the new prices
