"""Op-level simulation of pipeline-parallel training (PipeDream, GPipe, Flush, 2BW, interleaved).

``run(scenario, progress=None) -> RunResult`` is the entry point for ``kind: pipedream`` scenarios;
``executor.simulate`` runs any ``policies.pipedream`` schedule on given chunk costs, devices and links.
"""

from __future__ import annotations

from collections.abc import Callable

from scenarios.pipedream_schema import PipeDreamScenario
from scenarios.results import RunResult


def run(scenario: PipeDreamScenario, progress: Callable[[float, str], None] | None = None) -> RunResult:
    """Simulate a ``kind: pipedream`` scenario (see ``sim.pipedream.runner``)."""
    from sim.pipedream.runner import run as _run

    return _run(scenario, progress)
