"""``clustertwin reproduce cloud``: the cloud-pricing chapter of [Narayanan] (ch. 6, §6.3) as claim rows.

The claims are data (``scenarios/claims/cloud/claims.yaml``: source, paper value, band, gating, why); the
figures come from one replay of the chapter's own price logs (``analysis.cloud_whatif``). ``--quick``
starts jobs every 48 h instead of every 12 h. The tables behind the rows are written next to
``claims.json`` as CSV (``table_6_1.csv`` ... ``fig_6_6.csv``).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from clustertwin.atomic import write_text
from clustertwin.claim_results import ClaimRow, report
from clustertwin.errors import InputError
from clustertwin.progress import progress_bar
from clustertwin.scenarios.claims import CLAIMS_DIR, FigureClaim, load_claim_file

CLAIMS_FILE = CLAIMS_DIR / "cloud" / "claims.yaml"
NAME = "cloud"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Inputs(_Strict):
    models: dict[str, str]  # Table 6.1's model -> Gavel job type
    sizes: dict[str, tuple[float, float]]  # Table 6.2's model -> (dataset GB, model GB)
    min_gain: Annotated[float, Field(ge=0.0, lt=1.0)]
    job_v100_days: Annotated[float, Field(gt=0.0)]
    durations_v100_days: list[Annotated[float, Field(gt=0.0)]]
    start_every_h: dict[str, Annotated[float, Field(gt=0.0)]]


class CloudClaims(_Strict):
    paper: str
    inputs: Inputs
    claims: list[FigureClaim]


def load_cloud_claims(path: Path = CLAIMS_FILE) -> CloudClaims:
    return load_claim_file(path, CloudClaims)


def reproduce(name: str, quick: bool, *, out: Path, workers: int | None = None) -> int:
    """Replay, print the table, write ``<out>/claims.json`` and the tables; 0 when every gated claim holds."""
    claims = load_cloud_claims()
    with progress_bar("reproduce cloud", lines=True) as progress:
        metrics, tables = figures(claims.inputs, quick, progress)
    out.mkdir(parents=True, exist_ok=True)
    for table_name, table in tables.items():
        write_text(out / f"{table_name}.csv", table.to_csv(index=False))
    rows = []
    for c in claims.claims:
        if c.metric not in metrics:
            raise InputError(f"{CLAIMS_FILE}: claim {c.id}", f"unknown metric {c.metric!r}")
        rows.append(
            ClaimRow(c.id, c.claim, c.source, c.paper, metrics[c.metric], c.accept, c.fmt, c.gated, c.why)
        )
    every = claims.inputs.start_every_h["quick" if quick else "full"]
    title = f"cloud claims{' (quick)' if quick else ''}: 4 V100-day jobs started every {every:g} h"
    return report(NAME, claims.paper, quick, [], out, rows, title)


def figures(
    inputs: Inputs, quick: bool, progress: Callable[[float, str], None] = lambda f, s: None
) -> tuple[dict[str, float], dict[str, pd.DataFrame]]:
    """Every figure a claim may name (``t61.<model>.speedup_V100`` ...), and the tables they come from."""
    from clustertwin.analysis import cloud_whatif as w
    from clustertwin.analysis.cloud_market import default_board
    from clustertwin.traces.cloud_catalog import load_cloud_on_demand, load_egress
    from clustertwin.traces.gavel_throughputs import ThroughputTable

    board = default_board()
    throughputs = ThroughputTable.bundled()
    on_demand = load_cloud_on_demand()
    m: dict[str, float] = {}

    t61 = w.table_6_1(throughputs, inputs.models, on_demand)
    for r in t61.itertuples():
        for col in ("speedup_P100", "speedup_V100", "dollar_P100", "dollar_V100"):
            m[f"t61.{r.model}.{col}"] = float(getattr(r, col))
    m["t61.v100_min"] = float(t61["speedup_V100"].min())
    m["t61.v100_max"] = float(t61["speedup_V100"].max())
    cheapest = dict(zip(t61["model"], t61["cheapest_per_work"], strict=True))
    m["t61.cheaper_than_v100"] = float(sum(cheapest.get(x) != "V100" for x in ("A3C", "Transformer")))
    progress(0.1, "Table 6.1")

    # 160 V100-hours at the AWS us-east-1 1xV100 spot price: its typical (median) level in the trace.
    v100 = [
        p for o, _, p in board.series() if o.cloud == "aws" and o.spot and o.instance_type == "p3.2xlarge"
    ]
    v100_price = float(pd.Series([x for p in v100 for x in p]).median())
    egress = load_egress()
    t62 = w.table_6_2(inputs.sizes, egress["aws"], v100_price)
    for r in t62.itertuples():
        m[f"t62.{r.model}.dataset_share"] = float(r.dataset_share)
        m[f"t62.{r.model}.model_share"] = float(r.model_share)
    cells = {
        f"{c}-{g.lower()}": (c, region, g)
        for c, region, gpus in (
            ("aws", "us-east-1", ("K80", "V100")),
            ("gcp", "us-west1", ("K80", "P100", "V100")),
            ("azure", "us-east", ("K80", "P100", "V100")),
        )
        for g in gpus
    }
    # Beyond the table: the other regions of the chapter's Azure logs (on demand: libcloud's catalogue).
    for region, gpus in (("us-north-central", ("K80",)), ("us-south-central", ("K80", "P100", "V100"))):
        cells.update({f"azure-{region}-{g.lower()}": ("azure", region, g) for g in gpus})
    t63 = w.table_6_3(board, cells)
    m.update({f"t63.{k}": float(v) for k, v in t63.items()})
    # The same ratio in libcloud's own later catalogue (pay-as-you-go / low-priority, US East).
    m.update({f"t63.{k}": v for k, v in w.azure_ratios_2025().items()})
    progress(0.2, "Tables 6.2, 6.3")

    aws_start, aws_end = board.first_and_last("aws")
    # Over the span every AWS market has prices (p2.xlarge's history starts later than the others').
    common = max(t[0] for o, t, _ in board.series() if o.cloud == "aws" and o.spot)
    f64 = w.per_gpu_prices(board, "aws", "us-east-1", pd.Timestamp(int(common), tz="UTC"), aws_end)
    by = {(r.gpu_type, r.gpus): r for r in f64.itertuples()}
    for gpu, sizes in (("K80", (1, 8, 16)), ("V100", (1, 4, 8))):
        for n in sizes:
            m[f"f64.{gpu.lower()}_{n}"] = float(by[(gpu, n)].mean_gpu_price)
        m[f"f64.{gpu.lower()}_cv_ratio"] = float(by[(gpu, sizes[-1])].cv / by[(gpu, 1)].cv)

    # Starts where both clouds of Fig. 6.5 have prices, the job's nominal length before their end.
    first, last = board.first_and_last("azure")
    every = pd.Timedelta(hours=inputs.start_every_h["quick" if quick else "full"])
    span_end = last - pd.Timedelta(days=inputs.job_v100_days)
    starts = list(pd.date_range(max(first, aws_start), span_end, freq=every))
    f65 = w.stacked_savings(board, throughputs, inputs.models, starts, inputs.job_v100_days, inputs.min_gain)
    cost = {(r.model, r.strategy): r.cost_usd for r in f65.itertuples()}
    f65["reduction_vs_spot_v100"] = [cost[(r.model, "spot")] / r.cost_usd for r in f65.itertuples()]
    totals = {x: cost[(x, "spot")] / cost[(x, "dynamic")] for x in inputs.models}
    m.update({f"f65.{x}.total": v for x, v in totals.items()})
    m["f65.max_total"] = max(totals.values())
    m["f65.resnet50_least"] = float(min(totals, key=totals.__getitem__) == "ResNet-50")
    m["f65.multi_gpu_gain"] = max(cost[(x, "gpu_type")] / cost[(x, "multi_gpu")] for x in inputs.models)
    progress(0.6, "Fig. 6.5")

    rows = []
    for i, days in enumerate(inputs.durations_v100_days):
        # Longer jobs start earlier so that every start still sees its nominal length of prices.
        late = last - pd.Timedelta(days=days)
        s = [t for t in starts if t <= late] or [first]
        f = w.stacked_savings(
            board, throughputs, inputs.models, s, days, inputs.min_gain, ("multi_cloud", "dynamic")
        )
        c = {(r.model, r.strategy): r for r in f.itertuples()}
        for x in inputs.models:
            rows.append(
                {
                    "v100_days": days,
                    "model": x,
                    "starts": len(s),
                    "reduction": c[(x, "multi_cloud")].cost_usd / c[(x, "dynamic")].cost_usd,
                    "switches": c[(x, "dynamic")].switches,
                    "max_switches": c[(x, "dynamic")].max_switches,
                }
            )
        progress(0.6 + 0.4 * (i + 1) / len(inputs.durations_v100_days), f"Fig. 6.6, {days:g} V100-days")
    f66 = pd.DataFrame(rows)
    best = f66.groupby("v100_days")["reduction"].max()
    m.update({f"f66.{d:g}d": float(v) for d, v in best.items()})
    longest = max(inputs.durations_v100_days)
    m["f66.long_beats_short"] = float(best[longest] > best[best.index <= 2.0].max())
    m["f66.max_switches"] = float(f66[f66["v100_days"] == inputs.job_v100_days]["max_switches"].max())
    ckpt_gb = inputs.sizes["ResNet-50"][1]
    from clustertwin.traces.cloud_catalog import egress_usd

    m["f66.move_usd"] = egress_usd(egress["aws"], 10_000 * ckpt_gb) / 10_000
    m["f65.mean_switches"] = statistics.fmean(f65[f65["strategy"] == "dynamic"]["switches"])
    tables = {
        "table_6_1": t61,
        "table_6_2": t62,
        "table_6_3": pd.DataFrame([t63]),
        "fig_6_4": f64,
        "fig_6_5": f65,
        "fig_6_6": f66,
    }
    return m, tables
