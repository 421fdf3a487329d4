"""Op-level simulation of pipeline-parallel training (PipeDream, GPipe, Flush, 2BW, interleaved).

``run(scenario, progress=None) -> RunResult`` is the entry point for ``kind: pipedream`` scenarios;
``executor.simulate`` runs any ``policies.pipedream`` schedule on given chunk costs, devices and links.
"""

from __future__ import annotations

from collections.abc import Callable

from clustertwin.scenarios.pipedream_schema import PipeDreamScenario
from clustertwin.scenarios.results import RunResult

from clustertwin.errors import InputError


def run(scenario: PipeDreamScenario, progress: Callable[[float, str], None] | None = None) -> RunResult:
    """Simulate a ``kind: pipedream`` scenario (see ``sim.pipedream.runner``).

    A schedule that does not fit its devices is the scenario's fault, not a crash: the out-of-memory
    prediction (which names the device, stage, op and bytes) becomes an :class:`InputError` on the file.
    """
    from clustertwin.sim.pipedream.memory import PipelineOutOfMemory
    from clustertwin.sim.pipedream.runner import run as _run

    try:
        return _run(scenario, progress)
    except PipelineOutOfMemory as err:
        raise InputError(scenario.source, f"the schedule does not fit in device memory: {err}") from None
