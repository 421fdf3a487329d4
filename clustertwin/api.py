"""The Python API: load a scenario, run it in simulation or for real, get its tables and metrics.

What ``clustertwin run`` does, for notebooks and scripts (the command line calls :func:`run` too)::

    import clustertwin

    out = clustertwin.run("scenarios/gavel-default.yaml", overrides=["seed=3"])
    out.tables["jobs"].head(), out.metrics["avg_jct_s"]

Bad input raises :class:`~clustertwin.errors.InputError` naming the file and the field.
"""

from __future__ import annotations

import importlib.util
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clustertwin.errors import InputError
from clustertwin.kinds import KindSpec, Progress, get_kind
from clustertwin.kinds import kinds as _kinds
from clustertwin.scenarios.load import load_scenario

if TYPE_CHECKING:
    import pandas as pd
    from pydantic import BaseModel

    from clustertwin.scenarios.results import RunResult

BACKENDS = ("sim", "real")
# A backend of a kind, called as (scenario, progress, snapshot_dir).
Executor = Callable[[Any, Progress | None, Path | None], "RunResult"]


@dataclass(frozen=True)
class RunOutput:
    """A finished run: its event tables, its flat metrics, facts about the run (``info``: wall time,
    rounds, ...) and the run folder, when one was written."""

    kind: str
    scenario: BaseModel
    tables: dict[str, pd.DataFrame]
    metrics: dict[str, float]
    info: dict[str, Any]
    folder: Path | None = None


def load(path: str | Path | None = None, overrides: Sequence[str] = ()) -> Any:
    """A validated scenario (``None``: the bundled default); ``overrides`` are ``key.sub=value`` strings
    as with ``--set``."""
    return load_scenario(path, overrides)


def kinds() -> list[KindSpec]:
    """Every registered scenario kind."""
    return _kinds()


def simulate(scenario: Any, progress: Progress | None = None) -> RunResult:
    """Simulate a loaded scenario and return its event tables (nothing is checked or written)."""
    return _executor(scenario, "sim")(scenario, progress, None)


def run_real(scenario: Any, progress: Progress | None = None, snapshot_dir: Path | None = None) -> RunResult:
    """Run a loaded scenario for real and return its event tables; ``snapshot_dir`` receives the tables
    so far as the run goes, where the kind writes any."""
    return _executor(scenario, "real")(scenario, progress, snapshot_dir)


def run(
    path: str | Path | None = None,
    backend: str = "sim",
    overrides: Sequence[str] = (),
    out: str | Path | None = None,
    progress: Progress | None = None,
    *,
    scenario: Any = None,
    plots: bool = True,
    resume: bool = False,
) -> RunOutput:
    """Run a scenario file (or a ``scenario`` from :func:`load`) with ``backend`` "sim" or "real".

    Every input check runs before any work starts. With ``out`` the run folder is written there
    (summary.json, one Parquet file per table, the kind's plots unless ``plots`` is false); a real run
    keeps its tables so far in ``<out>.partial`` until then, and with ``resume`` continues from the
    journal there (a kind whose real runs resume). ``progress(fraction, text)`` is called as the run
    goes.
    """
    from clustertwin.solver_banner import silence_solver_banner

    silence_solver_banner()  # HiGHS's licence banner would land in the caller's output
    if scenario is None:
        scenario = load(path, overrides)
    elif path is not None or overrides:
        raise ValueError("give a scenario file (and overrides) or a loaded scenario, not both")
    spec = get_kind(scenario.kind)
    execute = _executor(scenario, backend)
    if spec.check is not None:
        spec.check(scenario, backend)
    folder = Path(out) if out is not None else None
    if folder is not None:
        from clustertwin.analysis.output import ensure_replaceable

        ensure_replaceable(folder)
    partial = folder.with_name(folder.name + ".partial") if folder is not None and backend == "real" else None

    if resume:
        if backend != "real" or spec.resume_real is None or partial is None:
            raise InputError(
                "--resume", "resumes a real run of a kind that journals it (gavel), with its --out folder"
            )
        resume_real = spec.resume_real
        execute = lambda s, p, d: resume_real(s, p, d)  # noqa: E731
    started = time.perf_counter()
    result = execute(scenario, progress, partial)
    result.info.setdefault("wall_s", time.perf_counter() - started)
    spec.check_tables(result)
    metrics = spec.metrics(scenario, result)
    if folder is not None:
        from clustertwin.analysis.output import write_run
        from clustertwin.scenarios.load import scenario_to_dict

        folder = write_run(
            folder,
            scenario=scenario_to_dict(scenario),
            seed=scenario.seed,
            backend=backend,
            result=result,
            metrics=metrics,
            plot=spec.plot if plots else None,
        )
        if partial is not None and partial.exists():  # the complete folder holds all the snapshots did
            shutil.rmtree(partial)
    return RunOutput(spec.name, scenario, dict(result.tables), metrics, dict(result.info), folder)


def _executor(scenario: Any, backend: str) -> Executor:
    """The kind's function for ``backend``, called as ``(scenario, progress, snapshot_dir)``; a backend
    the kind does not have is an InputError."""
    spec = get_kind(scenario.kind)
    if backend == "sim":
        simulate = spec.simulate
        if simulate is None:
            raise InputError(
                f"{scenario.source}: field kind", spec.no_simulator or f"kind {spec.name} has no simulator"
            )
        return lambda s, progress, _snapshot_dir: simulate(s, progress)
    if backend == "real":
        if spec.run_real is None:
            raise InputError(scenario.source, f"--backend real is not available for kind {spec.name} yet")
        if importlib.util.find_spec("torch") is None:
            raise InputError(
                f"{scenario.source}: --backend real",
                "real runs need torch, which is not installed: pip install 'clustertwin[runtime]'",
            )
        return spec.run_real
    raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}")
