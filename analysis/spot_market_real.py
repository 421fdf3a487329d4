"""A market-driven real spot run (``real.market: true``): the simulator's setup builds the market, the
policies and the books' rules from the scenario exactly as for a simulation (``sim.spot.setup.build``),
and the runtime runs them on real processes (``runtime.spot.run_market_real``). Both executors are
needed to put the two together, so this lives in the analysis layer above them; the simulation of the
same file is the prediction that ``clustertwin compare`` measures the run against.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from clustertwin.runtime.spot.fleet import MarketInputs
from clustertwin.scenarios.results import RunResult
from clustertwin.scenarios.spot_schema import SpotScenario


def market_inputs(scenario: SpotScenario) -> tuple[MarketInputs, str]:
    """The fleet's inputs and the job's start time in the trace (ISO), as the simulation builds them."""
    from clustertwin.sim.spot.setup import build

    config, market, _markets, start = build(scenario)
    inputs = MarketInputs(
        acquisition=config.acquisition,
        fault_tolerance=config.fault_tolerance,
        billing=config.billing,
        series=market.series,
        on_demand_prices=config.on_demand_prices,
        work_rates=config.work_rates,
        target_rate=config.target_rate,
        max_rate=config.max_rate,
        total_work=config.total_work,
        reliable_type=config.reliable_type,
        reference_type=config.reference_type,
        request_delay_s=config.request_delay_s,
        boot_s=config.boot_s,
        max_runtime_s=config.max_runtime_s,
    )
    return inputs, start.isoformat()


def run_market_real(
    scenario: SpotScenario, out_dir: Path, progress: Callable[[float, str], None] | None = None
) -> RunResult:
    """Run the scenario's market for real: the acquisition policy decides, processes are its instances."""
    from clustertwin.runtime.spot import run_market_real as run_processes

    inputs, start = market_inputs(scenario)
    result = run_processes(scenario, inputs, out_dir, progress)
    result.info["start_timestamp"] = start
    return result
