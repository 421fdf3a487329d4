"""What-if: Gavel's cost policies on on-demand, spot and mixed fleets over the real 2020 AWS spot prices.

[Narayanan] §6.4 defines Gavel's cost policies (min_cost: max Σ T/c·X, Gavel's LP surrogate) and §6.2–6.3
argue that spot instances cut cost 2.7–8× with rare, warned preemptions; [Proteus] §2–§3 gives the market
rules (evicted when the price exceeds the bid, 2-minute warning) and billing schemes. Neither paper runs
Gavel's policies on a fleet that is actually evicted and billed; this script does, in simulation.

Grid (``scenarios/gavel/spot-whatif.yaml``: 8 V100 = p3.2xlarge + 8 K80 = p2.xlarge, us-east-1b,
60 Philly-like single-GPU jobs at 1 job/h, replay from 2020-02-20, per-second billing):

* fleets with the same GPUs per type: all on demand (8+8), all spot (8+8), mixed (4 on demand + 4 spot
  of each type);
* policies: ``min_cost`` and ``max_sum_throughput`` (§6.4.1–6.4.2);
* bids for the spot workers: the on-demand price (AWS's default; 2020 prices never reach it here) and a
  low bid just above each market's Feb–Mar 2020 median (V100 0.35×, K80 0.43× on demand).

Run: ``.venv/bin/python -m experiments.gavel_spot_whatif [--out DIR]`` (from the repository root);
writes ``whatif.csv``, ``whatif.md`` and ``cost_vs_jct.png`` to DIR (default ``runs/gavel-spot-whatif``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from clustertwin.analysis.gavel_market import market_metrics  # noqa: E402
from clustertwin.scenarios.load import load_scenario  # noqa: E402

from clustertwin.api import simulate  # noqa: E402
from clustertwin.atomic import write_atomically, write_text  # noqa: E402

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "gavel" / "spot-whatif.yaml"
TYPES = ("v100", "k80")
FLEETS = {"on-demand": (8, 0), "spot": (0, 8), "mixed": (4, 4)}  # (on demand, spot) per type
POLICIES = ("min_cost", "max_sum_throughput")
# Bid as a multiple of the on-demand price, per type. "low" sits just above each market's median price
# over Feb-Mar 2020 (p3.2xlarge us-east-1b 0.334x, p2.xlarge us-east-1b 0.429x on demand).
BIDS = {"on-demand bid": {"v100": 1.0, "k80": 1.0}, "low bid": {"v100": 0.35, "k80": 0.43}}
COLUMNS = {
    "cost_usd": "cost ($)",
    "cost_per_job_usd": "$/job",
    "used_cost_usd": "GPU-time used ($)",
    "avg_jct_h": "avg JCT (h)",
    "makespan_h": "makespan (h)",
    "evictions": "evictions",
    "preemptions": "jobs preempted",
    "work_lost_gpu_h": "work lost (GPU-h)",
    "jobs_completed": "jobs done",
}


def variants() -> list[tuple[str, str, str, list[str]]]:
    """(fleet, bid, policy, --set overrides) for every run of the grid; the on-demand fleet has no bid."""
    out = []
    for fleet, (od, spot) in FLEETS.items():
        for bid_name, bids in BIDS.items():
            if spot == 0 and bid_name != "on-demand bid":
                continue
            for policy in POLICIES:
                sets = [f"policy.name={policy}"]
                for t in TYPES:
                    sets += [
                        f"market.types.{t}.on_demand={od}",
                        f"market.types.{t}.spot={spot}",
                        f"market.types.{t}.bid_multiple={bids[t]}",
                    ]
                out.append((fleet, "-" if spot == 0 else bid_name, policy, sets))
    return out


def run_grid(scenario: Path = SCENARIO) -> pd.DataFrame:
    """Simulate every variant and return one row of metrics per (fleet, bid, policy)."""
    rows = []
    for fleet, bid, policy, sets in variants():
        loaded = load_scenario(scenario, sets)
        started = time.perf_counter()
        result = simulate(loaded)
        metrics = market_metrics(result, dict(loaded.cluster.gpus))
        rows.append(
            {"fleet": fleet, "bid": bid, "policy": policy, **{k: metrics[k] for k in COLUMNS}}
            | {"wall_s": time.perf_counter() - started}
        )
        print(
            f"{fleet:9s} {bid:13s} {policy:18s} ${metrics['cost_usd']:8.0f} "
            f"JCT {metrics['avg_jct_h']:6.1f} h  evictions {metrics['evictions']}",
            flush=True,
        )
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame) -> str:
    """The table as Markdown, money rounded to dollars, hours to 0.1."""
    head = ["fleet", "bid", "policy", *COLUMNS.values()]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in table.iterrows():
        cells = [r["fleet"], r["bid"], r["policy"]]
        for key in COLUMNS:
            v = r[key]
            if key in ("evictions", "preemptions", "jobs_completed"):
                cells.append(f"{int(v)}")
            elif key.endswith("usd"):
                cells.append(f"{v:,.0f}")
            else:
                cells.append(f"{v:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(table: pd.DataFrame, path: Path) -> None:
    """Cost vs average JCT, one point per (fleet, bid, policy)."""
    fig, ax = plt.subplots(figsize=(7.5, 5))
    colors = {"on-demand": "tab:blue", "spot": "tab:orange", "mixed": "tab:green"}
    markers = {"min_cost": "o", "max_sum_throughput": "s"}
    for _, r in table.iterrows():
        hollow = r["bid"] == "low bid"
        ax.scatter(
            r["avg_jct_h"],
            r["cost_usd"],
            marker=markers[r["policy"]],
            s=70,
            facecolors="none" if hollow else colors[r["fleet"]],
            edgecolors=colors[r["fleet"]],
            label=f"{r['fleet']}, {r['policy']}" + (", low bid" if hollow else ""),
        )
    ax.set_xlabel("average JCT (h)")
    ax.set_ylabel("fleet bill ($)")
    ax.set_title("Gavel cost policies on a 8 V100 + 8 K80 fleet, AWS us-east-1 prices from 2020-02-20")
    ax.title.set_fontsize(9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    write_atomically(path, lambda p: fig.savefig(p, format="png", dpi=120))
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/gavel-spot-whatif"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    table = run_grid()
    wall = time.perf_counter() - started
    write_atomically(args.out / "whatif.csv", lambda p: table.to_csv(p, index=False))
    write_text(args.out / "whatif.md", markdown(table) + f"\nwall time: {wall:.1f} s\n")
    plot(table, args.out / "cost_vs_jct.png")
    print(markdown(table))
    print(f"wall time {wall:.1f} s; wrote {args.out}")


if __name__ == "__main__":
    main()
