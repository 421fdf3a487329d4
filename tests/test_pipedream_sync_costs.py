"""The costs a real PipeDream run measures for its own simulation: the replicas' gradient
synchronisation (run in place, priced from the probed collective through the link table) and the
stages timed whole, with gradient accumulation as the runtime adds."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from clustertwin.policies.pipedream.partition import StagePlan  # noqa: E402
from clustertwin.runtime.pipedream import distributed  # noqa: E402
from clustertwin.sim.pipedream.measured import collective_table, measured_costs  # noqa: E402
from clustertwin.sim.pipedream.model import Device, Network  # noqa: E402


def test_gradients_are_reduced_where_they_lie_and_small_ones_in_one_bucket(monkeypatch) -> None:
    calls: list[torch.Tensor] = []

    def all_reduce(t: torch.Tensor, group: object = None) -> None:  # two equal replicas: a sum doubles
        calls.append(t)
        t.mul_(2)

    monkeypatch.setattr(distributed.dist, "all_reduce", all_reduce)
    big = torch.arange(distributed.BUCKET_BYTES // 4, dtype=torch.float32)
    strided = torch.arange(2 * distributed.BUCKET_BYTES // 4, dtype=torch.float32)[::2]  # not contiguous
    small = [torch.ones(3, 2), torch.arange(5, dtype=torch.float64), torch.full((4,), 3.0)]
    grads = [big, small[0], strided, small[1], small[2]]
    before = [g.clone() for g in grads]
    sync_storage = big.data_ptr()
    distributed.sync_gradients(grads, None)
    for g, b in zip(grads, before, strict=True):
        torch.testing.assert_close(g, 2 * b)
    assert big.data_ptr() == sync_storage and calls[0] is big  # the large tensor itself, no copy
    assert len(calls) == 3  # the large one, then one bucket per dtype of the rest


@given(
    members=st.integers(2, 8),
    nbytes=st.floats(1e3, 1e10),
    seconds=st.lists(st.floats(1e-5, 1.0), min_size=1, max_size=4),
)
def test_the_link_tables_collective_gives_back_the_probed_time(
    members: int, nbytes: float, seconds: list[float]
) -> None:
    probes = [{"chunk": 0.0, "members": float(members), "bytes": nbytes, "seconds": s} for s in seconds]
    network = Network(intra_bandwidth=1e12, intra_latency=1e-3, collective=collective_table(probes))
    group = [Device() for _ in range(members)]
    # The slowest member's time: a collective ends when its last member does.
    assert network.allreduce_s(group, nbytes) == pytest.approx(max(seconds), rel=1e-9)
    # A group size that was not probed still uses the ring over the links.
    other = [Device() for _ in range(members + 1)]
    r = members + 1
    ring = 2 * (r - 1) / r * nbytes / 1e12 + 2 * (r - 1) * 1e-3
    assert network.allreduce_s(other, nbytes) == pytest.approx(ring)


def _layers(accumulate: bool) -> pd.DataFrame:
    rows = [
        {
            "layer": i,
            "description": "L",
            "forward_s": 1.0,
            "backward_s": 2.0,
            "output_bytes": 8.0,
            "parameter_bytes": 16.0,
            "held_bytes": 4.0,
            "update_s": 0.5,
            **({"accumulate_s": 0.25} if accumulate else {}),
        }
        for i in range(4)
    ]
    return pd.DataFrame(rows)


def test_stages_timed_whole_and_measured_accumulation_set_the_op_costs() -> None:
    stages = [StagePlan(0, 1, 1), StagePlan(2, 3, 1)]
    chunks = pd.DataFrame([{"first_layer": 2, "last_layer": 3, "forward_s": 2.5, "backward_s": 4.5}])
    costs = measured_costs(_layers(True), stages, 4, chunks)
    # Stage 0 was not timed whole: its layers summed; 3 of 4 backwards add into the accumulator.
    assert costs[0].forward_s == 2.0 and costs[0].backward_s == pytest.approx(4.0 + 0.75 * 0.5)
    assert costs[1].forward_s == 2.5 and costs[1].backward_s == pytest.approx(4.5 + 0.75 * 0.5)
    assert costs[1].update_s == 1.0
    # A run folder written before accumulation was measured prices it as the SGD step.
    old = measured_costs(_layers(False), stages, 4)
    assert old[0].backward_s == pytest.approx(4.0 + 0.75 * 1.0)
