"""Flat metrics of a spot run (the ``metrics`` map of summary.json, and the reproduction's inputs).

* ``cost_usd`` — sum of all bills (charges − refunds − final-hour prorating).
* ``runtime_h`` — job start to completion (NaN when unfinished); ``completed`` 1/0.
* ``on_demand_cost_usd`` — what the reference all-on-demand cluster would pay for the same work at its
  own speed (the yardstick of Proteus Figs. 8–9; computed, not simulated: no boot delay).
* ``cost_vs_on_demand`` — cost_usd / on_demand_cost_usd − 1 (−0.85 means 85% cheaper).
* ``free_compute_fraction`` — share of compute (ν·machine-seconds) in billing hours refunded because of
  an eviction (Proteus Fig. 10); ``on_demand_compute_fraction`` and ``spot_paid_compute_fraction`` are
  the other two parts of Fig. 10's breakdown.
* ``evictions``, ``effective_failures``, ``work_lost`` (work units rolled back), ``cost_per_work``.
"""

from __future__ import annotations

import math

from clustertwin.scenarios.results import RunResult


def spot_metrics(result: RunResult) -> dict[str, float]:
    """The flat metric map of one spot run (see the module docstring)."""
    bills = result.tables["bills"]
    usage = result.tables["usage"]
    evictions = result.tables["evictions"]
    info = result.info
    cost = float(bills["amount_usd"].sum())
    work = float(info["total_work"])
    runtime_s = float(info["runtime_s"])
    ref_hours = work / float(info["reference_rate"])
    od_cost = float(info["reference_on_demand_usd_per_h"]) * ref_hours
    compute = (usage["end_s"] - usage["start_s"]) * usage["count"] * usage["work_rate"]
    total = float(compute.sum())
    free = float(compute[~usage["paid"]].sum())
    on_demand = float(compute[usage["on_demand"]].sum())

    def share(x: float) -> float:
        return x / total if total > 0 else math.nan

    return {
        "cost_usd": cost,
        "runtime_h": runtime_s / 3600.0,
        "completed": float(info["completed"]),
        "on_demand_cost_usd": od_cost,
        "on_demand_runtime_h": ref_hours,
        "cost_vs_on_demand": cost / od_cost - 1.0 if od_cost > 0 else math.nan,
        "cost_per_work": cost / work if work > 0 else math.nan,
        "free_compute_fraction": share(free),
        "on_demand_compute_fraction": share(on_demand),
        "spot_paid_compute_fraction": share(total - free - on_demand),
        "evictions": float(len(evictions)),
        "effective_failures": float((evictions["recovery"] == "effective_failure").sum()),
        "work_lost": float(evictions["lost_work"].sum()),
        "wall_s": float(info.get("wall_s", math.nan)),
    }
