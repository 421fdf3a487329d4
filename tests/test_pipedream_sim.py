"""Simulation oracles for the schedules (zero communication, t_f = 1, t_b = 2; [Narayanan] ch. 3-4) and a
property test that every schedule respects its dependencies when executed."""

from __future__ import annotations

import math

import pytest
from clustertwin.policies.pipedream.schedules import make_schedule
from clustertwin.sim.pipedream.executor import ScheduleError, simulate
from clustertwin.sim.pipedream.memory import PipelineOutOfMemory
from clustertwin.sim.pipedream.model import ChunkCost, Device, MemoryModel, Network
from hypothesis import given, settings
from hypothesis import strategies as st

TF, TB = 1.0, 2.0


def uniform(schedule, v=1, params=1.0, act=1.0, comm=0.0):
    return [ChunkCost(TF / v, TB / v, params, act, comm, comm) for _ in range(schedule.num_chunks)]


def run(name, p, m, v=1, **kw):
    schedule = make_schedule(name, (1,) * p, m, chunks_per_device=v)
    devices = [Device() for _ in schedule.workers]
    return schedule, simulate(schedule, uniform(schedule, v), devices, Network(), **kw)


@pytest.mark.parametrize("name", ["gpipe", "flush"])
@pytest.mark.parametrize(("p", "m"), [(4, 8), (3, 5), (8, 16), (1, 4)])
def test_gpipe_and_flush_take_m_plus_p_minus_1_slots(name, p, m):
    _, out = run(name, p, m)
    assert out.makespan_s == pytest.approx((m + p - 1) * (TF + TB))


@pytest.mark.parametrize(("p", "v", "m"), [(4, 2, 8), (4, 4, 8), (2, 3, 4), (4, 2, 16)])
def test_interleaved_bubble_shrinks_by_v(p, v, m):
    _, out = run("interleaved", p, m, v)
    assert out.makespan_s == pytest.approx((m + (p - 1) / v) * (TF + TB))


@pytest.mark.parametrize("p", [2, 4, 6])
def test_flush_peak_stashes_are_p_down_to_1_and_gpipe_m(p):
    _, out = run("flush", p, 3 * p)
    assert out.peak_stashes == list(range(p, 0, -1))
    assert out.peak_versions == [1] * p
    _, out = run("gpipe", p, 3 * p)
    assert out.peak_stashes == [3 * p] * p


def test_weight_versions_match_table_7_1():
    p = 4
    _, pipedream = run("1f1b", p, 16)
    assert pipedream.peak_versions == [4, 3, 2, 1]  # stage s stashes p - s versions
    _, tbw = run("2bw", p, 8)
    schedule = make_schedule("2bw", (1,) * p, 4, num_batches=4)
    out = simulate(schedule, uniform(schedule), [Device()] * p, Network())
    assert max(out.peak_versions) == 2
    assert tbw.makespan_s == pytest.approx((8 + p - 1) * (TF + TB))


def test_1f1b_steady_state_has_no_bubble():
    # Asynchronous 1F1B keeps every stage busy between fill and drain: m inputs take (m + p - 1) slots
    # of the slowest stage only at the ends; with m >> p the idle fraction tends to 0 (Table 7.1).
    p, m = 4, 64
    _, out = run("1f1b", p, m)
    idle = 1 - sum(out.busy_s) / (p * out.makespan_s)
    assert idle == pytest.approx((p - 1) / (m + p - 1))


@pytest.mark.parametrize("c", [0.0, 0.5, 1.0])
def test_communication_latency_is_exposed_with_noam_and_hidden_with_more_in_flight(c):
    # Notes §1.3 (derived): strict 1F1B with p = 4, t_f = 1, t_b = 2 and one-way latency c takes
    # 3 + 1.5c per input in steady state with in-flight (4,3,2,1), and 3.0 with (7,5,3,1) for c <= 1.
    p, m = 4, 200
    net = Network(intra_latency=c)
    costs = [ChunkCost(TF, TB, 0, 0, 1, 1)] * p

    def steady(in_flight):
        out = simulate(make_schedule("1f1b", (1,) * p, m, in_flight=in_flight), costs, [Device()] * p, net)
        ends = sorted(row[8] for row in out.rows if row[4] == "B" and row[2] == 0)
        return (ends[150] - ends[50]) / 100

    assert steady(None) == pytest.approx(3 + 1.5 * c)
    assert steady((7, 5, 3, 1)) == pytest.approx(3.0)


def test_heterogeneous_device_slows_the_pipeline():
    schedule = make_schedule("flush", (1,) * 4, 8)
    fast = simulate(schedule, uniform(schedule), [Device()] * 4, Network())
    slow = simulate(schedule, uniform(schedule), [Device(), Device(speed=0.5), Device(), Device()], Network())
    assert slow.makespan_s > fast.makespan_s
    assert slow.busy_s[1] == pytest.approx(2 * fast.busy_s[1])


def test_replicated_stage_all_reduces_and_uses_links():
    schedule = make_schedule("1f1b", (2, 1), 8)
    costs = [ChunkCost(2, 4, 1e6, 0, 1e3, 1e3), ChunkCost(1, 2, 1e6, 0, 1e3, 1e3)]
    net = Network(intra_bandwidth=1e9, inter_bandwidth=1e8)
    devices = [Device(server=0), Device(server=1), Device(server=0)]
    out = simulate(schedule, costs, devices, net)
    kinds = {row[4] for row in out.rows}
    assert {"F", "B", "send_act", "send_grad", "allreduce"} <= kinds
    # Config 2-1 of Fig 2.7: both stages sustain one input per 3 time units in steady state.
    assert out.makespan_s < 8 * 3 + 12


def test_out_of_memory_names_the_device():
    schedule = make_schedule("gpipe", (1, 1), 8)
    devices = [Device(memory_bytes=10.0), Device(memory_bytes=1e9)]
    costs = [ChunkCost(1, 2, 1.0, 2.0, 0, 0)] * 2
    with pytest.raises(PipelineOutOfMemory, match="device 0 out of memory"):
        simulate(schedule, costs, devices, Network(), MemoryModel(gradient_factor=0, optimizer_factor=0))
    # Recomputation keeps only inputs, so the same run fits.
    simulate(schedule, costs, devices, Network(), MemoryModel(0, 0, recompute=True))


def test_per_update_gradient_buffer_lives_from_backward_to_update():
    """``gradient_buffer="per_update"`` (the real runtime's lifetime) against exact byte counts:
    weights 10, stash 3 per microbatch, on two stages with zero communication."""

    def peaks(name, buffer, m=4):
        schedule = make_schedule(name, (1, 1), m, num_batches=2)
        memory = MemoryModel(gradient_factor=1, optimizer_factor=0, gradient_buffer=buffer)
        costs = [ChunkCost(TF, TB, 10.0, 3.0, 0.0, 0.0)] * 2
        return simulate(schedule, costs, [Device(), Device()], Network(), memory).peak_memory

    # PipeDream's last stage runs B then W per input: its buffer exists only from the end of a
    # backward (whose stash is gone: weights 10 + gradient 10) to the update, never next to a stash
    # (a persistent buffer: 10 + 10 + 3). Stage 0: 2 versions + the fresh gradient + the next input's
    # stash (20 + 10 + 3), where a persistent buffer peaks after a forward (20 + 10 + 2 x 3).
    assert peaks("1f1b", "persistent") == [36.0, 23.0]
    assert peaks("1f1b", "per_update") == [33.0, 20.0]
    # Accumulating schedules: a backward's fresh gradient sits next to the buffer until added, e.g.
    # 2BW stage 0: 2 versions 20 + buffer 10 + fresh 10 + one stash 3; GPipe at its second backward:
    # weights 10 + buffer 10 + fresh 10 + the two stashes left 6 (its peak after the last forward,
    # 10 + 4 x 3, holds no buffer at all).
    assert peaks("2bw", "per_update") == [43.0, 40.0]
    assert peaks("gpipe", "per_update") == [36.0, 36.0]
    assert peaks("gpipe", "persistent") == [32.0, 32.0]


def test_a_backward_before_its_forward_is_rejected():
    from dataclasses import replace

    from clustertwin.policies.pipedream.ops import Op

    schedule = make_schedule("flush", (1,), 2)
    bad = replace(schedule.workers[0], ops=(Op("B", 0, 0, 0), *schedule.workers[0].ops))
    with pytest.raises(ScheduleError, match="before its forward"):
        simulate(replace(schedule, workers=(bad,)), uniform(schedule), [Device()], Network())


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(["gpipe", "flush", "1f1b", "2bw", "interleaved"]),
    p=st.integers(1, 5),
    mult=st.integers(1, 4),
    v=st.integers(1, 3),
    batches=st.integers(1, 2),
    comm=st.floats(0.0, 2.0),
    fwd=st.lists(st.floats(0.1, 3.0), min_size=15, max_size=15),
)
def test_every_schedule_respects_dependencies(name, p, mult, v, batches, comm, fwd):
    m = p * mult
    v = v if name == "interleaved" else 1
    schedule = make_schedule(name, (1,) * p, m, num_batches=batches, chunks_per_device=v)
    costs = [ChunkCost(fwd[c % 15], 2 * fwd[c % 15], 1, 1, 1, 1) for c in range(schedule.num_chunks)]
    out = simulate(schedule, costs, [Device() for _ in schedule.workers], Network(intra_latency=comm))
    done = {}
    for device, _w, chunk, _r, kind, k, version, start, end, _b in out.rows:
        if kind in ("F", "B"):
            done[(kind, k, chunk)] = (start, end, version, device)
    last = schedule.num_chunks - 1
    total = schedule.num_microbatches

    def gap(a, b):  # a transfer between devices pays the latency; on one device it is free
        return comm if a != b else 0.0

    for k in range(total):
        for c in range(schedule.num_chunks):
            f_start, f_end, f_ver, f_dev = done[("F", k, c)]
            b_start, b_end, b_ver, b_dev = done[("B", k, c)]
            assert b_ver == f_ver  # weight stashing: the backward uses the forward's version
            assert b_start >= f_end - 1e-9
            if c > 0:
                prev = done[("F", k, c - 1)]
                assert f_start >= prev[1] + gap(prev[3], f_dev) - 1e-9
            if c < last:
                nxt = done[("B", k, c + 1)]
                assert b_start >= nxt[1] + gap(nxt[3], b_dev) - 1e-9
    assert math.isfinite(out.makespan_s)


@pytest.mark.parametrize(("v", "stage_equivalents"), [(2, 5.5), (4, 4.75)])
def test_interleaved_first_device_stashes_p_plus_p_minus_1_over_v(v, stage_equivalents):
    # Notes §2 (derived): device 0 holds p + (p-1)/v stages' worth of activations at p = 4, "comparable
    # memory" to 1F1B's p; each chunk stash is 1/v of a stage.
    _, out = run("interleaved", 4, 8, v)
    assert out.peak_stashes[0] / v == pytest.approx(stage_equivalents)


@settings(max_examples=25, deadline=None)
@given(
    replicas=st.lists(st.integers(1, 3), min_size=1, max_size=4),
    rounds=st.integers(1, 3),
    extra=st.lists(st.integers(0, 3), min_size=4, max_size=4),
    latency=st.floats(0.0, 1.0),
)
def test_1f1b_rr_with_any_replicas_and_in_flight_completes_in_order(replicas, rounds, extra, latency):
    replicas = tuple(replicas)
    m = math.lcm(*replicas) * rounds
    base = make_schedule("1f1b", replicas, m).workers  # default in-flight, then a random increase
    in_flight = tuple(-(-sum(replicas[s:]) // replicas[s]) + extra[s] for s in range(len(replicas)))
    try:
        schedule = make_schedule("1f1b", replicas, m, in_flight=in_flight)
    except ValueError as err:
        # Only caps above the defaults can deadlock (a stage admitting more than upstream sends).
        assert "deadlocks" in str(err) and any(extra)
        return
    assert len(schedule.workers) == len(base) == sum(replicas)
    devices = [Device(server=i % 2) for i in range(len(schedule.workers))]
    costs = [ChunkCost(1.0, 2.0, 10.0, 1.0, 1.0, 1.0) for _ in replicas]
    out = simulate(schedule, costs, devices, Network(10.0, latency, 5.0, latency))
    backward = sorted((row[2], row[5]) for row in out.rows if row[4] == "B")
    assert backward == sorted((s, k) for s in range(len(replicas)) for k in range(m))
    # A stage replica never holds more inputs than its in-flight cap, nor more versions than that.
    for wi, worker in enumerate(schedule.workers):
        cap = in_flight[worker.chunks[0]]
        assert out.peak_stashes[wi] <= cap and out.peak_versions[wi] <= cap


def test_inconsistent_op_orders_deadlock_with_a_clear_error():
    from dataclasses import replace

    from clustertwin.policies.pipedream.ops import Op

    # Stage 1 insists on microbatch 1 first, but stage 0 sends it only after microbatch 0's backward.
    schedule = make_schedule("flush", (1, 1), 2)
    s0 = (Op("F", 0, 0, 0), Op("B", 0, 0, 0), Op("F", 1, 0, 0), Op("B", 1, 0, 0), Op("W", 1, 0, 1))
    s1 = (Op("F", 1, 1, 0), Op("B", 1, 1, 0), Op("F", 0, 1, 0), Op("B", 0, 1, 0), Op("W", 1, 1, 1))
    workers = (replace(schedule.workers[0], ops=s0), replace(schedule.workers[1], ops=s1))
    bad = replace(schedule, workers=workers)
    with pytest.raises(ScheduleError, match="deadlocked"):
        simulate(bad, uniform(schedule), [Device(), Device()], Network())
    from clustertwin.policies.pipedream.ops import first_deadlock

    assert "worker 1 at Op(kind='F', microbatch=1" in first_deadlock(bad)


def test_deadlocking_in_flight_caps_are_rejected_when_generated():
    with pytest.raises(ValueError, match="deadlocks"):
        make_schedule("1f1b", (1, 1), 4, in_flight=(1, 3))


@settings(max_examples=30, deadline=None)
@given(
    name=st.sampled_from(["gpipe", "flush", "2bw", "interleaved"]),
    p=st.integers(1, 4),
    v=st.integers(1, 3),
)
def test_generated_schedules_pass_the_dry_run(name, p, v):
    from clustertwin.policies.pipedream.ops import first_deadlock

    schedule = make_schedule(
        name, (1,) * p, 2 * p, num_batches=2, chunks_per_device=v if name == "interleaved" else 1
    )
    assert first_deadlock(schedule) is None
