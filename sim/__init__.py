"""SimPy executors. ``run_scenario`` is the one entry point the CLI and sweeps use."""

from __future__ import annotations

from collections.abc import Callable

from clustertwin.scenarios.kinds import AnyScenario
from clustertwin.scenarios.results import RunResult


def run_scenario(scenario: AnyScenario, progress: Callable[[float, str], None] | None = None) -> RunResult:
    """Simulate a scenario and return its event tables."""
    if scenario.kind == "gavel":
        from clustertwin.sim.gavel import setup as gavel_setup

        return gavel_setup.run(scenario, progress)
    if scenario.kind == "flexrr":
        from clustertwin.sim import flexrr

        return flexrr.run(scenario, progress)
    if scenario.kind == "pipedream":
        from clustertwin.sim import pipedream

        return pipedream.run(scenario, progress)
    if scenario.kind == "spot":
        from clustertwin.sim import spot

        return spot.run(scenario, progress)
    if scenario.kind == "psld":
        from clustertwin.sim import psld

        return psld.run(scenario, progress)
    if scenario.kind == "spot_real":
        from clustertwin.errors import InputError

        raise InputError(
            f"{scenario.source}: field kind",
            "kind spot_real is a real run (its tables hold the simulator's prediction of it, anchored on"
            " the measured step rate); use --backend real, or kind: spot to simulate a market",
        )
    raise NotImplementedError(f"no simulator for scenario kind {scenario.kind!r} yet")
