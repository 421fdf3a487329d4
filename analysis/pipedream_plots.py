"""PNG plots of a PipeDream-level run folder (``ops.parquet``, ``devices.parquet``): the op timeline
per device (the pipeline diagram of the papers' figures) and peak memory per device.

matplotlib's object API (no pyplot): Agg rendering, no global state, as ``analysis.gavel_plots``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from clustertwin.errors import InputError

_COLOURS = {"F": "#4c72b0", "B": "#55a868", "W": "#c44e52", "allreduce": "#dd8452"}


def plot_pipedream_run(run_dir: Path, max_ops: int = 20000) -> list[Path]:
    """(Re)write ``timeline.png`` and ``memory.png`` next to the tables; return their paths. Timelines
    longer than ``max_ops`` compute ops show only the first ``max_ops`` (the pattern is periodic)."""
    run_dir = Path(run_dir)
    if not (run_dir / "ops.parquet").is_file() or not (run_dir / "devices.parquet").is_file():
        raise InputError(str(run_dir), "no PipeDream event tables (ops.parquet, devices.parquet) to plot")
    ops = pd.read_parquet(run_dir / "ops.parquet")
    devices = pd.read_parquet(run_dir / "devices.parquet")
    paths = []
    for name, figure in (("timeline.png", _timeline(ops, max_ops)), ("memory.png", _memory(devices))):
        path = run_dir / name
        figure.savefig(path, dpi=110)
        paths.append(path)
    return paths


def _timeline(ops: pd.DataFrame, max_ops: int) -> Figure:
    shown = ops[ops["kind"].isin(list(_COLOURS))].sort_values("start_s").head(max_ops)
    devices = sorted(shown["device"].unique())
    figure = Figure(figsize=(12, 0.5 * len(devices) + 1.5))
    axes = figure.subplots()
    for kind, colour in _COLOURS.items():
        part = shown[shown["kind"] == kind]
        # Sync ops on a device's communication engine sit in the lower half of its row.
        offset, height = (-0.4, 0.35) if kind == "allreduce" else (-0.05, 0.45)
        for device, rows in part.groupby("device"):
            spans = list(zip(rows["start_s"], rows["end_s"] - rows["start_s"], strict=True))
            axes.broken_barh(spans, (devices.index(device) + offset, height), color=colour, label=kind)
    handles, labels = axes.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=False))
    axes.legend(unique.values(), unique.keys(), loc="upper right", ncols=4, fontsize="small")
    axes.set_yticks(range(len(devices)), [f"dev {d}" for d in devices])
    axes.invert_yaxis()
    axes.set_xlabel("time (s)")
    axes.set_title("ops per device: forward, backward, update, all-reduce")
    figure.tight_layout()
    return figure


def _memory(devices: pd.DataFrame) -> Figure:
    figure = Figure(figsize=(8, 3.5))
    axes = figure.subplots()
    axes.bar(
        devices["device"].astype(str), devices["peak_memory_bytes"] / 2**30, color="#4c72b0", label="peak"
    )
    capacity = devices["memory_capacity_bytes"].max() / 2**30
    if pd.notna(capacity) and capacity != float("inf"):
        axes.axhline(capacity, color="#c44e52", linestyle="--", label="capacity")
    axes.set_xlabel("device")
    axes.set_ylabel("GiB")
    axes.set_title("peak memory per device")
    axes.legend(fontsize="small")
    figure.tight_layout()
    return figure
