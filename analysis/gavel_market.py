"""Metrics of a Gavel run on a cloud fleet (``market:`` section; [Narayanan] §6, [Proteus] §6 metrics).

``cost_usd`` is the fleet's bill (every worker billed while it holds an instance, busy or idle, under
the run's billing scheme); ``used_cost_usd`` is Gavel's pay-per-use figure ``Σ price × GPU-time`` of the
GPUs jobs held, at the same prices. Work lost is GPU time whose progress an eviction threw away.
"""

from __future__ import annotations

import math

from clustertwin.analysis.gavel_metrics import gavel_metrics
from clustertwin.scenarios.results import RunResult


def market_metrics(result: RunResult, cluster_gpus: dict[str, int]) -> dict[str, float]:
    """Gavel's metrics (JCT, makespan, utilisation) plus cost, cost per job, evictions and work lost."""
    metrics = gavel_metrics(result, cluster_gpus)
    billing = result.tables["billing"]
    preemptions = result.tables["preemptions"]
    total = float(billing["cost_usd"].sum())
    done = metrics["jobs_completed"]
    spot = billing["capacity"] == "spot"
    metrics.update(
        {
            "cost_usd": total,
            "cost_spot_usd": float(billing.loc[spot, "cost_usd"].sum()),
            "cost_on_demand_usd": float(billing.loc[~spot, "cost_usd"].sum()),
            "cost_per_job_usd": total / done if done else math.nan,
            "used_cost_usd": float(result.tables["rounds"]["cost_usd"].sum()),
            "makespan_h": metrics["makespan_s"] / 3600.0,
            "evictions": len(result.tables["evictions"]),
            "preemptions": len(preemptions),
            "work_lost_gpu_h": float(preemptions["lost_gpu_h"].sum()),
        }
    )
    return metrics
