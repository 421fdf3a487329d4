"""``clustertwin reproduce NAME [--quick]``: run a paper's claims and print claim | paper | ours | accept.

Each claim is a ratio of one metric between a baseline and a treatment run of the same scenario (see
``scenarios/claims.py``). Runs go to a process pool; each finished run's metrics are written at once to
``<out>/runs/<key>.json``, so an interrupted reproduction loses nothing and a rerun reuses what is there.
The exit status is 1 when any claim falls outside its acceptance band.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from clustertwin.atomic import write_json
from clustertwin.progress import progress_bar
from clustertwin.scenarios.claims import Claim, load_claims
from clustertwin.solver_banner import silence_solver_banner


@dataclass(frozen=True)
class RunSpec:
    scenario: str
    overrides: tuple[str, ...]

    @property
    def key(self) -> str:
        text = json.dumps([self.scenario, list(self.overrides)])
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def runs_of(claim: Claim, quick: bool) -> dict[str, list[RunSpec]]:
    variant = claim.quick if quick else claim.full
    scenario = str(claim.scenario_path())
    common = list(claim.full.set) + (list(claim.quick.set) if quick else [])
    return {
        arm: [RunSpec(scenario, tuple(common + list(extra) + [f"seed={seed}"])) for seed in variant.seeds]
        for arm, extra in (("baseline", claim.baseline), ("treatment", claim.treatment))
    }


def simulate(spec: RunSpec) -> dict[str, float]:
    """One simulation's flat metrics (runs in a worker process)."""
    from clustertwin.analysis.gavel_metrics import gavel_metrics
    from clustertwin.scenarios.load import load_scenario
    from clustertwin.sim import run_scenario

    scenario = load_scenario(spec.scenario, spec.overrides)
    result = run_scenario(scenario)
    prices = scenario.cluster.prices
    metrics = gavel_metrics(result, dict(scenario.cluster.gpus), dict(prices) if prices else None)
    metrics["wall_s"] = float(result.info["wall_s"])
    return metrics


def reproduce(name: str, quick: bool, out: Path | None = None, workers: int | None = None) -> int:
    claims = load_claims(name).claims
    out = out or Path("runs") / f"reproduce-{name}{'-quick' if quick else ''}"
    cache = out / "runs"
    cache.mkdir(parents=True, exist_ok=True)
    plan = {claim.id: runs_of(claim, quick) for claim in claims}
    todo = {spec.key: spec for arms in plan.values() for specs in arms.values() for spec in specs}
    done = {
        key: json.loads((cache / f"{key}.json").read_text())
        for key in todo
        if (cache / f"{key}.json").is_file()
    }
    pending = [spec for key, spec in todo.items() if key not in done]

    with progress_bar(f"reproduce {name}") as progress:
        progress(len(done) / max(len(todo), 1), f"{len(done)}/{len(todo)} runs")
        if pending:
            with ProcessPoolExecutor(
                workers or os.cpu_count() or 1, initializer=silence_solver_banner
            ) as pool:
                futures = {pool.submit(simulate, spec): spec for spec in pending}
                for future in as_completed(futures):
                    spec = futures[future]
                    done[spec.key] = future.result()
                    write_json(cache / f"{spec.key}.json", done[spec.key])
                    progress(len(done) / len(todo), f"{len(done)}/{len(todo)} runs")

    rows = []
    for claim in claims:
        arms = plan[claim.id]
        per_seed = [
            done[b.key][claim.metric] / done[t.key][claim.metric]
            for b, t in zip(arms["baseline"], arms["treatment"], strict=True)
        ]
        ours = statistics.fmean(per_seed)
        low, high = claim.accept
        rows.append(
            {
                "id": claim.id,
                "claim": claim.claim,
                "source": claim.source,
                "metric": claim.metric,
                "paper": claim.paper,
                "ours": ours,
                "ours_per_seed": per_seed,
                "accept": [low, high],
                "holds": bool(low <= ours <= high),
                "why": claim.why,
            }
        )
    write_json(out / "claims.json", {"name": name, "quick": quick, "claims": rows})
    _print_table(name, quick, rows)
    print(f"results: {out / 'claims.json'}")
    return 0 if all(row["holds"] for row in rows) else 1


def _print_table(name: str, quick: bool, rows: list[dict]) -> None:
    table = Table(title=f"{name} claims{' (quick)' if quick else ''}")
    for column in ("claim", "paper", "ours", "tolerance", "holds"):
        table.add_column(column, justify="left" if column == "claim" else "right")
    for row in rows:
        spread = ""
        if len(row["ours_per_seed"]) > 1:
            spread = f" ± {statistics.stdev(row['ours_per_seed']):.2f}"
        table.add_row(
            f"{row['id']}: {row['claim']} [{row['source']}]",
            f"{row['paper']:.2f}x",
            f"{row['ours']:.2f}x{spread}",
            f"[{row['accept'][0]:.2f}, {row['accept'][1]:.2f}]",
            "yes" if row["holds"] else "NO",
        )
    Console(width=max(Console().width, 140), file=sys.stdout).print(table)
