"""Headline metrics of a PSLD run ([PSLD], §6), from its event tables and info.

Throughput is the paper's metric (images/s, §6.1): synchronous iterations finished per second after
``warmup_s``, times workers x per-GPU batch. Load metrics describe the assignment in force at the end.
"""

from __future__ import annotations

import math

import numpy as np
from clustertwin.scenarios.results import RunResult


def window_rate(iterations, start_s: float, end_s: float) -> float:
    """Iterations per second among those that started in [start_s, end_s) (NaN if fewer than 2)."""
    sel = iterations[(iterations["start_s"] >= start_s) & (iterations["start_s"] < end_s)]
    if len(sel) < 2:
        return math.nan
    span = float(sel["end_s"].max() - sel["start_s"].min())
    return len(sel) / span if span > 0 else math.nan


def psld_metrics(result: RunResult) -> dict[str, float]:
    """Flat metrics of one PSLD run (every run has the same keys; NaN where undefined)."""
    info = result.info
    it = result.tables["iterations"]
    re = result.tables["reassignments"]
    loads = result.tables["loads"]
    rate = window_rate(it, float(info["warmup_s"]), float(info["duration_s"]))
    samples = float(info["workers"]) * float(info["batch_size"])
    last = loads[loads["map_version"] == loads["map_version"].max()]
    held = last[last["bytes"] > 0]["bytes"].to_numpy(dtype=float)
    total = float(info["model_bytes"])
    return {
        "iterations_per_s": rate,
        "samples_per_s": rate * samples,
        "iteration_s": 1.0 / rate if rate and not math.isnan(rate) else math.nan,
        "iterations": float(len(it)),
        "reassignments": float(len(re)),
        "scale_outs": float((re["action"] == "scale_out").sum()) if len(re) else 0.0,
        "moved_bytes": float(re["moved_bytes"].sum()) if len(re) else 0.0,
        "suspended_s": float(re["suspended_s"].sum()) if len(re) else 0.0,
        "max_suspension_s": float(re["suspended_s"].max()) if len(re) else 0.0,
        "servers_loaded": float(len(held)),
        "max_server_share": float(held.max() / total) if len(held) else math.nan,
        "load_imbalance": float(held.max() / held.mean()) if len(held) else math.nan,
        "load_cv": float(np.std(held) / np.mean(held)) if len(held) > 1 else 0.0,
        "events": float(info.get("events", math.nan)),
        "wall_s": float(info.get("wall_s", math.nan)),
    }
