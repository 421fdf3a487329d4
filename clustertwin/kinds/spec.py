"""What one scenario kind is: a :class:`KindSpec` holds everything the command line, the Python API,
reports, sweeps and the fidelity suite need of it, so none of them names a kind.

A spec is built when its module is imported, which must stay cheap (``validate`` imports every kind):
callables import their simulator, runtime and plotting modules when they are called.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from clustertwin.scenarios.kinds import PathFields

if TYPE_CHECKING:
    from clustertwin.scenarios.results import RunResult

Progress = Callable[[float, str], None]
Emit = Callable[[str, object], None]


@dataclass(frozen=True)
class Compared:
    """A simulated run folder set against a real one.

    ``headline`` is printed as ``key=value`` lines; ``pairs`` maps metric names to their (sim, real)
    values, the rows of the fidelity suite; ``details`` is a rich renderable printed after the
    headline, or None."""

    headline: dict[str, float | int]
    pairs: dict[str, tuple[float, float]]
    details: Any = None


@dataclass(frozen=True)
class Comparison:
    """How a kind compares a simulation with reality: ``compare(sim_dir, real_dir, out)`` writes
    ``out/compare.json`` (what ``clustertwin report`` shows) with any further files, and returns the
    figures; ``metrics`` names the metrics whose pairs it gives."""

    metrics: tuple[str, ...]
    compare: Callable[[Path, Path, Path], Compared]


@dataclass(frozen=True)
class Reproduce:
    """Claim sets checked by ``clustertwin reproduce NAME``: ``names()`` lists them (they may be data
    files); ``run(name, quick, out=..., workers=...)`` runs one and returns the exit status (1: a claim
    failed)."""

    names: Callable[[], Sequence[str]]
    run: Callable[..., int]


@dataclass(frozen=True)
class ProfileRequest:
    """``clustertwin profile``'s arguments: measure a scenario's jobs on its real workers."""

    scenario: str
    overrides: tuple[str, ...]
    out: Path | None
    seconds: float | None  # the length of a measured lease, or ``steps``
    steps: int | None
    repeats: int
    under_load: bool
    host: bool = False  # measure the host's cores together (cluster.host.efficiency) instead


@dataclass(frozen=True)
class KindSpec:
    """One scenario kind.

    - ``schema`` validates ``kind: <name>`` scenario files; ``path_fields`` are its fields holding file
      paths (see ``scenarios/kinds.py``).
    - ``check_tables`` raises ValueError when a run's tables break the kind's contract; ``metrics`` gives
      a run's flat metrics (name -> number) from the scenario and the run.
    - ``simulate(scenario, progress)`` and ``run_real(scenario, progress, snapshot_dir)`` return the
      event tables; None where the kind has no such backend (``no_simulator`` then says why, and what to
      use instead). A real run may write its tables so far into ``snapshot_dir`` as it goes.
    - ``check(scenario, backend)`` fails with InputError before any work starts (a policy that cannot
      be built, a section the backend needs); ``prepare(scenario)`` builds everything a simulation needs
      without running it (traces, tables, plans), so that ``validate`` finds what ``run`` would refuse.
    - ``plot(run_dir)`` draws a run folder's PNGs and returns their paths; ``summary(metrics, info)`` is
      the rich table printed after a run (default: every metric).
    - ``comparison``, ``reproduce``, ``profile`` (calibration: measure on real workers) and ``bench``
      (speed figures through ``emit(key, value)``) are None where the kind has none.
    - ``real_registries`` are the modules (needing torch) whose import registers the families a real run
      draws from (models, data sets); ``clustertwin list`` imports them when torch is installed.
    """

    name: str
    description: str
    schema: type[BaseModel]
    check_tables: Callable[[RunResult], None]
    metrics: Callable[[Any, RunResult], dict[str, float]]
    path_fields: PathFields = field(default_factory=dict)
    simulate: Callable[[Any, Progress | None], RunResult] | None = None
    no_simulator: str = ""
    run_real: Callable[[Any, Progress | None, Path | None], RunResult] | None = None
    # Continue a real run killed part-way from the journal in its snapshot folder (None: not resumable).
    resume_real: Callable[[Any, Progress | None, Path | None], RunResult] | None = None
    check: Callable[[Any, str], None] | None = None
    prepare: Callable[[Any], object] | None = None
    plot: Callable[[Path], list[Path]] | None = None
    summary: Callable[[dict[str, float], dict[str, Any]], Any] | None = None
    comparison: Comparison | None = None
    reproduce: Reproduce | None = None
    profile: Callable[[ProfileRequest], int] | None = None
    bench: Callable[[Emit], None] | None = None
    real_registries: tuple[str, ...] = ()
    bench_scale: Callable[[Emit], None] | None = None  # ``bench NAME --scale``: past the paper's sizes


def lazy(target: str) -> Callable[..., Any]:
    """The function ``module:name``, imported when it is first called (so a spec imports nothing heavy)."""
    module, _, name = target.partition(":")

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__qualname__ = call.__name__ = target
    return call


def result_metrics(target: str) -> Callable[[Any, RunResult], dict[str, float]]:
    """Metrics that need the run's tables only: ``module:function`` of the result, imported lazily."""
    function = lazy(target)
    return lambda _scenario, result: function(result)


def metric_comparison(*metrics: str) -> Comparison:
    """A comparison by the runs' headline metrics: each metric's simulated and real value and error."""

    def compare(sim_dir: Path, real_dir: Path, out: Path) -> Compared:
        from rich.table import Table

        from clustertwin.analysis.compare import compare_summaries

        figures = compare_summaries(sim_dir, real_dir, metrics, out)
        table = Table("metric", "sim", "real", "error")
        for name in metrics:
            error = figures[f"{name}_error"]
            table.add_row(
                name, f"{figures[f'{name}_sim']:.6g}", f"{figures[f'{name}_real']:.6g}", f"{error:+.1%}"
            )
        headline = {key: value for key, value in figures.items() if key not in ("sim_dir", "real_dir")}
        pairs = {name: (figures[f"{name}_sim"], figures[f"{name}_real"]) for name in metrics}
        return Compared(headline, pairs, table)

    return Comparison(tuple(metrics), compare)
