"""Headline metrics of a Gavel-level run, computed from its event tables ([Narayanan], §5.6).

Job completion time (JCT) is measured on the jobs in the steady-state window only, as the paper does
(jobs 4000-5000 of its long traces); everything else covers the whole run. A metric that has no data
(no job finished, say) is NaN rather than absent, so every run has the same keys.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from clustertwin.scenarios.results import RunResult


def gavel_metrics(
    result: RunResult, cluster_gpus: dict[str, int], prices: dict[str, float] | None = None
) -> dict[str, float]:
    """Flat metrics: JCT statistics over the window, makespan, utilisation (overall and per worker
    type, and the spread max/min of the per-type figures), cost when ``prices`` ($/GPU-hour) are given, SLO
    violations (count and fraction of the window's jobs with an SLO), the average JCT of high- and
    low-priority jobs, and round count."""
    jobs = result.tables["jobs"]
    rounds = result.tables["rounds"]
    completed = jobs["completion_s"].notna()
    window = jobs["in_window"].to_numpy(dtype=bool)
    jct = (jobs["completion_s"] - jobs["arrival_s"])[window & completed].to_numpy()

    metrics: dict[str, float] = {
        "jobs_total": len(jobs),
        "jobs_completed": int(completed.sum()),
        "jobs_in_window": int(window.sum()),
        "jobs_window_unfinished": int((window & ~completed).sum()),
        "avg_jct_s": _stat(np.mean, jct),
        "median_jct_s": _stat(np.median, jct),
        "p90_jct_s": _stat(np.percentile, jct, 90),
        "p99_jct_s": _stat(np.percentile, jct, 99),
    }
    metrics["avg_jct_h"] = metrics["avg_jct_s"] / 3600.0
    # §5.7.3 "LAS with Priorities": high-priority jobs are those with a weight above 1.
    weight = jobs["weight"].to_numpy(dtype=float)[window & completed]
    metrics["avg_jct_high_priority_s"] = _stat(np.mean, jct[weight > 1])
    metrics["avg_jct_low_priority_s"] = _stat(np.mean, jct[weight <= 1])
    makespan = float(jobs["completion_s"].max() - jobs["arrival_s"].min()) if completed.any() else math.nan
    metrics["makespan_s"] = makespan

    busy = busy_gpu_seconds(rounds)
    capacity = sum(cluster_gpus.values()) * makespan
    metrics["utilisation"] = float(busy.sum()) / capacity if capacity > 0 else math.nan
    for worker_type, count in cluster_gpus.items():
        if count > 0:
            type_capacity = count * makespan
            used = float(busy.get(worker_type, 0.0))
            metrics[f"utilisation_{worker_type}"] = used / type_capacity if type_capacity > 0 else math.nan
    per_type = [metrics[f"utilisation_{t}"] for t, count in cluster_gpus.items() if count > 0]
    # How unevenly the types are used: 1 when every type is equally busy.
    metrics["utilisation_spread"] = (
        max(per_type) / min(per_type) if per_type and min(per_type) > 0 else math.nan
    )
    if prices is not None:
        metrics["cost_usd"] = sum(float(busy.get(t, 0.0)) * price / 3600.0 for t, price in prices.items())

    metrics["slo_violations"] = _slo_violations(jobs[window], _run_end(result))
    with_slo = int(np.isfinite(jobs["slo_deadline_s"].to_numpy(dtype=float)[window]).sum())
    metrics["slo_violation_fraction"] = metrics["slo_violations"] / with_slo if with_slo else math.nan
    metrics["num_rounds"] = int(rounds["round"].nunique())
    return metrics


def owns_gpus(rounds: pd.DataFrame) -> pd.Series:
    """Rows that count their GPUs as busy. Two jobs sharing GPUs have a row each; their GPUs are
    counted once, on the row of the lower job id."""
    return (rounds["shared_with"] < 0) | (rounds["job_id"] < rounds["shared_with"])


def busy_gpu_seconds(rounds: pd.DataFrame) -> pd.Series:
    """GPU-seconds in use per worker type."""
    counted = owns_gpus(rounds)
    gpu_seconds = (rounds["end_s"] - rounds["start_s"]) * rounds["num_gpus"]
    return gpu_seconds[counted].groupby(rounds["worker_type"][counted]).sum()


def _stat(func, values: np.ndarray, *args: float) -> float:
    return float(func(values, *args)) if len(values) else math.nan


def _run_end(result: RunResult) -> float:
    """The last time any table mentions: when the run stopped observing."""
    times = [
        result.tables["rounds"]["end_s"].max(),
        result.tables["events"]["time_s"].max(),
        result.tables["jobs"]["completion_s"].max(),
        result.tables["jobs"]["arrival_s"].max(),
    ]
    return float(max((t for t in times if pd.notna(t)), default=math.nan))


def _slo_violations(jobs: pd.DataFrame, run_end: float) -> int:
    """Jobs that finished after their deadline, or were unfinished when the run ended past it."""
    deadline = jobs["slo_deadline_s"]
    finish = jobs["completion_s"]
    late = np.isfinite(deadline) & (finish > deadline)
    overdue = np.isfinite(deadline) & finish.isna() & (run_end > deadline)
    return int((late | overdue).sum())
