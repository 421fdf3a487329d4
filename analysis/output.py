"""A run's output folder: summary.json, one Parquet file per event table, and PNG plots.

Writing is atomic. Everything, plots included, is built in a hidden sibling folder and renamed into place
at the end, so a crash at any point leaves either the previous result or nothing under the folder's name,
never a half-written folder that looks complete. Rerunning into a run folder replaces the run's own files
(summary, tables, plots) and keeps whatever else a user put there (notes, reports, comparisons). Hidden
folders that a killed write left beside the run are cleared by the next write of that run.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from clustertwin.scenarios.results import RunResult

from clustertwin.errors import InputError

SUMMARY = "summary.json"
FORMAT_VERSION = 1

# Distributions whose versions can change a result; those not installed are left out.
_VERSIONED = (
    "clustertwin", "numpy", "scipy", "pandas", "pyarrow", "simpy", "highspy", "cvxpy", "clarabel",
    "pydantic", "matplotlib", "torch",
)  # fmt: skip


def write_run(
    out_dir: Path,
    *,
    scenario: dict[str, Any],
    seed: int,
    backend: str,
    result: RunResult,
    metrics: dict[str, float],
    plot: Callable[[Path], object] | None = None,
) -> Path:
    """Write a complete run folder at ``out_dir`` (replacing an earlier run there) and return it.

    ``metrics`` must be flat: name -> number. NaN values are written as JSON null. ``plot(folder)`` draws
    the kind's PNGs from the written tables before the folder is published.
    """
    bad = {k: v for k, v in metrics.items() if not isinstance(v, int | float | np.number)}
    if bad:
        raise ValueError(f"metrics must map names to numbers; not numbers: {bad}")
    out_dir = Path(out_dir).absolute()
    ensure_replaceable(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    _recover(out_dir)
    # Not tempfile.mkdtemp: its folder is private (0700) and would stay so after the rename.
    staging = out_dir.with_name(f".{out_dir.name}.writing-{os.getpid()}-{time.time_ns()}")
    staging.mkdir()
    try:
        for name, table in result.tables.items():
            table.to_parquet(staging / f"{name}.parquet", index=False)
        summary = {
            "format": FORMAT_VERSION,
            "scenario": scenario,
            "seed": seed,
            "backend": backend,
            "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
            "versions": _versions(),
            "run": result.info,
            "tables": {name: len(table) for name, table in result.tables.items()},
            "metrics": metrics,
        }
        text = json.dumps(_jsonable(summary), indent=2, allow_nan=False)
        (staging / SUMMARY).write_text(text + "\n", encoding="utf-8")
        if plot is not None:
            plot(staging)
        _move_into_place(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out_dir


def read_run(run_dir: Path) -> tuple[dict[str, Any], RunResult]:
    """The summary and the event tables of a run folder written by :func:`write_run`."""
    run_dir = Path(run_dir)
    try:
        summary = json.loads((run_dir / SUMMARY).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(str(run_dir), f"not a clustertwin run folder (no {SUMMARY})") from None
    except (OSError, ValueError) as err:
        raise InputError(str(run_dir / SUMMARY), f"cannot read the run summary: {err}") from None
    tables = {path.stem: pd.read_parquet(path) for path in sorted(run_dir.glob("*.parquet"))}
    return summary, RunResult(tables=tables, info=summary.get("run", {}))


def ensure_writable(out_dir: Path) -> None:
    """Refuse an output folder that cannot be created or written, before any work is done: the nearest
    existing ancestor must be a writable folder."""
    out_dir = Path(out_dir).absolute()
    existing = next(p for p in (out_dir, *out_dir.parents) if p.exists())
    if not existing.is_dir():
        raise InputError(str(existing), "the output path runs through a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(str(out_dir), f"cannot write here: {existing} is not writable")


def ensure_replaceable(out_dir: Path) -> None:
    """Refuse an output folder that cannot be written or holds something other than an earlier run, since
    writing a run replaces the run's files there. Call it before a long run to fail before the work."""
    out_dir = Path(out_dir)
    ensure_writable(out_dir.absolute().parent)  # replacing the folder renames it within its parent
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise InputError(str(out_dir), "the output path exists and is not a folder")
    if any(out_dir.iterdir()) and not (out_dir / SUMMARY).is_file():
        raise InputError(
            str(out_dir),
            f"the output folder exists and is not a clustertwin run (no {SUMMARY}); it would be"
            " replaced, so choose another --out",
        )


def is_run_file(path: Path) -> bool:
    """Whether ``path`` (inside a run folder) is one of the files a run writes."""
    return path.name == SUMMARY or path.suffix in (".parquet", ".png")


def _move_into_place(staging: Path, out_dir: Path) -> None:
    if not out_dir.exists():
        staging.rename(out_dir)
        return
    # Two renames: the old run stays whole under a hidden name until the new one is in place.
    aside = out_dir.with_name(f".{out_dir.name}.old-{time.time_ns()}")
    out_dir.rename(aside)
    try:
        staging.rename(out_dir)
    except BaseException:
        aside.rename(out_dir)
        raise
    _keep_foreign(aside, out_dir)


def _keep_foreign(aside: Path, out_dir: Path) -> None:
    """Move what a user added to the old folder into the new run, then drop the old run's own files."""
    for entry in aside.iterdir():
        if not is_run_file(entry) and not (out_dir / entry.name).exists():
            entry.rename(out_dir / entry.name)
    shutil.rmtree(aside, ignore_errors=True)


def _recover(out_dir: Path) -> None:
    """Clear what a killed write of ``out_dir`` left beside it.

    A staging folder (``.NAME.writing-PID-…``) whose process is gone is half-written: removed. An old run
    set aside (``.NAME.old-…``) is restored when the new run never arrived, and otherwise gives the new run
    the user's files it still holds.
    """
    for staging in out_dir.parent.glob(f".{out_dir.name}.writing-*"):
        pid = staging.name.rsplit(".writing-", 1)[1].split("-", 1)[0]
        if not (pid.isdigit() and _alive(int(pid))):
            shutil.rmtree(staging, ignore_errors=True)
    for aside in sorted(out_dir.parent.glob(f".{out_dir.name}.old-*")):
        if out_dir.exists():
            _keep_foreign(aside, out_dir)
        else:
            aside.rename(out_dir)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in _VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def _jsonable(value: Any) -> Any:
    """Plain JSON values: numpy scalars become Python numbers and NaN/inf become null."""
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value
