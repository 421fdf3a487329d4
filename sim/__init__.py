"""SimPy executors. ``run_scenario`` is the one entry point the CLI and sweeps use."""

from __future__ import annotations

from collections.abc import Callable

from scenarios.results import RunResult
from scenarios.schema import Scenario


def run_scenario(scenario: Scenario, progress: Callable[[float, str], None] | None = None) -> RunResult:
    """Simulate a scenario and return its event tables."""
    if scenario.kind == "gavel":
        from sim import gavel_setup

        return gavel_setup.run(scenario, progress)
    raise NotImplementedError(f"no simulator for scenario kind {scenario.kind!r} yet")
