"""The real-runtime twin: the same policies driving real training on torch.distributed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from clustertwin.scenarios.kinds import AnyScenario
from clustertwin.scenarios.results import RunResult


def run_scenario(
    scenario: AnyScenario,
    progress: Callable[[float, str], None] | None = None,
    workdir: Path | None = None,
    snapshot_dir: Path | None = None,
) -> RunResult:
    """Run a scenario for real and return the same event tables the simulator writes.

    ``snapshot_dir`` receives the tables so far after every round (a killed run keeps what it finished).
    """
    if scenario.kind == "gavel":
        from clustertwin.runtime.gavel import run as gavel

        return gavel.run(scenario, progress, workdir, snapshot_dir)
    if scenario.kind == "flexrr":
        import os
        import tempfile

        from clustertwin.runtime.flexrr.launch import run_real

        from clustertwin.errors import InputError

        cores = os.cpu_count() or 1
        if scenario.cluster.workers > 2 * cores:
            raise InputError(
                f"{scenario.source}: field cluster",
                f"a real FlexRR run starts one process per worker: {scenario.cluster.workers} workers on"
                f" {cores} cores would measure the machine, not the algorithm; lower"
                " cluster.machines or cluster.workers_per_machine",
            )

        with tempfile.TemporaryDirectory(prefix="clustertwin-flexrr-") as tmp:
            return run_real(scenario, workdir or Path(tmp))[0]
    if scenario.kind == "psld":
        from clustertwin.runtime.psld.run import run_real as run_psld

        return run_psld(scenario, workdir, progress)
    if scenario.kind == "spot_real":
        import tempfile

        from clustertwin.runtime.spot import run_real as run_spot

        with tempfile.TemporaryDirectory(prefix="clustertwin-spot-") as tmp:
            return run_spot(scenario, workdir or Path(tmp), progress)
    raise NotImplementedError(f"no real runtime for scenario kind {scenario.kind!r} yet")
