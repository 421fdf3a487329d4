"""The sweep spec: a base scenario plus a grid of values, one simulation per grid point.

A spec file (``scenarios/sweeps/*.yaml``) says::

    name: gavel-fig9-quick
    scenario: ../gavel/continuous-single.yaml   # relative to the spec file
    set: [workload.generate.num_jobs=1500]      # overrides of every run
    grid:
      policies:                                  # named variants, each a list of overrides
        las-aware: [policy.params.aware=true]
        las-agnostic: [policy.params.aware=false]
      seeds: [0, 1, 2]                           # -> seed=...
      loads: [1, 2, 4, 6]                        # -> workload.generate.jobs_per_hour=... (Gavel)
      traces: [a.trace, b.trace]                 # -> workload.trace=... (relative to the spec file)
      mechanism.round_s: [120, 360]              # any scenario field -> its values
    report: {x: load, series: policy, metrics: [avg_jct_h]}

The grid is the cross product of every axis. Like scenario models, these forbid unknown fields and are
strict; :func:`load_sweep` reports errors as ``<file>:<line>: field ...: what was expected``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from clustertwin.errors import InputError

SWEEPS_DIR = Path(__file__).with_name("sweeps")

# The named axes and the scenario field each one sets; ``policies`` is a mapping of named override lists.
AXIS_FIELDS: dict[str, str] = {
    "seeds": "seed",
    "loads": "workload.generate.jobs_per_hour",
    "traces": "workload.trace",
}
# The column each named axis gets in the results table.
AXIS_COLUMNS: dict[str, str] = {"policies": "policy", "seeds": "seed", "loads": "load", "traces": "trace"}

_Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Grid(_Strict):
    """The axes of the sweep. ``overrides`` holds every other ``scenario.field: [values]`` axis."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)

    policies: dict[_Name, list[str]] | None = None
    seeds: list[Annotated[int, Field(ge=0)]] | None = None
    loads: list[Annotated[float, Field(gt=0, strict=False)]] | None = None
    traces: list[str] | None = None

    @field_validator("policies", "seeds", "loads", "traces")
    @classmethod
    def _not_empty(cls, values: Any) -> Any:
        if values is not None and not values:
            raise ValueError("no values, so the grid is empty")
        return values

    def axes(self) -> dict[str, list[Any]]:
        """Axis name -> values, in file order; ``policies`` values are the variant names."""
        axes: dict[str, list[Any]] = {}
        for name in ("policies", "seeds", "loads", "traces"):
            value = getattr(self, name)
            if value is not None:
                axes[name] = list(value)
        for key, values in (self.model_extra or {}).items():
            axes[key] = list(values)
        return axes


class Report(_Strict):
    """How ``clustertwin report`` plots the sweep: ``metrics`` against column ``x``, one line per
    value of ``series`` (default: every other axis but seeds), mean over seeds with a ±1 sd bar."""

    x: str | None = None  # a column of the results table; default: load, else the first numeric axis
    series: list[str] | None = None
    metrics: list[str] | None = None  # default: avg_jct_h when present, else every metric
    log_y: bool = False


class SweepSpec(_Strict):
    name: _Name
    description: str = ""
    scenario: str  # relative to the spec file
    set: list[str] = Field(default_factory=list)
    grid: Grid
    report: Report = Report()

    @field_validator("grid")
    @classmethod
    def _grid_axes(cls, grid: Grid) -> Grid:
        for key, values in (grid.model_extra or {}).items():
            if not _is_key(key):
                raise ValueError(f"grid axis {key!r} is not a scenario field such as mechanism.round_s")
            if not isinstance(values, list):
                raise ValueError(f"grid axis {key!r} must be a list of values; got {type(values).__name__}")
        for name, values in grid.axes().items():
            if not values:
                raise ValueError(f"grid axis {name!r} has no values, so the grid is empty")
        if not grid.axes():
            raise ValueError(
                "the grid has no axes; give at least one of policies, seeds, loads, traces or a field"
            )
        return grid


def _is_key(key: str) -> bool:
    return re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*", key) is not None


def load_sweep(path: str | Path) -> tuple[SweepSpec, dict[tuple[str | int, ...], int]]:
    """Read and validate a sweep spec; also return the line of every field (for later errors)."""
    from clustertwin.scenarios.load import _explain, _parse

    source = Path(path)
    label = str(source)
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as err:
        raise InputError(label, f"cannot read the sweep spec: {err.strerror or err}") from None
    data, lines = _parse(text, label)
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as err:
        raise _explain(err, data, lines, label, {}, SweepSpec) from None
    return spec, lines
