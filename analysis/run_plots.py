"""PNG plots of the FlexRR, PSLD and spot run folders, re-creatable at any time from their Parquet tables.

One figure per question a reader of such a run asks: how long each iteration took and who straggled
(FlexRR), how the iteration time moved as PSLD reassigned blocks, and how a spot job's work and bill grew
(simulated) or its clock advanced through evictions (real). matplotlib's object API (no pyplot), as
``analysis.gavel_plots``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from clustertwin.errors import InputError


def plot_flexrr_run(run_dir: Path) -> list[Path]:
    """``iteration_times.png``: each worker's time per iteration (own items and with its helpers)."""
    iterations = _table(run_dir, "iterations", "FlexRR")
    figure = Figure(figsize=(9, 4))
    axes = figure.subplots()
    per_worker = iterations.assign(took_s=iterations["end_s"] - iterations["start_s"])
    spread = per_worker.groupby("iteration")["took_s"]
    axes.fill_between(
        spread.min().index, spread.min(), spread.max(), alpha=0.25, label="fastest to slowest worker"
    )
    axes.plot(spread.median().index, spread.median(), marker="o", label="median worker")
    span = iterations.groupby("iteration").agg(start=("start_s", "min"), end=("end_s", "max"))
    axes.plot(
        span.index, span["end"] - span["start"], marker="s", label="iteration (first start to last end)"
    )
    axes.set_xlabel("iteration")
    axes.set_ylabel("seconds")
    axes.set_title("time per iteration")
    axes.legend(fontsize="small")
    return [_save(figure, run_dir, "iteration_times.png")]


def plot_psld_run(run_dir: Path) -> list[Path]:
    """``iterations.png``: iteration time, with PSLD's reassignments marked; ``loads.png``: bytes per PS
    in each assignment."""
    iterations = _table(run_dir, "iterations", "PSLD")
    figure = Figure(figsize=(9, 4))
    axes = figure.subplots()
    axes.plot(iterations["end_s"], iterations["end_s"] - iterations["start_s"], linewidth=1)
    reassignments = pd.read_parquet(Path(run_dir) / "reassignments.parquet")
    for i, time_s in enumerate(reassignments["time_s"]):
        axes.axvline(time_s, color="#c44e52", linestyle="--", label="reassignment" if i == 0 else None)
    axes.set_xlabel("time (s)")
    axes.set_ylabel("iteration time (s)")
    axes.set_title("iteration time")
    if len(reassignments):
        axes.legend(fontsize="small")
    paths = [_save(figure, run_dir, "iterations.png")]

    loads = pd.read_parquet(Path(run_dir) / "loads.parquet")
    figure = Figure(figsize=(9, 4))
    axes = figure.subplots()
    table = loads.pivot_table(index="map_version", columns="server", values="bytes", aggfunc="sum").fillna(0)
    table.div(1e6).plot.bar(ax=axes, stacked=True, width=0.8, legend=len(table.columns) <= 16)
    axes.set_xlabel("assignment version (0: initial)")
    axes.set_ylabel("MB per PS")
    axes.set_title("parameter bytes per server")
    return [*paths, _save(figure, run_dir, "loads.png")]


def plot_spot_run(run_dir: Path) -> list[Path]:
    """Simulated: ``progress.png`` (work done and the bill over time). Real: ``progress.png`` (the clock
    over time, evictions marked)."""
    progress = _table(run_dir, "progress", "spot")
    figure = Figure(figsize=(9, 4))
    axes = figure.subplots()
    hours = progress["time_s"] / 3600
    if "work_done" in progress:
        axes.plot(hours, progress["work_done"], label="work done")
        axes.set_xlabel("time (h)")
        axes.set_ylabel("work done (ν·h)")
        bills = pd.read_parquet(Path(run_dir) / "bills.parquet").sort_values("time_s")
        cost = axes.twinx()
        cost.step(bills["time_s"] / 3600, bills["amount_usd"].cumsum(), where="post", color="#c44e52")
        cost.set_ylabel("billed so far ($)", color="#c44e52")
        axes.set_title("work and cost")
    else:
        axes.step(progress["time_s"], progress["clocks_done"], where="post", label="clocks done")
        evictions = pd.read_parquet(Path(run_dir) / "evictions.parquet")
        for i, time_s in enumerate(evictions["killed_s"]):
            axes.axvline(time_s, color="#c44e52", linestyle="--", label="eviction" if i == 0 else None)
        axes.set_xlabel("time (s)")
        axes.set_ylabel("clocks")
        axes.set_title("training clock through evictions")
    axes.legend(fontsize="small", loc="upper left")
    return [_save(figure, run_dir, "progress.png")]


def _table(run_dir: Path, name: str, kind: str) -> pd.DataFrame:
    path = Path(run_dir) / f"{name}.parquet"
    if not path.is_file():
        raise InputError(str(run_dir), f"no {kind} event tables ({name}.parquet) to plot")
    return pd.read_parquet(path)


def _save(figure: Figure, run_dir: Path, name: str) -> Path:
    figure.tight_layout()
    path = Path(run_dir) / name
    figure.savefig(path, dpi=110)
    return path
