"""The simulator's NCCL-side transfer model used by a real run's own simulation: a message leaves only
once its receiver has reached the op that consumes it (``rendezvous``), and compute runs at 1 / (1 + s)
while a transfer of its device is in flight (``transfer_slowdown``)."""

from __future__ import annotations

import pytest
from clustertwin.policies.pipedream.schedules import make_schedule
from clustertwin.sim.pipedream.executor import simulate
from clustertwin.sim.pipedream.model import ChunkCost, Device, Network
from hypothesis import given, settings
from hypothesis import strategies as st

MB = 1e6


def _costs(forwards: list[float], backwards: list[float], nbytes: float) -> list[ChunkCost]:
    return [
        ChunkCost(f, b, parameter_bytes=MB, activation_bytes=MB, input_bytes=nbytes, output_bytes=nbytes)
        for f, b in zip(forwards, backwards, strict=True)
    ]


def test_a_transfer_inside_a_forward_slows_it_by_the_overlapped_time() -> None:
    # GPipe on two devices: the activation of microbatch 0 (T = 1 ms) leaves as device 0 starts the
    # forward of microbatch 1 (10 ms), wholly inside it: that forward lasts f + T·s / (1 + s).
    schedule = make_schedule("gpipe", (1, 1), 2)
    costs = _costs([0.010, 0.010], [0.020, 0.020], 1e6)
    network = Network(intra_bandwidth=1e9, intra_latency=0.0)
    s = 0.5
    out = simulate(
        schedule,
        costs,
        [Device(), Device()],
        network,
        overlap_allreduce=False,
        transfer_slowdown=[(s, 0.0)] * 2,
    )
    second = [r for r in out.rows if r[0] == 0 and r[4] == "F" and r[5] == 1][0]
    assert second[8] - second[7] == pytest.approx(0.010 + 0.001 * s / (1 + s))
    plain = simulate(schedule, costs, [Device(), Device()], network, overlap_allreduce=False)
    first = [r for r in plain.rows if r[0] == 0 and r[4] == "F" and r[5] == 1][0]
    assert first[8] - first[7] == pytest.approx(0.010)


@settings(max_examples=25, deadline=None)
@given(
    name=st.sampled_from(["gpipe", "flush", "2bw", "1f1b", "interleaved"]),
    f=st.lists(st.floats(1e-3, 2e-2), min_size=4, max_size=4),
    b=st.lists(st.floats(1e-3, 4e-2), min_size=4, max_size=4),
    transfer=st.floats(1e-5, 5e-3),
    s=st.floats(0.0, 1.0),
)
def test_rendezvous_and_slowdown_only_delay_and_a_message_follows_its_receivers_previous_op(
    name: str, f: list[float], b: list[float], transfer: float, s: float
) -> None:
    chunks = 4 if name == "interleaved" else 2
    schedule = make_schedule(name, (1,) * 2, 4, 1, 2 if name == "interleaved" else 1)
    costs = _costs(f[:chunks], b[:chunks], transfer * 1e9)
    devices = [Device(), Device()]
    network = Network(intra_bandwidth=1e9, intra_latency=0.0)
    run = {"overlap_allreduce": False}
    base = simulate(schedule, costs, devices, network, **run)
    met = simulate(schedule, costs, devices, network, rendezvous=True, **run)
    slowed = simulate(
        schedule, costs, devices, network, rendezvous=True, transfer_slowdown=[(s, s)] * chunks, **run
    )
    assert met.makespan_s >= base.makespan_s - 1e-12
    assert slowed.makespan_s >= met.makespan_s - 1e-12
    # With the rendezvous, every transfer starts no earlier than the end of its receiver's op before the
    # one that consumes it.
    compute = sorted((r for r in met.rows if r[4] in ("F", "B", "W")), key=lambda r: (r[0], r[7]))
    for r in met.rows:
        if r[4] not in ("send_act", "send_grad"):
            continue
        chunk = r[2] + 1 if r[4] == "send_act" else r[2] - 1
        kind = "F" if r[4] == "send_act" else "B"
        consumer = next(c for c in compute if c[2] == chunk and c[4] == kind and c[5] == r[5])
        before = [c for c in compute if c[0] == consumer[0] and c[8] <= consumer[7] and c is not consumer]
        if before:
            assert r[7] >= max(c[8] for c in before) - 1e-12
        assert consumer[7] >= r[8] - 1e-12
