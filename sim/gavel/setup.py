"""Turn a Gavel scenario into a ready simulation: throughput oracle, jobs, policy."""

from __future__ import annotations

import time
from pathlib import Path

from clustertwin.scenarios.gavel_scheduler import setup
from clustertwin.scenarios.gavel_schema import Scenario
from clustertwin.scenarios.results import RunResult
from clustertwin.sim.gavel.engine import GavelSimulation, MechanismConfig, Progress
from clustertwin.sim.gavel.host import host_model


def build(scenario: Scenario, progress: Progress | None = None) -> GavelSimulation:
    made = setup(scenario)
    m = scenario.mechanism
    return GavelSimulation(
        made.layout,
        made.jobs,
        made.policy,
        MechanismConfig(
            m.round_s,
            m.ideal,
            made.overheads,
            m.overhead_model == "restart",
            m.min_reset_interval_s,
        ),
        seed=scenario.seed,
        colocation=made.truth,
        progress=progress,
        scheduler=made.scheduler,
        market=made.market,
        policy_throughputs=made.believed,
        host=host_model(scenario, made.layout, made.split.base if made.split else made.layout.worker_types),
    )


def run(scenario: Scenario, progress: Progress | None = None) -> RunResult:
    started = time.perf_counter()
    simulation = build(scenario, progress)
    tables = simulation.run()
    info = {
        "wall_s": time.perf_counter() - started,
        "sim_end_s": float(simulation.env.now),
        "num_rounds": simulation.num_rounds,
        "num_resets": simulation.scheduler.num_resets,
        "workload": str(Path(scenario.workload.trace).name) if scenario.workload.trace else "generated",
    }
    return RunResult(tables=tables, info=info)
