"""Lease renewal is the scheduler's decision ([Narayanan] §5.5): the round plan's renewed set is what the
simulator and the real runtime both execute, a lost process is never renewed, and a job on a cloud fleet
must fit the fleet at full size, not the workers up when it arrives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from clustertwin.policies.gavel.cluster import ClusterLayout
from clustertwin.policies.gavel.lease_time import LeaseTime
from clustertwin.policies.gavel.scheduler import GavelScheduler, JobSpec, RoundPlan, SchedulerConfig
from clustertwin.scenarios.load import load_scenario
from clustertwin.sim.gavel.setup import build

from tests.test_gavel_mechanism import FixedPolicy

ROOT = Path(__file__).resolve().parents[1]


def record_plans(scheduler: GavelScheduler) -> list[RoundPlan]:
    """Every round plan the scheduler hands out from now on that runs something, in order (one per
    executed round, in both executors)."""
    plans: list[RoundPlan] = []
    plan_next = scheduler.next_round

    def next_round() -> RoundPlan:
        plan = plan_next()
        if len(plan):
            plans.append(plan)
        return plan

    scheduler.next_round = next_round  # type: ignore[method-assign]
    return plans


def assert_rounds_follow_plans(rounds: pd.DataFrame, plans: list[RoundPlan]) -> None:
    """The rounds table's ``renewed`` column, per (round, job), is the plans' renewed set."""
    planned = {
        (r, job): bool(flag)
        for r, plan in enumerate(plans)
        for key, flag in zip(plan.job_ids, plan.renewed, strict=True)
        for job in key
    }
    ran = {(int(row.round), int(row.job_id)): bool(row.renewed) for row in rounds.itertuples()}
    assert ran == planned


def _scheduler(gpus: tuple[int, ...] = (1, 1)) -> GavelScheduler:
    layout = ClusterLayout(("v100", "k80"), gpus, (1, 1))
    return GavelScheduler(
        layout, FixedPolicy([1.0, 0.0]), np.random.default_rng(0), SchedulerConfig(360, 1e9)
    )


def _spec(job_id: int, sf: int = 1) -> JobSpec:
    return JobSpec(job_id, "t", sf, 1e9, 0.0, np.array([2.0, 1.0]))


def test_a_lost_lease_is_placed_afresh_not_renewed() -> None:
    sched = _scheduler()
    sched.add_job(_spec(0))
    sched.reset(0.0)
    first = sched.next_round()
    sched.record_round(first, np.array([360.0]), {0: 1.0}, 360.0)
    sched.lease_lost(0)
    second = sched.next_round()
    assert len(second) == 1 and second.worker_types[0] == first.worker_types[0]
    assert not second.renewed[0]  # the same type and GPU, but its process is gone: a fresh start
    sched.record_round(second, np.array([360.0]), {0: 1.0}, 360.0)
    assert sched.next_round().renewed[0]  # the new process holds the GPU: renewable again


def test_a_job_must_fit_the_full_cluster_not_the_workers_up_now() -> None:
    sched = _scheduler((2, 2))
    sched.resize((1, 2), [{0: 0}, {0: 0, 1: 1}])  # one v100 is down for now
    sched.add_job(_spec(0, sf=2))  # fits the cluster at full size
    with pytest.raises(ValueError, match="needs 3 GPUs"):
        sched.add_job(_spec(1, sf=3))


@pytest.mark.parametrize("name", ["gavel-real-cpu.yaml", "gavel-default.yaml"])
def test_the_simulator_runs_the_plans_renewed_set(name: str) -> None:
    simulation = build(load_scenario(ROOT / "scenarios" / name, []))
    plans = record_plans(simulation.scheduler)
    rounds = simulation.run()["rounds"]
    assert rounds["renewed"].any() and not rounds["renewed"].all()
    assert_rounds_follow_plans(rounds, plans)


def test_leases_are_sized_by_the_learned_overhead_of_their_kind() -> None:
    timer = LeaseTime(12.0, {"cpu": 3.0}, smoothing=0.5)
    assert timer.lease_s("cpu", renewed=False) == 9.0 and timer.lease_s("cpu", renewed=True) == 12.0
    timer.observe("cpu", renewed=False, spent_s=5.0)  # a fresh start cost more than assumed
    timer.observe("cpu", renewed=True, spent_s=-0.1)  # clock noise: a renewal never gains time
    assert timer.lease_s("cpu", renewed=False) == 8.0 and timer.lease_s("cpu", renewed=True) == 12.0
    timer.observe("cpu", renewed=False, spent_s=40.0)
    assert timer.lease_s("cpu", renewed=False) == 1.0  # never less than a second
    assert timer.seen == {("cpu", False): [5.0, 40.0], ("cpu", True): [-0.1]}
