"""A run's output folder: summary.json, one Parquet file per event table, and PNG plots.

Writing is atomic (``clustertwin.atomic.write_folder``). Everything, plots included, is built in a hidden
sibling folder and renamed into place at the end, so a crash at any point leaves either the previous result
or nothing under the folder's name, never a half-written folder that looks complete. Rerunning into a run
folder replaces the run's own files (summary, tables, plots) and keeps whatever else a user put there
(notes, reports, comparisons). Hidden folders that a killed write left beside the run are cleared by the
next write of that run.
"""

from __future__ import annotations

import json
import math
import os
import platform
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from clustertwin.scenarios.results import RunResult

from clustertwin.atomic import write_folder
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

    def fill(staging: Path) -> None:
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

    return write_folder(out_dir, fill, keep=lambda entry: not is_run_file(entry))


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
