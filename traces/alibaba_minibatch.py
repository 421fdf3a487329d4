"""Per-worker slowdown factors from the Alibaba PAI mini-batch-time traces (see data/alibaba/PROVENANCE.md).

Each job has 10 workers; a worker's series, in sample order, divided by the job's median mini-batch time
gives its slowdown factor per (sampled) iteration: 1.0 is a typical iteration, 2.0 one twice as long.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

ALIBABA_DIR = Path(__file__).resolve().parent / "data" / "alibaba"


@lru_cache(maxsize=8)
def job_factors(job: int, directory: str | None = None) -> tuple[tuple[float, ...], ...]:
    """Slowdown factors of job ``job`` (1-4): one tuple per worker, in the order of the trace's samples."""
    path = Path(directory or ALIBABA_DIR) / f"job_{job}_norm.csv"
    table = pd.read_csv(path, index_col=0)
    missing = {"worker", "time", "batch_time_norm"} - set(table.columns)
    if missing:
        raise ValueError(f"{path}: missing columns {sorted(missing)}")
    median = float(np.median(table["batch_time_norm"]))
    if median <= 0:
        raise ValueError(f"{path}: non-positive median mini-batch time")
    series = []
    for _, rows in table.sort_values(["worker", "time"]).groupby("worker", sort=True):
        values = rows["batch_time_norm"].to_numpy(dtype=float) / median
        series.append(tuple(float(v) for v in np.maximum(values, 1e-3)))
    return tuple(series)
