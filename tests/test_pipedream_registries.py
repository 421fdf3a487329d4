"""Pipeline schedules and stage planners as registries: what each entry states holds in simulation, the
scenario validates names against the registries, and every planner honours a straight-only schedule."""

from __future__ import annotations

import pytest
from clustertwin.policies.pipedream.ops import Schedule
from clustertwin.policies.pipedream.partition import pipeline_time
from clustertwin.policies.pipedream.planners import PLANNERS, PlannerInput, plan_with
from clustertwin.policies.pipedream.schedules import SCHEDULES, PipelineSchedule, make_schedule, schedule_spec
from clustertwin.policies.registry import families
from clustertwin.sim.pipedream import run
from clustertwin.sim.pipedream.executor import simulate
from clustertwin.sim.pipedream.model import ChunkCost, Device, Network
from pydantic import ValidationError

from clustertwin.errors import InputError
from tests.test_pipedream_scenario import scenario

P = 4


def _oracle(name: str, microbatches: int, batches: int = 1):
    spec = schedule_spec(name)
    v = 2 if spec.interleaves else 1
    schedule = make_schedule(name, (1,) * P, microbatches, num_batches=batches, chunks_per_device=v)
    costs = [ChunkCost(1.0 / v, 2.0 / v, 1.0, 1.0, 0.0, 0.0) for _ in range(schedule.num_chunks)]
    return schedule, simulate(schedule, costs, [Device() for _ in schedule.workers], Network())


@pytest.mark.parametrize("name", SCHEDULES.names())
def test_every_schedule_states_table_7_1_as_the_simulator_measures_it(name: str) -> None:
    spec = schedule_spec(name)
    # 2BW's second version appears once a later batch starts: run several batches of m = p.
    m, batches = (P, 4) if spec.update_rule == "2bw" else (3 * P, 1)
    schedule, out = _oracle(name, m, batches)
    assert schedule.update_rule == spec.update_rule
    assert out.peak_versions[:P] == [spec.weight_versions(P, s) for s in range(P)]
    stashes = [spec.stashed_activations(P, m, s) for s in range(P)]
    if None not in stashes:
        assert out.peak_stashes == stashes
    # A flushing schedule pays the fill and drain every minibatch; the others once in all.
    _, two = _oracle(name, P * 2, 2)
    _, one = _oracle(name, P * 2, 1)
    assert (two.makespan_s > 2 * one.makespan_s - 1e-9) == spec.flushes


def test_only_a_stage_replicating_schedule_takes_replicas() -> None:
    for entry in SCHEDULES.entries():
        if entry.factory.replicates_stages:
            assert make_schedule(entry.name, (2, 1), 4).placement[0] == (0, 1)
        else:
            with pytest.raises(ValueError, match="straight pipelines only"):
                make_schedule(entry.name, (2, 1), 4)


def test_families_list_the_schedules_and_planners() -> None:
    found = families()
    assert set(found["pipeline schedule"].names()) >= {"gpipe", "flush", "1f1b", "2bw", "interleaved"}
    assert set(found["pipeline planner"].names()) >= {
        "hierarchical",
        "flat",
        "straight",
        "manual",
        "brute_force",
    }


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"schedule": "zigzag"}, r"unknown schedule 'zigzag'; known: 1f1b, 2bw"),
        (
            {"planner.mode": "greedy"},
            r"unknown planner mode 'greedy'; known: 2bw, brute_force, data_parallel, flat",
        ),
    ],
)
def test_unknown_names_are_rejected_with_the_known_ones(changes, message) -> None:
    with pytest.raises(ValidationError, match=message):
        scenario(**changes)


def test_a_registered_schedule_is_a_valid_scenario_choice() -> None:
    @SCHEDULES.register("gpipe_again")
    class GPipeAgain(PipelineSchedule):
        """GPipe under another name"""

        update_rule = "sync"
        flushes = True

        def generate(self, replicas, microbatches, num_batches, chunks_per_device, in_flight) -> Schedule:
            return make_schedule("gpipe", replicas, microbatches, num_batches)

        def weight_versions(self, stages: int, stage: int) -> int:
            return 1

        def stashed_activations(self, stages: int, microbatches: int, stage: int) -> int:
            return microbatches

    try:
        assert scenario(schedule="gpipe_again").schedule == "gpipe_again"
        with pytest.raises(ValidationError, match="in_flight applies to schedule: 1f1b only"):
            scenario(schedule="gpipe_again", in_flight=[1])
    finally:
        SCHEDULES.unregister("gpipe_again")


def _tiny_input(straight: bool, devices: int = 4) -> PlannerInput:
    compute = [0.4, 1.3, 0.2, 0.9, 0.7, 1.1]
    return PlannerInput(
        compute_s=compute,
        parameter_bytes=[2e6, 1e5, 3e6, 0.0, 5e5, 4e6],
        cut_bytes=[1e6, 2e5, 8e5, 3e5, 6e5, 0.0],
        servers=2,
        devices_per_server=2,
        intra_bandwidth=10e9,
        inter_bandwidth=1e9,
        devices=devices,
        straight=straight,
        stages=None,
    )


@pytest.mark.parametrize("mode", [m for m in PLANNERS.names() if m != "manual"])
def test_every_planner_honours_a_straight_only_schedule(mode: str) -> None:
    plan = plan_with(mode, _tiny_input(straight=True))
    # A planner may run whole copies of a shorter pipeline side by side (2bw's data-parallel width).
    assert len(plan.stages) * plan.data_parallel == 4 and all(st.replicas == 1 for st in plan.stages)
    bounds = [(st.first, st.last) for st in plan.stages]
    assert bounds[0][0] == 0 and bounds[-1][1] == 5
    assert all(nxt[0] == prev[1] + 1 for prev, nxt in zip(bounds, bounds[1:], strict=False))


def test_brute_force_planner_finds_the_flat_optimum() -> None:
    inp = _tiny_input(straight=False)
    exhaustive, dp = plan_with("brute_force", inp), plan_with("flat", inp)
    assert exhaustive.num_devices == dp.num_devices == inp.devices
    assert exhaustive.time_per_input == pytest.approx(dp.time_per_input, rel=1e-12)
    args = (inp.compute_s, inp.parameter_bytes, inp.cut_bytes, inp.inter_bandwidth)
    assert pipeline_time(exhaustive.stages, *args) == pytest.approx(exhaustive.time_per_input)


def test_brute_force_on_a_large_model_names_the_planner_field() -> None:
    with pytest.raises(InputError, match="planner.*at most 12 layer blocks"):
        run(scenario(**{"planner.mode": "brute_force"}))
