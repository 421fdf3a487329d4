"""The planner choices beyond the partitioning DP: memory-aware stages that fit in simulation, the 2BW
planner entry, the data-parallel baseline, and vertical sync in the schedule and the simulator."""

from __future__ import annotations

import pytest
from clustertwin.policies.pipedream.one_f_one_b import one_f_one_b
from clustertwin.policies.pipedream.schedules import make_schedule
from clustertwin.sim.pipedream import run
from clustertwin.sim.pipedream.executor import simulate
from clustertwin.sim.pipedream.model import ChunkCost, Device, Network

from tests.test_pipedream_scenario import scenario


def test_memory_aware_plan_fits_where_the_unaware_one_runs_out_of_memory():
    # VGG-16's 1F1B on 2x4 GPUs of 5 GiB: the hierarchical plan ignores memory and overflows; the
    # memory-aware planner picks stages whose weights and in-flight stashes fit, and the simulator agrees.
    tight = {"cluster.memory_gib": 5.0, "microbatches": 16}
    with pytest.raises(Exception, match="out of memory"):
        run(scenario(**tight, **{"planner.memory_aware": False}))
    result = run(scenario(**tight))
    devices = result.tables["devices"]
    assert (devices["peak_memory_bytes"] <= devices["memory_capacity_bytes"]).all()


def test_2bw_planner_chooses_depth_and_width_and_the_runner_widens_the_pipelines():
    result = run(scenario(schedule="2bw", microbatches=8, **{"planner.mode": "2bw"}))
    stages = len(result.tables["stages"])
    assert stages * result.info["data_parallel"] == 8
    assert result.info["simulated_devices"] == stages
    # Less memory per device forces deeper pipelines (fewer weights and stashes per stage), and the
    # simulator agrees that the chosen one fits.
    depths = []
    for gib in (6.0, 4.0):
        tight = run(
            scenario(schedule="2bw", microbatches=8, **{"planner.mode": "2bw", "cluster.memory_gib": gib})
        )
        devices = tight.tables["devices"]
        assert (devices["peak_memory_bytes"] <= devices["memory_capacity_bytes"]).all()
        depths.append(len(tight.tables["stages"]))
    assert depths[1] > depths[0]


def test_data_parallel_baseline_is_one_stage_on_every_device():
    dp = run(scenario(microbatches=16, **{"planner.mode": "data_parallel"}))
    assert dp.info["config"] == "8" and (dp.tables["ops"]["kind"] == "allreduce").any()
    flush = run(scenario(schedule="flush", microbatches=4, **{"planner.mode": "data_parallel"}))
    assert flush.info["config"] == "1" and flush.info["data_parallel"] == 8


def test_vertical_sync_gives_every_stage_the_input_stage_version():
    p, m = 4, 12
    plain = one_f_one_b((1,) * p, m)
    synced = make_schedule("1f1b", (1,) * p, m, vertical_sync=True)
    tag = {op.microbatch: op.version for op in synced.workers[0].ops if op.kind == "F"}
    for worker in synced.workers:
        for op in worker.ops:
            if op.kind in "FB":
                assert op.version == tag[op.microbatch]
    # Stage s would otherwise run input k with a version p-1-s updates newer than the input stage's.
    later = {op.microbatch: op.version for op in plain.workers[p - 1].ops if op.kind == "F"}
    assert later[m - 1] - tag[m - 1] == p - 1
    costs = [ChunkCost(1.0, 2.0, 1.0, 1.0, 0.0, 0.0) for _ in range(p)]
    devices = [Device() for _ in range(p)]
    with_sync = simulate(synced, costs, devices, Network())
    without = simulate(plain, costs, devices, Network())
    # Same ops and times (versions never block a straight pipeline here), more versions kept downstream.
    assert with_sync.makespan_s == pytest.approx(without.makespan_s)
    assert with_sync.peak_versions[p - 1] > without.peak_versions[p - 1] == 1
    with pytest.raises(ValueError, match="straight pipeline"):
        make_schedule("1f1b", (2, 1), 4, vertical_sync=True)
    with pytest.raises(ValueError, match="vertical sync"):
        make_schedule("flush", (1,) * p, m, vertical_sync=True)
