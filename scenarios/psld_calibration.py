"""A PSLD scenario's calibration file: the simulator parameters a real profiling run measured
(``clustertwin profile``; ``runtime.psld.calibrate``), named by the scenario's ``calibration`` field.

The file records the set-up it was measured on (``measured_for``: the real network, its data set and
batch, the workers' device, the cluster's size and the PS mode) and the scenario fields the measurement
sets (``overrides``: ``cluster.*`` and ``costs.*``, among them the real network's compute per
iteration, ``costs.worker_compute_s``). A simulation applies them over the scenario's own values; a file
measured on another set-up is refused by name, since its compute time belongs to another network, batch
or device. The real backend does not read the file: it measures itself.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml
from clustertwin.scenarios.psld_schema import PSCosts, PSLDCluster, PSLDScenario
from pydantic import BaseModel, ConfigDict, ValidationError

from clustertwin.errors import InputError

KIND = "psld-calibration"
SECTIONS: dict[str, type[BaseModel]] = {"cluster": PSLDCluster, "costs": PSCosts}
# what the simulation of a real.model scenario would price wrongly from a file of another set-up
IDENTITY = ("real_model", "data", "device", "gradient", "batch_size", "workers", "servers", "mode")


class CalibrationFile(BaseModel):
    """What ``clustertwin profile`` writes for a PSLD scenario."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    measured_for: dict[str, Any]
    overrides: dict[str, float]
    calibration: dict[str, Any] = {}
    profile: dict[str, Any] = {}


def measured_for(scenario: PSLDScenario) -> dict[str, Any]:
    """The set-up a calibration of ``scenario`` measures (``IDENTITY``)."""
    from clustertwin.traces.psld_models import psld_model

    real = scenario.real
    return {
        "real_model": real.model,
        "data": real.data,
        "device": real.device,
        "gradient": "model" if real.model else real.gradient,
        "batch_size": psld_model(scenario.model, scenario.batch_size, scenario.compute_scale).batch_size,
        "workers": scenario.cluster.workers,
        "servers": scenario.cluster.servers,
        "mode": scenario.mode,
    }


def calibration_yaml(
    scenario: PSLDScenario, overrides: dict[str, float], calibration: dict[str, Any], profile: dict[str, Any]
) -> str:
    """The file's text; ``overrides`` maps ``section.field`` to its measured value."""
    body = CalibrationFile(
        kind=KIND,
        measured_for=measured_for(scenario),
        overrides={k: float(v) for k, v in overrides.items()},
        calibration=calibration,
        profile=profile,
    )
    head = (
        "# PSLD simulator parameters measured on a real profiling run (clustertwin profile); a scenario\n"
        '# names this file as `calibration:` (docs/algorithms/psld.md, "Calibration")\n'
    )
    return head + yaml.safe_dump(body.model_dump(), sort_keys=False)


def load_calibration(path: str | Path) -> CalibrationFile:
    """Read a calibration file; ``InputError`` naming the file for what is not one."""
    where = f"{path}"
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise InputError(where, f"cannot read the calibration file ({err.strerror or err})") from None
    except yaml.YAMLError as err:
        raise InputError(where, f"not YAML: {err}") from None
    try:
        found = CalibrationFile.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(x) for x in first["loc"]) or "(file)"
        raise InputError(f"{where}: field {field}", first["msg"]) from None
    if found.kind != KIND:
        raise InputError(f"{where}: field kind", f"{found.kind!r}: not a PSLD calibration ({KIND})")
    for key, value in found.overrides.items():
        section, _, name = key.partition(".")
        if section not in SECTIONS or name not in SECTIONS[section].model_fields:
            raise InputError(f"{where}: field overrides.{key}", "not a cluster.* or costs.* field of PSLD")
        if not math.isfinite(value):
            raise InputError(f"{where}: field overrides.{key}", f"{value} is not a finite number")
    return found


def calibrated(scenario: PSLDScenario) -> PSLDScenario:
    """``scenario`` with its calibration file's values applied (itself when it names none).

    ``InputError`` naming the scenario's ``calibration`` field when the file was measured on another
    set-up (``IDENTITY``)."""
    if scenario.calibration is None:
        return scenario
    found = load_calibration(scenario.calibration)
    mine = measured_for(scenario)
    differ = [k for k in IDENTITY if found.measured_for.get(k) != mine[k]]
    if differ:
        what = ", ".join(f"{k} {found.measured_for.get(k)!r} (the scenario: {mine[k]!r})" for k in differ)
        raise InputError(
            f"{scenario.source}: field calibration",
            f"{scenario.calibration} was measured on another set-up: {what}; profile this one"
            " (clustertwin profile SCENARIO --set ...)",
        )
    update: dict[str, Any] = {}
    for section, schema in SECTIONS.items():
        values = {k.partition(".")[2]: v for k, v in found.overrides.items() if k.startswith(section + ".")}
        if values:
            current = getattr(scenario, section).model_dump()
            try:
                update[section] = schema.model_validate({**current, **values})
            except ValidationError as err:
                first = err.errors()[0]
                field = ".".join(str(x) for x in first["loc"])
                raise InputError(
                    f"{scenario.calibration}: field overrides.{section}.{field}", first["msg"]
                ) from None
    return scenario.model_copy(update=update)


__all__ = ["IDENTITY", "KIND", "CalibrationFile", "calibrated", "calibration_yaml", "load_calibration"]
