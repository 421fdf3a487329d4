"""Reproduce Proteus (Harlap et al., EuroSys'17; [Proteus]) in simulation, as claim rows.

Two groups of claims:

* **Cost and runtime** (Figs. 8–10, §6.3): Proteus (BidBrain + AgileML), Standard + Checkpoint,
  Standard + AgileML and all-on-demand run the same job (the work of 64 on-demand p2.xlarge for 2 h and
  for 20 h) from many seeded start times, on three markets:
  Also the naive "always bid just above the market" scheme with checkpointing (§6.3).
  ``real`` — the bundled AWS us-east-1 p2/p3 prices of 2020-01..03 (β tables from the 60 days before);
  ``synthetic`` — a trace generated from models fitted to those prices (same spike rate: almost none);
  ``2016-synthetic`` — **synthetic**: the fitted model plus the spikes of the 2016 auction market the
  paper's cost claims were measured on, derived from what the paper reports of that market
  (``traces/auction_market.py``, ``traces/data/spot/proteus_2016_market.yaml``: a spike above on-demand
  every ~1.5 h per market, to ~1.25× on-demand; evictions when the price exceeds the bid). No 2016 trace
  is public (data README, "Not obtained"), so the claims meet their market's conditions only as modelled.
  Costs are means over starts; ratios are of the means.
* **AgileML stage slowdowns** (Figs. 11–14): from the performance model in ``sim/spot/perf.py``. Two of
  them are its calibration anchors (marked), the others are predictions.

Tolerances are fixed before looking at our numbers: a range claim holds when ours is within the
paper's range widened by 5 percentage points on each side. Every finished run's metrics are cached as
``<out>/runs/<key>.json``, so an interrupted reproduction resumes.

Which rows decide the exit status (``gated``): the paper's cost and runtime *magnitudes* were measured on
the 2016 auction market, whose bidding spikes and refunded hours produced them; no 2016 trace is public
and the 2020 prices we replay do not have that behaviour (docs/algorithms/proteus.md, "Why our numbers
differ"). Those rows are printed beside the paper's values with that reason (``why``) but do not gate.
What must hold on the markets we replay (the real prices and the synthetic trace fitted to them) gates: the
order of the four schemes' costs, Proteus finishing before Standard+Checkpoint, the just-above scheme
costing more, and the AgileML stage slowdowns of Figs. 11-14 except stage 1 at 32:32, which our bandwidth
model (no communication/computation overlap) misses and reports. The 2016-synthetic market is a model,
not a replay: reported beside the real-market rows, not gated. Exit status 1 when any gating claim fails.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from clustertwin.atomic import write_json
from clustertwin.claim_results import ClaimRow, report
from clustertwin.progress import progress_bar

PAPER = (
    "Harlap et al., Proteus: agile ML elasticity through tiered reliability in dynamic resource markets"
    " (EuroSys 2017)"
)

CONFIGS: dict[str, tuple[str, ...]] = {
    "proteus": ("policy=bidbrain", "fault_tolerance=agileml"),
    "standard_checkpoint": ("policy=standard", "fault_tolerance=checkpoint"),
    "standard_agileml": ("policy=standard", "fault_tolerance=agileml"),
    "on_demand": ("policy=on_demand", "fault_tolerance=checkpoint"),
    "just_above_checkpoint": ("policy=just_above", "fault_tolerance=checkpoint"),
}
CHECKPOINT_INTERVAL_S = 1800.0  # the bundled scenario's checkpoint.interval_s, which the 2016 spikes follow


def _auction_2016() -> tuple[str, ...]:
    from clustertwin.traces.auction_market import auction_spikes

    s = auction_spikes(CHECKPOINT_INTERVAL_S)
    return (
        f"market.synthetic={{spikes_per_h: {s.spikes_per_h:.6g}, spike_multiple: {s.spike_multiple:.6g},"
        f" spike_mean_s: {s.spike_mean_s:.6g}}}",
    )


MARKETS: dict[str, tuple[str, ...]] = {
    "real": (),
    "synthetic": ("market.synthetic={}",),
    "2016-synthetic": _auction_2016(),
}
JOB_HOURS = (2.0, 20.0)
WIDEN = 0.05
GATED_MARKETS = (
    "real",
    "synthetic",
)  # the replayed prices and the trace fitted to them; "2016-synthetic" is a model
# Why a checked row does not gate (its ``why``).
NOT_GATING = {
    "market": "not gated: a magnitude of the paper's 2016 auction market, whose bidding spikes and refunded"
    " hours produced it; no 2016 trace is public (docs/algorithms/proteus.md, 'Why our numbers differ')",
    "2016-synthetic": "not gated: SYNTHETIC market, modelled on what the paper reports of its 2016 market"
    " (traces/auction_market.py), not a replay of it",
    "overlap": (
        "not gated: our NIC model has no communication/computation overlap (docs/algorithms/proteus.md)"
    ),
}
ORDER_WHY = (
    "the schemes' order follows from what each pays for (spot vs on-demand, lost work since the last"
    " checkpoint, AgileML's cheap tiers); out of order means billing, evictions or a scheme's policy changed"
)


@dataclass(frozen=True)
class Claim:
    claim: str
    paper: str
    lo: float
    hi: float
    source: str
    widen: float = WIDEN
    ratio: bool = False  # shown as "3.1x" rather than a signed percentage
    market_bound: bool = True  # a magnitude of the 2016 market: checked, not gated
    why: str = ""  # why ours may miss it, for a claim that is not market-bound


COST_CLAIMS: dict[str, Claim] = {
    "proteus_vs_on_demand": Claim("Proteus cost vs all on-demand", "-83..-85%", -0.85, -0.83, "Figs. 8-9"),
    "proteus_vs_std_ckpt": Claim(
        "Proteus cost vs Standard+Checkpoint", "-42..-47%", -0.47, -0.42, "Figs. 8-9"
    ),
    "proteus_vs_std_agileml": Claim(
        "Proteus cost vs Standard+AgileML",
        "-28..-35% (derived)",
        -0.35,
        -0.28,
        "§6.3: 42-47% total, 18-20% AgileML",
    ),
    "agileml_vs_ckpt": Claim(
        "Standard+AgileML cost vs Standard+Checkpoint", "-18..-20%", -0.20, -0.18, "§6.3"
    ),
    "runtime_vs_ckpt": Claim(
        "Proteus runtime vs Standard+Checkpoint", "-32..-43%", -0.43, -0.32, "§6.3, Fig. 1"
    ),
    "free_fraction": Claim("Proteus compute that is free (2 h jobs)", "32%", 0.32, 0.32, "Fig. 10"),
    "runtime_vs_on_demand": Claim("Proteus runtime vs all on-demand", "-24%", -0.24, -0.24, "Fig. 1 (MLR)"),
    "just_above_runtime": Claim(
        "Just-above+Checkpoint runtime / Proteus runtime", "3-4x", 3.0, 4.0, "§6.3", widen=0.5, ratio=True
    ),
    "just_above_cost": Claim(
        "Just-above+Checkpoint cost vs Proteus",
        "higher (> 0%)",
        0.0,
        math.inf,
        "§6.3",
        widen=0.0,
        market_bound=False,
        why="the just-above scheme buys at the market price, is evicted on every rise and redoes the work"
        " since its last checkpoint; costing less than Proteus means billing or eviction changed",
    ),
}

# Market-independent orderings the paper's comparisons rest on (§6.3, Figs. 1, 8-9): (config, metric) lists
# that must be strictly increasing.
ORDER_CLAIMS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "cost_order": (
        "Cost order: Proteus < Standard+AgileML < Standard+Checkpoint < all on-demand",
        "cost_usd",
        ("proteus", "standard_agileml", "standard_checkpoint", "on_demand"),
    ),
    "runtime_order": (
        "Runtime order: Proteus < Standard+Checkpoint",
        "runtime_h",
        ("proteus", "standard_checkpoint"),
    ),
}


def reproduce(quick: bool, out: Path) -> int:
    """Run every claim, print the table, write ``<out>/claims.json``; 0 when every gated claim holds."""
    starts = 4 if quick else 50
    metrics = run_plan(starts, out / "runs")
    rows = [*market_rows(metrics, starts), *stage_claims(), *flexrr_claims(3 if quick else 12, out / "runs")]
    seeds = list(range(1, starts + 1))
    title = f"proteus claims{' (quick)' if quick else ''}: {starts} starts per job length and market"
    return report("proteus", PAPER, quick, seeds, out, rows, title)


RunKey = tuple[str, float, int, str]  # market, job hours, start seed, configuration


def run_plan(starts: int, cache: Path) -> dict[RunKey, dict[str, float]]:
    """Every run's metrics, from ``cache`` or simulated (and then cached)."""
    cache.mkdir(parents=True, exist_ok=True)
    plan = [
        (market, hours, seed, config)
        for market in MARKETS
        for hours in JOB_HOURS
        for seed in range(1, starts + 1)
        for config in CONFIGS
    ]
    metrics = {}
    with progress_bar("reproduce proteus", lines=True) as progress:
        for i, key in enumerate(plan):
            metrics[key] = _cached_run(cache, *key)
            progress((i + 1) / len(plan), f"{i + 1}/{len(plan)} runs")
    return metrics


def market_rows(metrics: dict[RunKey, dict[str, float]], starts: int) -> list[ClaimRow]:
    """The cost and runtime claims and the orderings, one row per market and job length."""
    rows = []
    for market in MARKETS:
        for cid, claim in COST_CLAIMS.items():
            for hours in JOB_HOURS:
                if cid == "free_fraction" and hours != 2.0:
                    continue
                runs = [metrics[(market, hours, s, c)] for s in range(1, starts + 1) for c in CONFIGS]
                if claim.market_bound:
                    why = NOT_GATING["market"]
                elif market not in GATED_MARKETS:
                    why = NOT_GATING["2016-synthetic"]
                else:
                    why = claim.why
                rows.append(
                    ClaimRow(
                        f"{cid.replace('_', '-')}-{market}-{hours:g}h",
                        f"{claim.claim} [{market} market, {hours:g} h job]",
                        claim.source,
                        claim.paper,
                        _claim_value(cid, runs, starts),
                        (claim.lo - claim.widen, claim.hi + claim.widen),
                        "{:.2f}x" if claim.ratio else ("{:.0%}" if cid == "free_fraction" else "{:+.0%}"),
                        gated=market in GATED_MARKETS and not claim.market_bound,
                        why=why,
                    )
                )
        for cid, (text, metric, order) in ORDER_CLAIMS.items():
            for hours in JOB_HOURS:
                means = [
                    statistics.fmean(metrics[(market, hours, s, c)][metric] for s in range(1, starts + 1))
                    for c in order
                ]
                shown = " < ".join(f"${v:,.0f}" if metric == "cost_usd" else f"{v:.2f} h" for v in means)
                pairs = len(order) - 1
                rows.append(
                    ClaimRow(
                        f"{cid.replace('_', '-')}-{market}-{hours:g}h",
                        f"{text} [{market} market, {hours:g} h job; ours: {shown}] (pairs in order)",
                        "§6.3, Figs. 1, 8-9",
                        "holds",
                        float(sum(a < b for a, b in zip(means, means[1:], strict=False))),
                        (pairs, pairs),
                        f"{{:.0f}} of {pairs}",
                        gated=market in GATED_MARKETS,
                        why=ORDER_WHY if market in GATED_MARKETS else NOT_GATING["2016-synthetic"],
                    )
                )
    return rows


def stage_claims() -> list[ClaimRow]:
    """AgileML stage slowdowns from the performance model (relative to traditional, same machines)."""
    from clustertwin.sim.spot.perf import DEFAULT_PERF as m

    def row(cid: str, claim: str, source: str, paper: str, value: float, accept: tuple[float, float],
            why: str, gated: bool = True) -> ClaimRow:  # fmt: skip
        return ClaimRow(cid, claim, source, paper, value, accept, "{:+.0%}", gated=gated, why=why)

    model = "the stage performance model (sim/spot/perf.py) departs from the paper's measurement here"
    anchor = "a calibration anchor of the stage performance model: the model's fit has changed"
    return [
        row("stage1-60t4r", "Stage 1 slowdown at 60T:4R", "Fig. 11", ">85%", m.slowdown(1, 4, 60) - 1,
            (0.85, math.inf), model),
        row("stage1-32t32r", "Stage 1 slowdown at 32T:32R", "Fig. 11", "negligible",
            m.slowdown(1, 32, 32) - 1, (-math.inf, 0.05), NOT_GATING["overlap"], gated=False),
        row("stage2-56t8r", "Stage 2 slowdown at 56T:8R", "Fig. 12", "none", m.slowdown(2, 8, 56) - 1,
            (-math.inf, 0.05), model),
        row("stage2-60t4r", "Stage 2 slowdown at 60T:4R (calibration anchor)", "Fig. 12", "≈18%",
            m.slowdown(2, 4, 60) - 1, (0.13, 0.23), anchor),
        row("stage2-63t1r", "Stage 2 slowdown at 63T:1R (calibration anchor)", "§3.2", "2x (+100%)",
            m.slowdown(2, 1, 63) - 1, (0.75, 1.25), anchor),
        row("stage3-63t1r", "Stage 3 slowdown at 63T:1R", "Fig. 13", "≈0 (matches)", m.slowdown(3, 1, 63) - 1,
            (-0.05, 0.05), model),
        row("stage2-vs-stage3-8t8r", "Stage 2 time / stage 3 time at 8T:8R, minus 1", "Fig. 14",
            "< 0 (stage 2 wins)", m.iteration(2, 8, 8) / m.iteration(3, 8, 8) - 1, (-math.inf, 0.0), model),
    ]  # fmt: skip


FLEXRR_CLAIMS = Path(__file__).resolve().parents[1] / "scenarios" / "claims" / "spot" / "flexrr.yaml"


def flexrr_claims(starts: int, cache: Path, path: Path | None = None) -> list[ClaimRow]:
    """FlexRR inside AgileML's workers (``scenarios/claims/spot/flexrr.yaml``): per market, the mean over
    ``starts`` starts of AgileML+FlexRR's metric over the other configuration's, minus 1; it must be below
    0 (gated: an ordering that follows from what each configuration does, on any market)."""
    import yaml

    spec = yaml.safe_load((path or FLEXRR_CLAIMS).read_text(encoding="utf-8"))
    rows = []
    for market, market_overrides in spec["markets"].items():
        runs = {
            (config, seed): _cached_overrides(
                cache, (*spec["job"], *market_overrides, *overrides, f"seed={seed}")
            )
            for config, overrides in spec["configs"].items()
            for seed in range(1, starts + 1)
        }
        for claim in spec["claims"]:
            metric, other = claim["metric"], claim["vs"]
            per_seed = tuple(
                runs[("agileml_flexrr", s)][metric] / runs[(other, s)][metric] - 1
                for s in range(1, starts + 1)
            )
            rows.append(
                ClaimRow(
                    f"{claim['id']}-{market}",
                    f"{claim['claim']} [{market} market, {starts} starts]",
                    spec["source"],
                    spec["paper"],
                    statistics.fmean(per_seed),
                    (-math.inf, 0.0),
                    "{:+.0%}",
                    why=claim["why"],
                    per_seed=per_seed,
                )
            )
    return rows


def _cached_overrides(cache: Path, overrides: tuple[str, ...]) -> dict[str, float]:
    cache.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(json.dumps(["spot-default", list(overrides)]).encode()).hexdigest()[:16]
    path = cache / f"{key}.json"
    if path.is_file():
        return json.loads(path.read_text())
    metrics = simulate(overrides)
    write_json(path, metrics, default=_jsonable)
    return metrics


def _claim_value(cid: str, runs: list[dict[str, float]], starts: int) -> float:
    by = {c: [runs[i * len(CONFIGS) + j] for i in range(starts)] for j, c in enumerate(CONFIGS)}

    def mean(config: str, metric: str) -> float:
        return statistics.fmean(r[metric] for r in by[config])

    if cid == "proteus_vs_on_demand":
        return mean("proteus", "cost_usd") / mean("on_demand", "cost_usd") - 1
    if cid == "proteus_vs_std_ckpt":
        return mean("proteus", "cost_usd") / mean("standard_checkpoint", "cost_usd") - 1
    if cid == "proteus_vs_std_agileml":
        return mean("proteus", "cost_usd") / mean("standard_agileml", "cost_usd") - 1
    if cid == "agileml_vs_ckpt":
        return mean("standard_agileml", "cost_usd") / mean("standard_checkpoint", "cost_usd") - 1
    if cid == "runtime_vs_ckpt":
        return mean("proteus", "runtime_h") / mean("standard_checkpoint", "runtime_h") - 1
    if cid == "free_fraction":
        return mean("proteus", "free_compute_fraction")
    if cid == "runtime_vs_on_demand":
        return mean("proteus", "runtime_h") / mean("on_demand", "runtime_h") - 1
    if cid == "just_above_runtime":
        return mean("just_above_checkpoint", "runtime_h") / mean("proteus", "runtime_h")
    if cid == "just_above_cost":
        return mean("just_above_checkpoint", "cost_usd") / mean("proteus", "cost_usd") - 1
    raise KeyError(cid)


def _cached_run(cache: Path, market: str, hours: float, seed: int, config: str) -> dict[str, float]:
    overrides = (*MARKETS[market], *CONFIGS[config], f"job.reference_hours={hours}", f"seed={seed}")
    return _cached_overrides(cache, overrides)


def simulate(overrides: tuple[str, ...]) -> dict[str, float]:
    """One run of the bundled spot-default scenario with ``overrides``; its flat metrics."""
    from clustertwin.analysis.spot_metrics import spot_metrics
    from clustertwin.scenarios.load import load_scenario
    from clustertwin.scenarios.spot_schema import DEFAULT_SPOT_SCENARIO
    from clustertwin.sim.spot import run

    result = run(load_scenario(DEFAULT_SPOT_SCENARIO, overrides))
    if not result.info["completed"]:
        raise RuntimeError(f"run did not finish: {overrides}")
    return spot_metrics(result)


def _jsonable(value: object) -> object:
    if isinstance(value, float) and math.isnan(value):
        return None
    return str(value)


if __name__ == "__main__":  # python -m clustertwin.reproduce_proteus [--quick] [OUT]
    args = [a for a in sys.argv[1:] if a != "--quick"]
    sys.exit(reproduce("--quick" in sys.argv[1:], Path(args[0]) if args else Path("runs/reproduce-proteus")))
