"""The sharded parameter server of the FlexRR simulator ([Harlap], §3.2; ``sim/flexrr/ps.py``).

* ``ps.model_bytes: 0`` leaves every run exactly as it was (the section absent);
* the SSP bound holds against the shards with the traffic on: no worker starts iteration t before every
  shard applied t - slack - 1 (and a shard applies t only after every worker completed t);
* a shard-bottleneck case with an analytic answer (BSP, equal workers, no stragglers);
* more shards spread the incast of pushes into one shard;
* the real runtime refuses a scenario with PS traffic.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from clustertwin.analysis.flexrr_metrics import flexrr_metrics
from clustertwin.scenarios.flexrr_schema import FlexRRScenario
from clustertwin.scenarios.load import load_scenario
from clustertwin.sim.flexrr import run, simulate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clustertwin.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "scenarios" / "flexrr-default.yaml"
SMALL = [
    "cluster.machines=4",
    "cluster.workers_per_machine=2",
    "iterations=5",
    "items_per_worker=100",
    "rr.message_checks=10",
    "iteration_s=1.0",
]


def scenario(*overrides: str) -> FlexRRScenario:
    return load_scenario(DEFAULT, [*SMALL, *overrides])


def same_run(a, b) -> None:
    for name in ("iterations", "commits", "messages"):
        pd.testing.assert_frame_equal(a.tables[name], b.tables[name], check_exact=True)
    strip = {"wall_s"}
    assert {k: v for k, v in a.info.items() if k not in strip} == {
        k: v for k, v in b.info.items() if k not in strip
    }


@pytest.mark.parametrize("mode", ["bsp", "flexrr"])
def test_zero_model_bytes_is_the_run_without_a_ps(mode):
    base = [f"mode={mode}", "stragglers.model=power_law", "stragglers.alpha=2.5", "ps_sync_s=0.003"]
    absent = run(scenario(*base))
    # every other PS knob set to something that would matter if the PS were on
    zero = run(scenario(*base, "ps.model_bytes=0", "ps.shards=3", "ps.nic_gbps=0.01", "ps.latency_s=0.5"))
    same_run(absent, zero)
    assert not any(k.startswith("ps_") for k in zero.info)


def applied_times(log) -> dict[tuple[int, int], float]:
    return {(shard, it): t for shard, it, t in log.ps.applied}


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mode=st.sampled_from(["bsp", "ssp", "bsp_rr", "flexrr"]),
    slack=st.integers(0, 2),
    machines=st.integers(1, 4),
    per_machine=st.integers(1, 3),
    shards=st.integers(1, 6),
    model_bytes=st.integers(1, 50_000_000),
    nic_gbps=st.sampled_from([0.05, 0.5, 1.0, 10.0]),
    latency=st.sampled_from([0.0, 0.001, 0.05]),
    sync=st.sampled_from([0.0, 0.01]),
    speeds=st.lists(st.floats(0.3, 3.0), min_size=12, max_size=12),
    seed=st.integers(0, 1000),
)
def test_slack_bound_holds_against_the_shards(
    mode, slack, machines, per_machine, shards, model_bytes, nic_gbps, latency, sync, speeds, seed
):
    n = machines * per_machine
    s = load_scenario(
        DEFAULT,
        [
            f"cluster.machines={machines}",
            f"cluster.workers_per_machine={per_machine}",
            "iterations=4",
            "items_per_worker=40",
            "rr.message_checks=10",
            f"mode={mode}",
            f"slack={slack}",
            "stragglers.model=power_law",
            "stragglers.alpha=2.5",
            f"iteration_s_per_worker=[{', '.join(f'{v:.4f}' for v in speeds[:n])}]",
            f"latency_s={latency}",
            f"ps_sync_s={sync}",
            f"ps.model_bytes={model_bytes}",
            f"ps.shards={shards}",
            f"ps.nic_gbps={nic_gbps}",
            f"seed={seed}",
        ],
    )
    result, log = simulate(s)
    its = result.tables["iterations"]
    assert len(its) == n * s.iterations  # nobody stalled
    applied = applied_times(log)
    # every shard applies every iteration, in order, and only once every worker completed it
    done_by = its.groupby("iteration")["end_s"].max()
    for j in range(shards):
        times = [applied[(j, k)] for k in range(s.iterations)]
        assert times == sorted(times)
        for k, t in enumerate(times):
            assert t >= done_by[k] - 1e-9
    # the bound: iteration t starts only after every shard applied t - slack - 1, and the worker's read
    # of the fresh slices (plus the fixed ps_sync_s) is over
    pulled = {(w, k): done for w, k, _, done in log.ps.pulls}
    for row in its.itertuples():
        k = row.iteration - slack - 1
        if k < 0:
            continue
        assert row.start_s >= max(applied[(j, k)] for j in range(shards)) - 1e-9
        assert row.start_s >= pulled[(row.worker, k)] + sync - 1e-9


def bsp_transfer_s(machines: int, per_machine: int, shards: int, model_bytes: int, gbps: float) -> float:
    """Byte time of one BSP push (and, mirrored, of one pull) when every worker completes at once and
    shard j lives on machine j (shards <= machines).

    A shard's ingress carries one slice from every worker off its machine; a machine's egress one slice
    per worker per shard off that machine. Every flow crosses the busier kind of NIC, so all flows get
    that NIC's equal share and the busier NIC's bytes / bandwidth is the time."""
    slice_bytes = model_bytes / shards
    shard_ingress = (machines - 1) * per_machine * slice_bytes
    remote_shards = shards if shards < machines else shards - 1  # a machine without a shard sends S
    machine_egress = per_machine * remote_shards * slice_bytes
    return max(shard_ingress, machine_egress) / (gbps * 1e9 / 8)


@pytest.mark.parametrize("shards", [1, 2, 4])
def test_bsp_shard_bottleneck_matches_the_nic_model(shards):
    # 4 machines x 2 workers, 8 MB model, 1 Gbps NICs, 1 ms latency, 2 ms fixed sync, no stragglers
    s = scenario(
        "mode=bsp",
        "stragglers.model=none",
        "latency_s=0.001",
        "ps_sync_s=0.002",
        "ps.model_bytes=8000000",
        f"ps.shards={shards}",
        "ps.nic_gbps=1.0",
    )
    result = run(s)
    its = result.tables["iterations"].sort_values(["worker", "iteration"])
    # by hand, at 1.25e8 B/s: S=4: every NIC carries 2 workers x 3 remote slices of 2 MB = 12 MB;
    # S=2: a shard's ingress 6 remote workers x 4 MB = 24 MB; S=1: shard 0's ingress 6 x 8 MB = 48 MB
    expected = {1: 0.384, 2: 0.192, 4: 0.096}[shards]
    assert bsp_transfer_s(4, 2, shards, 8_000_000, 1.0) == pytest.approx(expected, rel=1e-12)
    gap = 2 * (0.001 + expected) + 0.002  # push + pull, each with its latency, + the fixed ps_sync_s
    for w, g in its.groupby("worker"):
        starts, ends = g["start_s"].to_numpy(), g["end_s"].to_numpy()
        np.testing.assert_allclose(ends - starts, 1.0, rtol=1e-9)  # compute is untouched
        if shards == 1 and w % 4 == 0:
            # the one shard is in this worker's process: its read is free, so it starts iteration 1
            # after the push alone, one pull earlier than the others, and keeps that lead
            np.testing.assert_allclose(starts[1] - ends[0], 0.001 + expected + 0.002, rtol=1e-9)
            np.testing.assert_allclose(starts[2:] - ends[1:-1], gap, rtol=1e-9)
            continue
        np.testing.assert_allclose(starts[1:] - ends[:-1], gap, rtol=1e-9)
    n = s.iterations
    assert flexrr_metrics(result)["time_per_iteration_s"] == pytest.approx((n * 1.0 + (n - 1) * gap) / n)
    # bytes that crossed a NIC: the slices not on the worker's machine (worker w is on machine w mod 4),
    # pushed after each of the n iterations and pulled before iterations 1..n-1 (0 reads the initial model)
    remote_slices = sum(1 for w in range(8) for j in range(shards) if w % 4 != j)
    assert result.info["ps_nic_bytes"] == (2 * n - 1) * remote_slices * (8_000_000 // shards)


def test_more_shards_spread_the_incast():
    times = []
    for shards in (1, 2, 4):
        s = scenario("mode=bsp", "stragglers.model=none", f"ps.shards={shards}", "ps.model_bytes=20000000")
        times.append(flexrr_metrics(run(s))["time_per_iteration_s"])
    assert times[0] > times[1] > times[2] > 1.0
    # the push and pull into/out of one shard is the bottleneck: 1 -> 4 shards cuts the traffic time 4x
    assert (times[0] - 1.0) / (times[2] - 1.0) == pytest.approx(4.0, rel=0.02)


def test_traffic_slows_bsp_more_than_flexrr_and_more_bytes_cost_more():
    base = ["stragglers.model=slow_worker", "stragglers.delay=2.0", "stragglers.probability=0.1"]
    t = {}
    for mode in ("bsp", "flexrr"):
        for mb in (0, 1_000_000, 20_000_000):
            t[mode, mb] = flexrr_metrics(run(scenario(*base, f"mode={mode}", f"ps.model_bytes={mb}")))[
                "time_per_iteration_s"
            ]
        assert t[mode, 0] < t[mode, 1_000_000] < t[mode, 20_000_000]
    assert t["flexrr", 20_000_000] < t["bsp", 20_000_000]


def test_a_real_run_refuses_a_ps_size_that_is_not_its_models():
    from clustertwin.kinds.flexrr import SPEC

    with pytest.raises(InputError, match="ps.model_bytes"):
        SPEC.check(
            scenario("cluster.machines=2", "cluster.workers_per_machine=2", "ps.model_bytes=1000"), "real"
        )
