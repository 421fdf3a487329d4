"""The chapter-6 what-ifs of [Narayanan] (ch. 6, §6.3): what picking a GPU, an instance size, a cloud and
the moment to move would have saved, on the prices of February-March 2020 the chapter itself measured.

* Table 6.1: throughput and dollar-normalised throughput of P100 and V100 over K80 (GCP on-demand prices).
* Table 6.2: the egress cost of moving a dataset or a checkpoint out of AWS, as a share of 160 V100-hours
  on AWS spot.
* Table 6.3: the best-case on-demand to spot price ratio of one GPU on each cloud (and in the other Azure
  regions of the chapter's logs, and in libcloud's later Azure catalogue).
* Fig. 6.4: per-GPU prices of 1-, 4/8- and 8/16-GPU instances and their stability.
* Fig. 6.5: the stacked strategies (spot, GPU type, multi-GPU, multi-cloud, dynamic) for single-GPU jobs of
  4 V100-days, each against the cheapest on-demand 1xV100.
* Fig. 6.6: dynamic re-picking against the best option at the start, by job length.

The decisions are ``policies.cloud`` (pick, repick); this module replays prices and adds up the bill. A job
runs on one GPU; a multi-GPU instance is billed per GPU (packing, as the chapter assumes); moving is free
of data cost (the chapter's assumption: datasets are on every cloud) and of time.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from clustertwin.analysis.cloud_market import PriceBoard
from clustertwin.policies.cloud import Allowed, Option, pick, repick
from clustertwin.traces.azure_prices import AZURE_REGION_CODES
from clustertwin.traces.cloud_catalog import CloudInstance, EgressTier, egress_usd, load_cloud_on_demand
from clustertwin.traces.gavel_throughputs import ThroughputTable
from clustertwin.traces.libcloud_prices import BUNDLED_LIBCLOUD_LOW_PRIORITY, BUNDLED_LIBCLOUD_ON_DEMAND

GPU_TYPES = ("K80", "P100", "V100")
HOUR_NS = 3_600_000_000_000

# Fig. 6.5's strategies, each widening the one before (§6.3.2 "End-to-End Cost Reduction"): all but the
# last two use AWS us-east-1; multi-cloud and dynamic use AWS and Azure.
STRATEGIES: dict[str, tuple[Allowed, bool]] = {
    "spot": (Allowed(spot=True, gpu_types=frozenset({"V100"}), max_gpus=1, clouds=frozenset({"aws"})), False),
    "gpu_type": (Allowed(spot=True, max_gpus=1, clouds=frozenset({"aws"})), False),
    "multi_gpu": (Allowed(spot=True, clouds=frozenset({"aws"})), False),
    "multi_cloud": (Allowed(spot=True, clouds=frozenset({"aws", "azure"})), False),
    "dynamic": (Allowed(spot=True, clouds=frozenset({"aws", "azure"})), True),
    # Ours, beyond the figure: GCP's fixed preemptible prices as a third cloud.
    "dynamic_gcp": (Allowed(spot=True), True),
}
BASELINE = Allowed(spot=False, gpu_types=frozenset({"V100"}), max_gpus=1, clouds=frozenset({"aws"}))


@dataclass(frozen=True)
class JobBill:
    cost: float  # USD
    hours: float
    switches: int
    used: tuple[tuple[str, str, str], ...] = field(default=())  # (cloud, instance type, GPU) in order


def throughputs(table: ThroughputTable, job_type: str) -> dict[str, float]:
    """A one-GPU job's iterations per hour on each GPU type (0 where it cannot run)."""
    return {g: 3600.0 * table.isolated(job_type, 1, g.lower()) for g in GPU_TYPES}


def run_job(
    board: PriceBoard,
    throughput: Mapping[str, float],
    work: float,
    start: pd.Timestamp,
    allowed: Allowed,
    dynamic: bool,
    min_gain: float = 0.0,
    best_at: dict[int, Option | None] | None = None,
) -> JobBill:
    """Replay one job of ``work`` iterations from ``start``: pick at the start, and with ``dynamic`` re-pick
    at every price change; the bill is the per-GPU price of the option in use, integrated over time.
    ``best_at`` remembers the best option per instant for one (throughput, allowed) pair, shared by runs
    from other starts: re-picking among that option and the current one is re-picking among all."""
    t = pd.Timestamp(start)
    current = pick(board.options_at(t), throughput, allowed)
    if current is None:
        raise ValueError(f"no allowed option at {t} for {allowed}")
    used = [(current.cloud, current.instance_type, current.gpu_type)]
    cost = hours = 0.0
    switches = 0
    remaining = work
    for change in [*board.changes(t, pd.Timestamp.max.tz_localize("UTC")), None]:
        rate = throughput[current.gpu_type]
        span = (change - t).value / HOUR_NS if change is not None else float("inf")
        if rate * span >= remaining:
            need = remaining / rate
            return JobBill(cost + current.gpu_price * need, hours + need, switches, tuple(used))
        cost += current.gpu_price * span
        hours += span
        remaining -= rate * span
        t = change
        options = board.options_at(t)
        now = next(o for o in options if o.key == current.key)
        if dynamic:
            if best_at is None:
                best_at = {}
            if t.value not in best_at:
                best_at[t.value] = pick(options, throughput, allowed)
            best = best_at[t.value]
            chosen = repick(current, [now] if best is None else [best, now], throughput, allowed, min_gain)
        else:
            chosen = now
        assert chosen is not None  # the current option stays on offer: a last price holds
        if chosen.key != current.key:
            switches += 1
            used.append((chosen.cloud, chosen.instance_type, chosen.gpu_type))
        current = chosen
    raise AssertionError("unreachable: the last segment is unbounded")


def table_6_1(
    table: ThroughputTable, models: Mapping[str, str], on_demand: Sequence[CloudInstance]
) -> pd.DataFrame:
    """Speedups over K80 and dollar-normalised speedups (GCP on-demand per-GPU prices), one row per model."""
    gcp = {i.gpu_type: i.price / i.gpus for i in on_demand if i.cloud == "gcp"}
    rows = []
    for model, job_type in models.items():
        thr = throughputs(table, job_type)
        row: dict[str, object] = {"model": model, "job_type": job_type}
        for gpu in ("P100", "V100"):
            speedup = thr[gpu] / thr["K80"]
            row[f"speedup_{gpu}"] = speedup
            row[f"dollar_{gpu}"] = speedup * gcp["K80"] / gcp[gpu]
        row["cheapest_per_work"] = min(GPU_TYPES, key=lambda g: gcp[g] / thr[g] if thr[g] > 0 else np.inf)
        rows.append(row)
    return pd.DataFrame(rows)


def table_6_2(
    sizes: Mapping[str, tuple[float, float]], egress: Sequence[EgressTier], v100_spot_price: float
) -> pd.DataFrame:
    """Egress of one dataset and one model transfer as a share of 160 V100-hours on spot. A model transfer
    is priced as 10,000 transfers / 10,000, as §6.3.2 does (so it falls in the volume tier of many)."""
    compute = 160.0 * v100_spot_price
    rows = []
    for model, (dataset_gb, model_gb) in sizes.items():
        rows.append(
            {
                "model": model,
                "compute_usd": compute,
                "dataset_share": egress_usd(list(egress), dataset_gb) / compute,
                "model_share": egress_usd(list(egress), 10_000 * model_gb) / 10_000 / compute,
            }
        )
    return pd.DataFrame(rows)


def table_6_3(board: PriceBoard, cells: Mapping[str, tuple[str, str, str]]) -> dict[str, float]:
    """Best-case on-demand / spot price of one GPU: ``cells`` maps a name to (cloud, region, GPU type);
    the spot price is the lowest any 1-GPU spot market of that region showed over the data."""
    out = {}
    for name, (cloud, region, gpu) in cells.items():
        spot = [p.min() / o.gpus for o, _, p in board.series() if _one_gpu(o, cloud, region, gpu) and o.spot]
        od = [
            p.min() / o.gpus for o, _, p in board.series() if _one_gpu(o, cloud, region, gpu) and not o.spot
        ]
        if not spot or not od:
            raise ValueError(f"no 1-GPU {gpu} prices for {cloud} {region}")
        out[name] = min(od) / min(spot)
    return out


def azure_ratios_2025(
    on_demand: str | Path = BUNDLED_LIBCLOUD_ON_DEMAND,
    low_priority: str | Path = BUNDLED_LIBCLOUD_LOW_PRIORITY,
) -> dict[str, float]:
    """Table 6.3's Azure ratio in libcloud's catalogue (a later, fixed snapshot): pay-as-you-go over
    low-priority price of the one-GPU size of each GPU type in US East, ``azure-2025-<gpu>``."""
    region = AZURE_REGION_CODES["us-east"]

    def one_gpu(path: str | Path) -> dict[str, float]:
        return {i.gpu_type: i.price for i in load_cloud_on_demand(path) if i.region == region and i.gpus == 1}

    od, low = one_gpu(on_demand), one_gpu(low_priority)
    return {f"azure-2025-{g.lower()}": od[g] / low[g] for g in GPU_TYPES if g in od and g in low}


def per_gpu_prices(
    board: PriceBoard, cloud: str, region: str, start: pd.Timestamp, end: pd.Timestamp
) -> pd.DataFrame:
    """Fig. 6.4: each spot instance type's cheapest-zone price per GPU over [start, end): its time-weighted
    mean and coefficient of variation (time-weighted standard deviation / mean)."""
    lo, hi = pd.Timestamp(start).value, pd.Timestamp(end).value
    markets: dict[tuple[str, str, int], list[tuple[np.ndarray, np.ndarray]]] = {}
    for o, times, prices in board.series():
        if o.spot and o.cloud == cloud and o.region == region:
            markets.setdefault((o.instance_type, o.gpu_type, o.gpus), []).append((times, prices / o.gpus))
    rows = []
    for (itype, gpu, gpus), steps in sorted(markets.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        grid = np.unique(np.concatenate([[lo], *[t[(t > lo) & (t < hi)] for t, _ in steps]]))
        level = np.full(len(grid), np.inf)
        for times, prices in steps:
            i = np.searchsorted(times, grid, side="right") - 1
            level = np.minimum(level, np.where(i >= 0, prices[np.maximum(i, 0)], np.inf))
        weights = np.diff(np.r_[grid, hi]).astype(float)
        ok = np.isfinite(level)
        if not ok.any():
            continue
        mean = float(np.average(level[ok], weights=weights[ok]))
        std = float(np.sqrt(np.average((level[ok] - mean) ** 2, weights=weights[ok])))
        rows.append(
            {"instance_type": itype, "gpu_type": gpu, "gpus": gpus, "mean_gpu_price": mean, "cv": std / mean}
        )
    return pd.DataFrame(rows)


def stacked_savings(
    board: PriceBoard,
    table: ThroughputTable,
    models: Mapping[str, str],
    starts: Sequence[pd.Timestamp],
    v100_days: float,
    min_gain: float,
    strategies: Sequence[str] = tuple(STRATEGIES),
) -> pd.DataFrame:
    """Fig. 6.5 (and, with ``multi_cloud`` and ``dynamic``, Fig. 6.6): one row per (model, strategy) with
    the mean cost over ``starts``, the baseline's cost over the mean (the reduction), mean switches and
    the GPU types used."""
    rows = []
    for model, job_type in models.items():
        thr = throughputs(table, job_type)
        work = v100_days * 24.0 * thr["V100"]
        base = [run_job(board, thr, work, s, BASELINE, False) for s in starts]
        base_cost = statistics.fmean(b.cost for b in base)
        rows.append(_row(model, "on_demand_v100", base, base_cost))
        for name in strategies:
            allowed, dynamic = STRATEGIES[name]
            cache: dict[int, Option | None] = {}
            bills = [run_job(board, thr, work, s, allowed, dynamic, min_gain, cache) for s in starts]
            rows.append(_row(model, name, bills, base_cost))
    return pd.DataFrame(rows)


def _row(model: str, strategy: str, bills: Sequence[JobBill], base_cost: float) -> dict[str, object]:
    cost = statistics.fmean(b.cost for b in bills)
    return {
        "model": model,
        "strategy": strategy,
        "cost_usd": cost,
        "reduction": base_cost / cost,
        "hours": statistics.fmean(b.hours for b in bills),
        "switches": statistics.fmean(b.switches for b in bills),
        "max_switches": max(b.switches for b in bills),
        "used": " ".join(sorted({f"{c}:{g}" for b in bills for c, _, g in b.used})),
    }


def _one_gpu(o: Option, cloud: str, region: str, gpu: str) -> bool:
    return o.cloud == cloud and o.region == region and o.gpu_type == gpu and o.gpus == 1
