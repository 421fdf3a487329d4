"""Headline metrics of a PipeDream-level run, from its event tables (simulated or real).

Throughput counts samples over the whole makespan (fill and drain included, as a real run would see).
The bubble fraction is the share of device-time not spent computing: 1 − Σ busy / (devices × makespan),
which for zero communication is exactly the paper's idle fraction, e.g. (p−1)/(m+p−1) of an iteration
for GPipe and Flush ([Narayanan] Table 7.1 states it relative to the ideal time, (p−1)/m).
"""

from __future__ import annotations

import math

from clustertwin.scenarios.results import RunResult

REAL_RUN_PREFIXES = ("own_sim_", "ddp_", "speedup_over_ddp", "link_")


def pipedream_metrics(result: RunResult) -> dict[str, float]:
    """Flat metrics: makespan, samples/s, bubble fraction (overall and worst device), communication
    bytes, and peak memory / stashes / weight versions per device (``peak_memory_gib_dev3`` ...)."""
    ops = result.tables["ops"]
    devices = result.tables["devices"]
    makespan = float(result.info.get("makespan_s", ops["end_s"].max() if len(ops) else 0.0))
    samples = float(result.info.get("samples", math.nan))
    busy = devices["busy_s"].to_numpy(dtype=float)
    n = len(devices)
    metrics: dict[str, float] = {
        "makespan_s": makespan,
        "samples": samples,
        "throughput_samples_per_s": samples / makespan if makespan > 0 else math.nan,
        # Its inverse, so that a speedup is metric(baseline) / metric(treatment) as for time metrics.
        "time_per_sample_s": makespan / samples if samples > 0 else math.nan,
        "bubble_fraction": 1.0 - busy.sum() / (n * makespan) if makespan > 0 and n else math.nan,
        "max_device_idle_fraction": float(1.0 - busy.min() / makespan) if makespan > 0 and n else math.nan,
        "p2p_bytes": float(ops.loc[ops["kind"].isin(["send_act", "send_grad"]), "bytes"].sum()),
        "allreduce_bytes": float(ops.loc[ops["kind"] == "allreduce", "bytes"].sum()),
        "peak_memory_gib_max": float(devices["peak_memory_bytes"].max() / 2**30) if n else math.nan,
    }
    # A real run's own simulation and data-parallel baseline (``clustertwin/pipedream_real.py``).
    for key, value in result.info.items():
        if key.startswith(REAL_RUN_PREFIXES) and isinstance(value, int | float):
            metrics[key] = float(value)
    for row in devices.itertuples(index=False):
        metrics[f"peak_memory_gib_dev{row.device}"] = float(row.peak_memory_bytes) / 2**30
        metrics[f"peak_stashes_dev{row.device}"] = float(row.peak_stashes)
        metrics[f"peak_versions_dev{row.device}"] = float(row.peak_versions)
        metrics[f"busy_fraction_dev{row.device}"] = float(row.busy_s) / makespan if makespan > 0 else math.nan
    return metrics
