"""Turn a Gavel scenario into a ready simulation: throughput oracle, jobs, policy."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING

from clustertwin.scenarios.gavel_scheduler import setup
from clustertwin.scenarios.gavel_schema import Scenario
from clustertwin.scenarios.gavel_workload import arrivals_end_early
from clustertwin.scenarios.results import RunResult
from clustertwin.sim.gavel.engine import GavelSimulation, MechanismConfig, Progress
from clustertwin.sim.gavel.host import host_model

from clustertwin.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

# num_jobs: auto starts at this multiple of the window's end and doubles, up to AUTO_LIMIT times it. A
# generous start costs little: the simulation stops when the window is done, so jobs that would arrive
# later are never simulated, while a trace that runs out means simulating again (7,000 jobs, 1.4 times
# the paper's window end, run out at 5.6 jobs/h even under aware LAS).
AUTO_FIRST = 3
AUTO_LIMIT = 12


def build(
    scenario: Scenario, progress: Progress | None = None, num_jobs: int | None = None
) -> GavelSimulation:
    """The simulation of ``scenario``; ``num_jobs`` sizes a generated trace (``auto``: its first size,
    see `run`)."""
    if num_jobs is None:
        num_jobs = auto_first_size(scenario)
    made = setup(scenario, num_jobs)
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
        learn_pairs=scenario.mechanism.estimate_colocation is not None,
        host=host_model(scenario, made.layout, made.split.base if made.split else made.layout.worker_types),
    )


def auto_first_size(scenario: Scenario) -> int | None:
    """The first trace size ``num_jobs: auto`` tries; None when the scenario gives a number."""
    g, window = scenario.workload.generate, scenario.workload.window
    if g is None or g.num_jobs != "auto" or window is None:
        return None
    return math.ceil(AUTO_FIRST * window[1])


def run(scenario: Scenario, progress: Progress | None = None) -> RunResult:
    """Simulate ``scenario``. A generated continuous trace with a window must keep jobs arriving until
    the window's last job finishes, or the window's tail is measured on a draining cluster: a fixed
    ``num_jobs`` that ends too early is refused; ``num_jobs: auto`` starts at AUTO_FIRST × the window's
    end and doubles until arrivals outlast the window (the generator is prefix-stable, so every try is
    the same workload, and once arrivals outlast the window the result no longer depends on the size:
    the simulation stops when the window's jobs are done)."""
    started = time.perf_counter()
    g = scenario.workload.generate
    window = scenario.workload.window
    checked = g is not None and window is not None and g.jobs_per_hour is not None
    n = auto_first_size(scenario)
    while True:
        simulation = build(scenario, progress, n)
        tables = simulation.run()
        early = arrivals_end_early(tables["jobs"]) if checked else None
        if early is None:
            break
        last_arrival, window_end = early
        field = f"{scenario.source}: field workload.generate.num_jobs"
        if n is None:
            needed = math.ceil(window_end / 3600.0 * g.jobs_per_hour * 1.1)
            raise InputError(
                field,
                f"the last of {g.num_jobs} jobs arrives at {last_arrival / 3600:.1f} h, before the window's"
                f" last job finishes at {window_end / 3600:.1f} h, so the window would be measured on a"
                f" draining cluster; set num_jobs to at least about {needed}, or to auto",
            )
        if n >= AUTO_LIMIT * window[1]:
            raise InputError(
                field,
                f"auto: even {n} jobs stop arriving ({last_arrival / 3600:.1f} h) before the window's last"
                f" job finishes ({window_end / 3600:.1f} h): at jobs_per_hour={g.jobs_per_hour} the queue"
                " grows without bound under this policy; lower the load",
            )
        n *= 2
    return run_result(scenario, simulation, tables, started)


def run_result(
    scenario: Scenario, simulation: GavelSimulation, tables: dict[str, pd.DataFrame], started: float
) -> RunResult:
    """A finished simulation's tables with the run's summary (``started``: its ``perf_counter``)."""
    info = {
        "wall_s": time.perf_counter() - started,
        "sim_end_s": float(simulation.env.now),
        "num_rounds": simulation.num_rounds,
        "num_resets": simulation.scheduler.num_resets,
        "workload": str(Path(scenario.workload.trace).name) if scenario.workload.trace else "generated",
        "num_jobs": len(tables["jobs"]),
    }
    return RunResult(tables=tables, info=info)
