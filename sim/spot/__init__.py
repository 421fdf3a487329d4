"""Spot-market simulation (Proteus: BidBrain + AgileML, [Proteus]). Entry point: :func:`run`.

``run(scenario, progress=None) -> RunResult`` simulates a :class:`scenarios.spot_schema.SpotScenario`;
the tables' column contract is in :mod:`scenarios.spot_results`.
"""

from __future__ import annotations

from collections.abc import Callable

from clustertwin.scenarios.results import RunResult
from clustertwin.scenarios.spot_schema import SpotScenario


def run(scenario: SpotScenario, progress: Callable[[float, str], None] | None = None) -> RunResult:
    """Simulate a spot scenario and return its event tables (see ``sim/spot/tables.py``)."""
    from clustertwin.sim.spot.setup import run as _run

    return _run(scenario, progress)


__all__ = ["run"]
