"""The round mechanism's block-wise selection and placement agree with the one-at-a-time greedy.

The references below are Algorithm 2's selection and the placement rule written as the plain loops they
are; the mechanism takes the same decisions in vectorised blocks.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pandas as pd
from clustertwin.policies.compiled import interpreted
from clustertwin.policies.gavel import mechanism
from clustertwin.policies.gavel.cluster import ClusterLayout
from clustertwin.policies.gavel.combos import ComboTable
from clustertwin.policies.gavel.mechanism import (
    place_round,
    plan_single_gpu_round,
    priorities,
    select_round,
)
from hypothesis import given, settings
from hypothesis import strategies as st


def reference_select(prio, deficit, allocation, members, scale_factors, capacity, type_order):
    rows, types, busy = [], [], set()
    for j in type_order:
        free = int(capacity[j])
        if free <= 0:
            continue
        candidates = np.flatnonzero(prio[:, j] > 0)
        order = candidates[
            np.lexsort((-allocation[candidates, j], -deficit[candidates, j], -prio[candidates, j]))
        ]
        for c in order.tolist():
            need = int(scale_factors[c])
            if need > free or not busy.isdisjoint(members[c]):
                continue
            busy.update(members[c])
            rows.append(c)
            types.append(j)
            free -= need
            if free == 0:
                break
    return rows, types


def reference_place(layout, types, scale_factors, last_type, last_gpus, last_consolidated):
    renewed = last_type == types
    gpus = [last_gpus[i] if renewed[i] else () for i in range(len(types))]
    consolidated = np.where(renewed, last_consolidated, False)
    for j in sorted(set(types[~renewed].tolist())):
        k = layout.gpus_per_server[j]
        taken = {g for i in np.flatnonzero(renewed & (types == j)).tolist() for g in gpus[i]}
        free = [
            [g for g in range(s, min(s + k, layout.gpus[j])) if g not in taken]
            for s in range(0, layout.gpus[j], k)
        ]
        pending = np.flatnonzero(~renewed & (types == j))
        for i in pending[np.argsort(-scale_factors[pending], kind="stable")].tolist():
            sf = int(scale_factors[i])
            fitting = [s for s in range(len(free)) if len(free[s]) >= sf] if sf <= k else []
            servers = (
                [min(fitting, key=lambda s: len(free[s]))]
                if fitting
                else sorted(range(len(free)), key=lambda s: -len(free[s]))
            )
            chosen: list[int] = []
            for s in servers:
                take = min(sf - len(chosen), len(free[s]))
                chosen.extend(free[s][:take])
                del free[s][:take]
                if len(chosen) == sf:
                    break
            gpus[i] = tuple(chosen)
            consolidated[i] = len({g // k for g in chosen}) == layout.servers_needed(j, sf)
    return gpus, consolidated, renewed


def draw_bookkeeping(draw, n: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Allocation, received time and deficit of n combinations on k types, from few distinct values, so
    that ties in priority and deficit are common."""

    def matrix(values: list[float]) -> np.ndarray:
        row = st.lists(st.sampled_from(values), min_size=k, max_size=k)
        return np.array(draw(st.lists(row, min_size=n, max_size=n)))

    return matrix([0.0, 0.0, 0.25, 0.5, 1.0]), matrix([0.0, 90.0, 180.0]), matrix([0.0, 1.0])


@st.composite
def selections(draw):
    k = draw(st.integers(1, 4))
    n = draw(st.integers(1, 40))
    capacity = np.array(draw(st.lists(st.integers(0, 24), min_size=k, max_size=k)))
    sf = np.array(draw(st.lists(st.sampled_from([1, 1, 2, 4, 8]), min_size=n, max_size=n)))
    alloc, received, deficit = draw_bookkeeping(draw, n, k)
    order = draw(st.permutations(range(k)))
    return capacity, sf, alloc, received, deficit, order


@settings(max_examples=60, deadline=None)
@given(selections())
def test_block_selection_matches_the_greedy_loop(instance):
    capacity, sf, alloc, received, deficit, order = instance
    members = [(m,) for m in range(len(sf))]
    prio = priorities(alloc, received, np.full(len(sf), 180.0))
    rows, types = select_round(prio, deficit, alloc, members, sf, capacity, order)
    want_rows, want_types = reference_select(prio, deficit, alloc, members, sf, capacity, order)
    assert rows.tolist() == want_rows and types.tolist() == want_types


@st.composite
def placements(draw, singles: bool = False):
    per_server = draw(st.lists(st.sampled_from([1, 2, 3, 4, 8]), min_size=1, max_size=3))
    # Some types end on a partly filled server (a count that is not a multiple of the server size).
    gpus = [k * draw(st.integers(1, 5)) - draw(st.integers(0, k - 1)) for k in per_server]
    layout = ClusterLayout(tuple(f"t{j}" for j in range(len(gpus))), tuple(gpus), tuple(per_server))
    free = list(gpus)
    types, sfs, last_type, last_gpus, last_cons = [], [], [], [], []
    owned = [set() for _ in gpus]
    for _ in range(draw(st.integers(1, 20))):
        j = draw(st.integers(0, len(gpus) - 1))
        sf = 1 if singles else draw(st.sampled_from([1, 1, 2, 4, 8]))
        if sf > free[j]:
            continue
        free[j] -= sf
        types.append(j)
        sfs.append(sf)
        # Some jobs held GPUs of this type last round (disjoint from each other's), so they renew.
        spare = [g for g in range(gpus[j]) if g not in owned[j]]
        if draw(st.booleans()) and len(spare) >= sf:
            held = tuple(sorted(draw(st.permutations(spare))[:sf]))
            owned[j].update(held)
            last_type.append(j)
            last_gpus.append(held)
            last_cons.append(draw(st.booleans()))
        else:
            last_type.append(draw(st.sampled_from([-1, (j + 1) % len(gpus)])))
            last_gpus.append(())
            last_cons.append(False)
    arrays = (np.array(types, dtype=np.int64), np.array(sfs, dtype=np.int64), np.array(last_type))
    return layout, *arrays, last_gpus, np.array(last_cons, dtype=bool)


@settings(max_examples=60, deadline=None)
@given(placements())
def test_grouped_placement_matches_one_job_at_a_time(instance):
    check_placement(instance)


@settings(max_examples=60, deadline=None)
@given(placements(singles=True))
def test_single_gpu_placement_of_all_types_at_once_matches_one_job_at_a_time(instance):
    check_placement(instance)


def check_placement(instance):
    layout, types, sfs, last_type, last_gpus, last_cons = instance
    if not len(types):
        return
    # Renewed leases cannot exceed their type: the reference would fail the same way as the mechanism.
    try:
        want = reference_place(layout, types, sfs, last_type, last_gpus, last_cons)
    except (IndexError, ValueError):
        return
    gpus, consolidated, renewed = place_round(layout, types, sfs, last_type, last_gpus, last_cons)
    assert gpus == want[0]
    assert consolidated.tolist() == want[1].tolist()
    assert renewed.tolist() == want[2].tolist()


def test_dropping_jobs_keeps_the_live_rows_in_order_through_compaction():
    table = ComboTable(2, 360.0)
    for m in range(200):
        table.add((m,), 1 + m % 2, np.zeros(2))
    ids = np.arange(200)
    table.reset(
        [(m,) for m in range(200)],
        np.column_stack([ids, -np.ones(200)]),
        1 + ids % 2,
        np.tile([0.5, 0.25], (200, 1)),
    )
    rows = np.arange(0, 200, 3)
    table.record_round(
        rows, rows % 2, [(int(r),) for r in rows], np.ones(len(rows), dtype=bool), rows * 1.0, 60.0
    )
    dropped = [m for m in range(200) if m % 4 != 0]  # enough to compact the table
    for m in dropped:
        table.drop_job(m)
    live = [m for m in range(200) if m % 4 == 0]
    rows_alive = np.flatnonzero(table.alive)
    assert len(table.keys) < 200  # compacted at least once; some dead rows may wait for the next
    assert len(table) == len(live) == len(rows_alive)
    assert [table.keys[r] for r in rows_alive] == [(m,) for m in live]
    assert table.members[rows_alive, 0].tolist() == live
    assert table.scale_factors[rows_alive].tolist() == [1 + m % 2 for m in live]
    assert not table.allocation[~table.alive].any()  # a dead row never runs
    ran = {int(r) for r in rows}
    for row, m in zip(rows_alive.tolist(), live, strict=True):
        assert table.last_gpus[row] == ((m,) if m in ran else ())
        assert table.received[row, m % 2] == 180.0 + (m if m in ran else 0.0)
        assert table.elapsed[row] == 240.0
        assert table.index[(m,)] == row


def test_streamed_rounds_equal_the_rounds_kept_in_memory(tmp_path, monkeypatch):
    from clustertwin.scenarios.load import load_scenario
    from clustertwin.sim.gavel import engine
    from clustertwin.sim.gavel.setup import build

    overrides = ("workload.generate.num_jobs=40", "workload.window=null")
    kept = build(load_scenario(None, overrides)).run()["rounds"]
    monkeypatch.setattr(engine, "STREAM_CHUNK_ROWS", 100)  # several chunks
    simulation = build(load_scenario(None, overrides))
    simulation.stream_rounds(tmp_path / "rounds.parquet")
    assert simulation.run()["rounds"].empty
    streamed = pd.read_parquet(tmp_path / "rounds.parquet")
    pd.testing.assert_frame_equal(streamed, kept)


@st.composite
def single_gpu_tables(draw):
    """A round's combination table of one-GPU jobs, some of which ran last round on GPUs they still hold."""
    per_server = draw(st.lists(st.sampled_from([1, 2, 3, 4, 8]), min_size=1, max_size=3))
    gpus = [k * draw(st.integers(1, 4)) - draw(st.integers(0, k - 1)) for k in per_server]
    layout = ClusterLayout(tuple(f"t{j}" for j in range(len(gpus))), tuple(gpus), tuple(per_server))
    k, n = len(gpus), draw(st.integers(1, 40))
    alloc, received, deficit = draw_bookkeeping(draw, n, k)
    last_type = np.full(n, -1, dtype=np.int64)
    last_gpu = np.full(n, -1, dtype=np.int64)
    holders = draw(st.permutations(range(n)))
    for j in range(k):
        for g in draw(st.permutations(range(gpus[j])))[: draw(st.integers(0, gpus[j]))]:
            if not holders:
                break
            c = holders.pop()
            last_type[c], last_gpu[c] = j, g
    last_consolidated = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    order = draw(st.permutations(range(k)))
    return layout, alloc, received, np.full(n, 180.0), deficit, order, last_type, last_gpu, last_consolidated


@settings(max_examples=80, deadline=None)
@given(single_gpu_tables())
def test_the_one_pass_single_gpu_round_matches_selection_then_placement(table):
    layout, alloc, received, elapsed, deficit, order, last_type, last_gpu, last_consolidated = table
    members = [(m,) for m in range(len(alloc))]
    prio = priorities(alloc, received, elapsed)
    want_rows, want_types = reference_select(
        prio, deficit, alloc, members, np.ones(len(alloc)), np.array(layout.gpus), order
    )
    want_rows = np.array(want_rows, dtype=np.int64)
    held = [(int(g),) if t >= 0 else () for t, g in zip(last_type, last_gpu, strict=True)]
    want = reference_place(
        layout,
        np.array(want_types, dtype=np.int64),
        np.ones(len(want_rows), dtype=np.int64),
        last_type[want_rows],
        [held[r] for r in want_rows.tolist()],
        last_consolidated[want_rows],
    )
    rows, types, gpu, consolidated, renewed = plan_single_gpu_round(
        alloc, received, elapsed, deficit, layout, order, last_type, last_gpu, last_consolidated
    )
    assert rows.tolist() == want_rows.tolist() and types.tolist() == want_types
    assert [(g,) for g in gpu.tolist()] == want[0]
    assert consolidated.tolist() == want[1].tolist()
    assert renewed.tolist() == want[2].tolist()


def test_priorities_rank_a_job_behind_its_share_first_and_an_unserved_one_above_all():
    alloc = np.array([[0.5], [0.5], [0.5], [0.0]])
    received = np.array([[100.0], [300.0], [0.0], [0.0]])
    prio = priorities(alloc, received, np.full(4, 400.0))
    assert prio[2, 0] > prio[0, 0] > prio[1, 0] > prio[3, 0] == 0.0
    assert prio[0, 0] == 0.5 / (100.0 / 400.0)


def test_placements_recorded_as_one_gpu_each_read_back_as_tuples_after_arrivals_and_departures():
    table = ComboTable(2, 360.0)
    for m in range(6):
        table.add((m,), 1, np.zeros(2))
    ids = np.arange(6)
    table.reset(
        [(m,) for m in range(6)], np.column_stack([ids, -np.ones(6)]), np.ones(6), np.full((6, 2), 0.5)
    )
    rows, types, gpu = np.array([0, 2, 5]), np.array([1, 0, 1]), np.array([3, 0, 1])
    table.record_round(rows, types, [(3,), (0,), (1,)], np.ones(3, dtype=bool), np.full(3, 60.0), 60.0, gpu)
    table.add((6,), 1, np.zeros(2))
    table.drop_job(2)
    held = table.last_gpus
    assert len(held) == 7
    assert held == [(3,), (), (), (), (), (1,), ()]
    # A later round recorded as tuples starts from the same placements.
    table.record_round(np.array([1]), np.array([0]), [(4, 5)], np.ones(1, dtype=bool), np.full(1, 60.0), 60.0)
    assert table.last_gpus[1] == (4, 5) and table.last_gpu[1] == 4 and table.last_type.tolist()[:2] == [-1, 0]


@settings(max_examples=40, deadline=None)
@given(single_gpu_tables())
def test_the_compiled_round_plan_gives_the_bits_of_its_plain_python_form(table):
    layout, alloc, received, elapsed, deficit, order, last_type, last_gpu, last_consolidated = table
    args = (alloc, received, elapsed, deficit, layout, order, last_type, last_gpu, last_consolidated)
    fast = plan_single_gpu_round(*args)
    with mock.patch.object(
        mechanism, "_plan_single_gpu_round", interpreted(mechanism._plan_single_gpu_round)
    ):
        plain = plan_single_gpu_round(*args)
    for a, b in zip(fast, plain, strict=True):
        assert np.array_equal(a, b)
    assert np.array_equal(
        priorities(alloc, received, elapsed), interpreted(priorities)(alloc, received, elapsed)
    )
