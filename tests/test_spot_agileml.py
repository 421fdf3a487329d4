"""AgileML policies (stages, partitions, migration, recovery) and its performance model."""

from __future__ import annotations

import pytest
from clustertwin.policies.agileml import (
    PartitionTable,
    StageThresholds,
    choose_active_ps_hosts,
    choose_stage,
    num_partitions,
    plan_evictions,
    plan_recovery,
    workers_on_reliable,
)
from clustertwin.sim.spot.perf import DEFAULT_PERF, calibrate
from hypothesis import given, settings
from hypothesis import strategies as st


def test_stage_by_ratio() -> None:
    assert choose_stage(4, 4) == 1  # 1:1 stays in stage 1
    assert choose_stage(4, 5) == 2
    assert choose_stage(4, 60) == 2  # 15:1 is still stage 2
    assert choose_stage(4, 61) == 3
    assert choose_stage(0, 10) is None
    assert choose_stage(1, 10, StageThresholds(2.0, 5.0)) == 3
    assert workers_on_reliable(2) and not workers_on_reliable(3)


def test_active_ps_on_longest_running_half() -> None:
    started = {"t1": 50.0, "t2": 10.0, "t3": 30.0, "t4": 40.0}
    assert choose_active_ps_hosts(started, [], n_machines=6) == ["t2", "t3", "t4"]
    # A surviving host keeps its ActivePS even if it is not among the oldest.
    assert choose_active_ps_hosts(started, ["t1"], n_machines=4) == ["t1", "t2"]
    assert num_partitions(192) == 96


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 8),
    st.lists(st.floats(0, 1000), min_size=0, max_size=20),
    st.data(),
)
def test_partitions_always_owned_and_balanced(n_reliable, starts, data) -> None:
    reliable = [f"r{i}" for i in range(n_reliable)]
    transient = {f"t{i}": s for i, s in enumerate(starts)}
    n_machines = n_reliable + len(transient)
    table = PartitionTable.create(num_partitions(64), reliable)
    hosts = choose_active_ps_hosts(transient, [], n_machines)
    table.assign_active(hosts)
    doomed = data.draw(st.lists(st.sampled_from(sorted(transient)), unique=True)) if transient else []
    survivors = {h: t for h, t in transient.items() if h not in doomed}
    moves = plan_evictions(table, doomed, survivors, n_machines - len(doomed))
    assert all(owner in reliable for owner in table.backup)  # a backup owner always exists, reliable
    for owner in table.active:
        assert owner is None or owner in survivors  # nothing left on an evicted machine
        if owner is None:
            assert not survivors
    assert all(m.source not in survivors or m.target is not None for m in moves)
    live = [h for h in dict.fromkeys(table.active) if h is not None]
    if live:
        loads = [len(table.owned_by(h)) for h in live]
        assert max(loads) - min(loads) <= max(1, len(table.backup) // len(live))


def test_recovery_flush_or_effective_failure() -> None:
    ok = plan_recovery(
        warning_s=120, poll_s=5, unpushed_bytes=64e6, flush_bandwidth_bps=1e9, since_consistent_s=10
    )
    assert ok.kind == "end_of_life_flush" and ok.lost_s == 0 and ok.flush_s == pytest.approx(0.512)
    late = plan_recovery(
        warning_s=4, poll_s=5, unpushed_bytes=64e6, flush_bandwidth_bps=1e9, since_consistent_s=10
    )
    assert late.kind == "effective_failure" and late.lost_s == 10
    big = plan_recovery(
        warning_s=30, poll_s=5, unpushed_bytes=8e9, flush_bandwidth_bps=1e9, since_consistent_s=7
    )
    assert big.kind == "effective_failure"  # 64 s of flush does not fit in GCE's 30 s warning


def test_perf_model_anchors_and_shape() -> None:
    m = DEFAULT_PERF
    assert m.slowdown(2, 4, 60) == pytest.approx(1.18)
    assert m.slowdown(2, 1, 63) == pytest.approx(2.0)
    # Stage 1's reliable-NIC bottleneck grows as reliable machines get fewer.
    s1 = [m.slowdown(1, r, 64 - r) for r in (32, 16, 8, 4)]
    assert s1 == sorted(s1) and s1[-1] > 1.85
    assert m.slowdown(3, 1, 63) == pytest.approx(1.0, abs=0.05)
    assert m.iteration(2, 8, 8) < m.iteration(3, 8, 8)
    with pytest.raises(ValueError):
        calibrate(stage2_15to1=3.0, stage2_63to1=1.1)  # unphysical anchors are refused
