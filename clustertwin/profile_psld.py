"""``clustertwin profile SCENARIO`` for kind psld: a short real profiling run of the scenario's set-up,
whose measurements (``runtime.psld.calibrate``) are written to a calibration file that the scenario's
simulation then takes (``calibration:``, ``scenarios.psld_calibration``).

The profiling run is the scenario for real without its stragglers, planned removals or regimes, on
PSLD's initial layout with the scheduler never acting (``calibrate.PROFILE``), for ``--seconds``. With
``real.model`` set it trains that network on the run's device, so the simulated worker computes as long
as the real network's forward and backward pass took there; nothing is fitted to the run it predicts.
"""

from __future__ import annotations

import json
import math
import os
import platform
from pathlib import Path

from rich.console import Console
from rich.table import Table

from clustertwin.atomic import write_text
from clustertwin.errors import InputError
from clustertwin.kinds.spec import ProfileRequest
from clustertwin.progress import progress_bar
from clustertwin.scenarios.load import load_scenario
from clustertwin.scenarios.psld_calibration import calibration_yaml


def default_output(scenario: str | Path) -> Path:
    """``<scenario-stem>.calibration.yaml`` beside the scenario."""
    path = Path(scenario)
    return path.with_name(f"{path.stem}.calibration.yaml")


def profile_psld(request: ProfileRequest) -> int:
    """Profile, write the calibration file, print what was measured and how to use it."""
    from clustertwin.analysis.psld_metrics import window_rate
    from clustertwin.runtime.psld.calibrate import PROFILE, calibrate
    from clustertwin.runtime.psld.run import check_real, run_real

    if request.host:
        raise InputError("--host", "a PSLD profile measures the parameter-server job; leave --host out")
    if request.steps is not None:
        raise InputError(f"--steps {request.steps}", "a PSLD profiling run lasts --seconds, not steps")
    if request.repeats != 1 or request.under_load:
        raise InputError("--repeats / --under-load", "a PSLD profile is one run of every process at once")
    seconds = float(request.seconds or 10.0)
    scenario = load_scenario(request.scenario, request.overrides)
    warmup = min(scenario.warmup_s, seconds / 2)
    timing = [f"duration_s={seconds}", f"warmup_s={warmup}"]
    profiling = load_scenario(request.scenario, [*request.overrides, *PROFILE, *timing])
    check_real(profiling)
    out = request.out or default_output(request.scenario)
    with progress_bar(f"profiling {scenario.name}") as progress:
        result = run_real(profiling, None, progress)
    cal = calibrate(result)
    rate = window_rate(result.tables["iterations"], warmup, math.inf)
    profile = {
        "scenario": str(request.scenario),
        "overrides": [*request.overrides, *PROFILE, *timing],
        "iterations": int(result.info["iterations_run"]),
        "iterations_per_s": float(rate),
        "host": {"cpus": os.cpu_count(), "machine": platform.node(), "load_average": _load()},
    }
    details = json.loads(json.dumps(cal.as_dict()))  # tuples as lists, for YAML
    details.pop("overrides")
    write_text(out, calibration_yaml(scenario, cal.values(), details, profile))
    table = Table(title=f"calibration of {scenario.name} ({seconds:g} s profiling run, {rate:.3g} it/s)")
    table.add_column("simulator field")
    table.add_column("measured", justify="right")
    for key, value in cal.values().items():
        table.add_row(key, f"{value:.4g}")
    Console().print(table)
    print(out)
    given = "".join(f" --set {o}" for o in request.overrides)
    print(f"simulate with it: clustertwin run {request.scenario}{given} --set calibration={out}")
    return 0


def _load() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []
