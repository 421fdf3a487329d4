"""Per-worker slowdown factors from the Alibaba PAI mini-batch-time traces (see data/alibaba/PROVENANCE.md).

Each job has 10 workers; a worker's series, in sample order, divided by the job's median mini-batch time
gives its slowdown factor per (sampled) iteration: 1.0 is a typical iteration, 2.0 one twice as long.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from clustertwin.errors import InputError

ALIBABA_DIR = Path(__file__).resolve().parent / "data" / "alibaba"


@lru_cache(maxsize=8)
def job_factors(job: int, directory: str | None = None) -> tuple[tuple[float, ...], ...]:
    """Slowdown factors of job ``job`` (1-4): one tuple per worker, in the order of the trace's samples."""
    return trace_factors(Path(directory or ALIBABA_DIR) / f"job_{job}_norm.csv")


def trace_factors(path: Path) -> tuple[tuple[float, ...], ...]:
    """Slowdown factors of one trace file (columns ``worker``, ``time``, ``batch_time_norm``): one tuple
    per worker 0..W-1, each worker's times in ``time`` order divided by the trace's median.

    Bad input is an :class:`InputError` naming the file and line (the header is line 1): a missing
    column, a non-numeric or non-positive time, a worker id that is not a whole number, or a worker of
    0..max that has no sample (a straggler model needs every worker's series).
    """
    try:
        table = pd.read_csv(path, dtype=str, keep_default_na=False)
    except OSError as err:
        raise InputError(str(path), f"cannot read the straggler trace: {err.strerror or err}") from None
    missing = {"worker", "time", "batch_time_norm"} - set(table.columns)
    if missing:
        raise InputError(f"{path}:1", f"missing columns {sorted(missing)}")
    if table.empty:
        raise InputError(str(path), "the straggler trace has no rows")
    values = {}
    for column in ("worker", "time", "batch_time_norm"):
        parsed = pd.to_numeric(table[column], errors="coerce")
        bad = parsed.isna() | ~np.isfinite(parsed)
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise InputError(
                f"{path}:{row + 2}", f"column {column}: {table[column].iloc[row]!r} is not a number"
            )
        values[column] = parsed.to_numpy(dtype=float)
    batch = values["batch_time_norm"]
    if (batch <= 0).any():
        row = int(np.flatnonzero(batch <= 0)[0])
        raise InputError(
            f"{path}:{row + 2}", f"column batch_time_norm: {batch[row]:g} is not a positive time"
        )
    worker = values["worker"]
    if (worker < 0).any() or (worker != np.round(worker)).any():
        row = int(np.flatnonzero((worker < 0) | (worker != np.round(worker)))[0])
        raise InputError(
            f"{path}:{row + 2}", f"column worker: {table['worker'].iloc[row]!r} is not a worker id"
        )
    present = set(worker.astype(int).tolist())
    absent = sorted(set(range(max(present) + 1)) - present)
    if absent:
        raise InputError(
            str(path), f"workers {absent} have no samples (the trace has workers 0..{max(present)})"
        )
    median = float(np.median(batch))
    frame = pd.DataFrame({"worker": worker.astype(int), "time": values["time"], "factor": batch / median})
    return tuple(
        tuple(float(v) for v in rows["factor"])
        for _, rows in frame.sort_values(["worker", "time"]).groupby("worker")
    )
