"""Runners for sweep tests: they run in Ray worker processes, so they live in an importable module
(tests/ is on the workers' path, as it is on the driver's)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from clustertwin.sweep import simulate


class CountingRunner:
    """The real simulation, leaving one marker file per call in ``marks`` (so a test can count the runs
    that actually executed); a heterogeneity-aware run with seed ``crash_seed`` kills its own worker."""

    def __init__(self, marks: Path, crash_seed: int | None = None) -> None:
        self.marks = str(marks)
        self.crash_seed = crash_seed

    def __call__(self, scenario) -> dict[str, float]:
        label = f"seed{scenario.seed}-{scenario.policy.params.get('aware')}"
        Path(self.marks, f"{label}-{uuid.uuid4().hex[:8]}").touch()
        if scenario.seed == self.crash_seed and scenario.policy.params.get("aware"):
            os._exit(3)  # no exception, no clean-up: the worker process is gone
        return simulate(scenario)


def marks(folder: Path) -> list[str]:
    return sorted(p.name.rsplit("-", 1)[0] for p in folder.iterdir())
