"""The real-runtime twin: the same policies driving real training on torch.distributed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from scenarios.results import RunResult
from scenarios.schema import Scenario


def run_scenario(
    scenario: Scenario,
    progress: Callable[[float, str], None] | None = None,
    workdir: Path | None = None,
    snapshot_dir: Path | None = None,
) -> RunResult:
    """Run a scenario for real and return the same event tables the simulator writes.

    ``snapshot_dir`` receives the tables so far after every round (a killed run keeps what it finished).
    """
    if scenario.kind == "gavel":
        from runtime import gavel

        return gavel.run(scenario, progress, workdir, snapshot_dir)
    raise NotImplementedError(f"no real runtime for scenario kind {scenario.kind!r} yet")
