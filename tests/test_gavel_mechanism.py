"""Gavel's round mechanism: greedy selection, placement and the scheduler's bookkeeping."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.gavel.cluster import ClusterLayout
from policies.gavel.mechanism import place, priorities, select_round
from policies.gavel.problem import Allocation, AllocationInput
from policies.gavel.scheduler import GavelScheduler, JobSpec, SchedulerConfig


@st.composite
def round_instances(draw):
    k = draw(st.integers(1, 3))
    capacity = np.array(draw(st.lists(st.integers(0, 8), min_size=k, max_size=k)))
    n = draw(st.integers(1, 12))
    sf = np.array(draw(st.lists(st.sampled_from([1, 2, 4]), min_size=n, max_size=n)))
    alloc = np.array(draw(st.lists(st.lists(st.floats(0, 1), min_size=k, max_size=k), min_size=n, max_size=n)))
    received = np.array(draw(st.lists(st.lists(st.floats(0, 100), min_size=k, max_size=k), min_size=n, max_size=n)))
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
    chosen = select_round(prio, np.zeros_like(alloc), alloc, members, sf, capacity, range(len(capacity)))
    used = np.zeros(len(capacity))
    seen: list[int] = []
    for c, j in chosen:
        assert prio[c, j] > 0
        used[j] += sf[c]
        seen.extend(members[c])
    assert np.all(used <= capacity)
    assert len(seen) == len(set(seen))


def test_unserved_job_outranks_served_ones():
    alloc = np.array([[0.5], [0.5]])
    prio = priorities(alloc, np.array([[0.0], [200.0]]), np.array([400.0, 400.0]))
    assert prio[0, 0] > prio[1, 0] > 0


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
    placements = place(layout, 0, [(sf, None) for sf in fitting])
    gpus = [g for p in placements for g in p.gpus]
    assert len(gpus) == len(set(gpus)) == total
    assert all(0 <= g < layout.gpus[0] for g in gpus)
    for sf, p in zip(fitting, placements, strict=True):
        assert len(p.gpus) == sf
    # Largest-first on an empty cluster: the largest job always gets the fewest servers possible.
    big = int(np.argmax(fitting))
    assert placements[big].consolidated


def test_previous_gpus_are_kept_when_free():
    layout = ClusterLayout(("v100",), (8,), (4,))
    placements = place(layout, 0, [(4, None), (2, (6, 7)), (2, (0, 1))])
    assert placements[1].gpus == (6, 7) and placements[1].renewed
    assert placements[2].gpus == (0, 1) and placements[2].renewed
    assert not placements[0].renewed and len(set(placements[0].gpus) & {0, 1, 6, 7}) == 0


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
    sched = GavelScheduler(layout, FixedPolicy([0.5, 0.5]), np.random.default_rng(0), SchedulerConfig(360, 1e9))
    for m in range(4):
        sched.add_job(_spec(m))
    sched.reset(0.0)
    time_on = np.zeros((4, 2))
    rounds = 200
    for _ in range(rounds):
        assignments = sched.next_round()
        used = np.zeros(2)
        for a in assignments:
            used[a.worker_type] += len(a.gpus)
            time_on[a.job_ids[0], a.worker_type] += 360
        assert np.all(used <= layout.num_workers)
        sched.record_round([(a, 360.0, {a.job_ids[0]: 1.0}) for a in assignments], 360.0)
    fractions = time_on / (rounds * 360)
    assert np.allclose(fractions, 0.5, atol=0.03)


def test_reset_is_rate_limited_and_triggered_by_arrivals():
    layout = ClusterLayout(("v100", "k80"), (1, 1), (1, 1))
    sched = GavelScheduler(layout, FixedPolicy([0.5, 0.5]), np.random.default_rng(0), SchedulerConfig(360, 1920))
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
    sched = GavelScheduler(layout, FixedPolicy([1.0, 0.0]), np.random.default_rng(0), SchedulerConfig(360, 1e9))
    sched.add_job(_spec(0))
    sched.reset(0.0)
    first = sched.next_round()
    assert len(first) == 1 and not first[0].renewed
    sched.record_round([(first[0], 360.0, {0: 1.0})], 360.0)
    second = sched.next_round()
    assert second[0].renewed and second[0].gpus == first[0].gpus
