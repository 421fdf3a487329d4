"""PNG plots of a Gavel-level run folder, re-creatable at any time from its Parquet tables.

Figures are built with matplotlib's object API (no pyplot), which renders PNG through Agg and keeps
no global state. Tables are aggregated with pandas first, so a million-row rounds table plots in about
a second.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from clustertwin.analysis.gavel_metrics import owns_gpus
from matplotlib.figure import Figure

from clustertwin.errors import InputError

_JOB_COLUMNS = ["job_id", "job_type", "arrival_s", "completion_s", "in_window"]
_ROUND_COLUMNS = ["round", "start_s", "end_s", "job_id", "worker_type", "num_gpus", "shared_with"]


def plot_run(run_dir: Path) -> list[Path]:
    """(Re)write the run's plots next to its tables and return their paths."""
    run_dir = Path(run_dir)
    if not (run_dir / "jobs.parquet").is_file() or not (run_dir / "rounds.parquet").is_file():
        raise InputError(str(run_dir), "no Gavel event tables (jobs.parquet, rounds.parquet) to plot")
    jobs = pd.read_parquet(run_dir / "jobs.parquet", columns=_JOB_COLUMNS)
    rounds = pd.read_parquet(run_dir / "rounds.parquet", columns=_ROUND_COLUMNS)
    scenario = _scenario(run_dir)
    name = scenario.get("name", run_dir.name)
    capacity = {t: n for t, n in scenario.get("cluster", {}).get("gpus", {}).items() if n > 0}
    # Every worker type of the cluster, used or not, with one colour in every figure.
    types = sorted(set(capacity) | set(rounds["worker_type"].unique()))

    figures = {
        "jct_cdf.png": _jct_cdf(jobs, name),
        "cluster_usage.png": _cluster_usage(jobs, rounds, types, capacity, name),
        "gpu_hours_by_job_type.png": _gpu_hours_by_job_type(jobs, rounds, types, name),
    }
    written = []
    for file_name, figure in figures.items():
        figure.savefig(run_dir / file_name, dpi=110)
        written.append(run_dir / file_name)
    return written


def _scenario(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "summary.json").read_text(encoding="utf-8")).get("scenario", {})
    except (OSError, ValueError):
        return {}


def _jct_cdf(jobs: pd.DataFrame, name: str) -> Figure:
    """Gavel's figure convention: CDF of job completion time in hours on a log axis."""
    measured = jobs[jobs["in_window"] & jobs["completion_s"].notna()]
    hours = np.sort((measured["completion_s"] - measured["arrival_s"]).to_numpy() / 3600.0)
    figure = Figure(figsize=(6, 4), layout="constrained")
    ax = figure.subplots()
    if len(hours):
        ax.step(hours, np.arange(1, len(hours) + 1) / len(hours), where="post")
        ax.set_xscale("log")
    else:
        ax.text(0.5, 0.5, "no job in the window completed", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(f"{name}: JCT CDF ({len(hours)} completed jobs in the window)")
    return figure


def _cluster_usage(
    jobs: pd.DataFrame, rounds: pd.DataFrame, types: list[str], capacity: dict[str, int], name: str
) -> Figure:
    figure = Figure(figsize=(8, 5.5), layout="constrained")
    top, bottom = figure.subplots(2, 1, sharex=True)

    # Active jobs: +1 at arrival, -1 at completion, summed in time order.
    finished = jobs["completion_s"].dropna()
    times = np.concatenate([jobs["arrival_s"].to_numpy(), finished.to_numpy()])
    change = np.concatenate([np.ones(len(jobs)), -np.ones(len(finished))])
    order = np.argsort(times, kind="stable")
    top.step(times[order] / 3600.0, np.cumsum(change[order]), where="post", color="black")
    top.set_ylabel("active jobs")
    top.set_title(f"{name}: jobs in the system and GPUs busy per worker type")
    top.grid(True, alpha=0.3)

    owned = rounds[owns_gpus(rounds)]
    per_round = owned.pivot_table(index="round", columns="worker_type", values="num_gpus", aggfunc="sum")
    span = rounds.groupby("round").agg(start=("start_s", "min"), end=("end_s", "max"))
    per_round = per_round.reindex(index=span.index, columns=types).fillna(0)
    x, gap = _round_segments(span)
    for column, worker_type in enumerate(types):
        busy = per_round[worker_type].to_numpy(dtype=float)
        between = np.where(gap, 0.0, busy)  # nothing runs in idle time between rounds
        y = np.column_stack([busy, busy, between, between]).ravel()
        line = bottom.plot(x, y, label=worker_type, color=f"C{column}")[0]
        if worker_type in capacity:
            bottom.axhline(capacity[worker_type], color=line.get_color(), linestyle=":", linewidth=1)
    bottom.set_xlabel("time (hours)")
    bottom.set_ylabel("GPUs busy (dotted: GPUs in cluster)")
    bottom.grid(True, alpha=0.3)
    if types:
        bottom.legend(loc="upper right")
    return figure


def _round_segments(span: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """x coordinates in hours (start, end, end, next start) per round, and which rounds are
    followed by idle time."""
    start = span["start"].to_numpy(dtype=float) / 3600.0
    end = span["end"].to_numpy(dtype=float) / 3600.0
    next_start = np.append(start[1:], end[-1:])
    gap = next_start > end + 1e-9
    return np.column_stack([start, end, end, next_start]).ravel(), gap


def _gpu_hours_by_job_type(jobs: pd.DataFrame, rounds: pd.DataFrame, types: list[str], name: str) -> Figure:
    """Where each job type ran: shows whether a policy sends the jobs that gain most to fast GPUs."""
    share = np.where(rounds["shared_with"] < 0, 1.0, 0.5)  # a shared GPU is split between the pair
    hours = (rounds["end_s"] - rounds["start_s"]) * rounds["num_gpus"] * share / 3600.0
    job_type = rounds["job_id"].map(jobs.set_index("job_id")["job_type"])
    table = hours.groupby([job_type, rounds["worker_type"]]).sum().unstack(fill_value=0.0)
    table = table.reindex(columns=types, fill_value=0.0)
    table = table.loc[table.sum(axis=1).sort_values().index]

    figure = Figure(figsize=(8, 1.5 + 0.28 * max(len(table), 1)), layout="constrained")
    ax = figure.subplots()
    left = np.zeros(len(table))
    for column, worker_type in enumerate(types):
        values = table[worker_type].to_numpy()
        ax.barh(table.index.astype(str), values, left=left, label=worker_type, color=f"C{column}")
        left += values
    if types:
        ax.legend(loc="lower right")
    ax.set_xlabel("GPU-hours")
    ax.set_title(f"{name}: GPU-hours by job type and worker type")
    ax.grid(True, axis="x", alpha=0.3)
    return figure
