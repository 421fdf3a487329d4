"""``bench gavel``'s policy floor: the allocations a run made, replayed alone, are that run's allocations."""

from __future__ import annotations

import pytest
from clustertwin.scenarios.load import load_scenario
from clustertwin.sim.gavel.setup import run

from clustertwin import bench_gavel

SMALL = ("workload.generate.num_jobs=60", "workload.generate.jobs_per_hour=5.0", "workload.window=null")


def test_floor_replays_every_allocation_of_the_run() -> None:
    scenario = load_scenario(None, SMALL)
    seconds, allocations = bench_gavel.policy_floor(scenario)
    assert allocations == run(scenario).info["num_resets"] > 1
    assert seconds > 0


def test_floor_refuses_a_replay_that_differs(monkeypatch: pytest.MonkeyPatch) -> None:
    # A policy whose allocation depends on more than its input cannot give a floor.
    calls = iter(range(10**6))
    real = bench_gavel.TimedPolicy.allocate

    def drifting(self, inp, rng):
        allocation = real(self, inp, rng)
        allocation.fractions[:] *= 1 + next(calls) * 1e-9
        return allocation

    monkeypatch.setattr(bench_gavel.TimedPolicy, "allocate", drifting)
    with pytest.raises(RuntimeError, match="differs"):
        bench_gavel.policy_floor(load_scenario(None, SMALL))
