"""``clustertwin reproduce NAME [--quick]``: run a paper's claims and print claim | paper | ours | accept.

Each claim is a ratio of one metric between a baseline and a treatment run of the same scenario (see
``scenarios/claims.py``). Runs go to a process pool; each finished run's metrics are written at once to
``<out>/runs/<key>.json``, so an interrupted reproduction loses nothing and a rerun reuses what is there.
Every claim gates: the exit status is 1 when any falls outside its acceptance band (its ``why`` says why).
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from clustertwin.analysis.atomic import write_json
from clustertwin.claim_results import ClaimRow, report
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
    claim_set = load_claims(name)
    out = out or Path("runs") / f"reproduce-{name}{'-quick' if quick else ''}"
    cache = out / "runs"
    cache.mkdir(parents=True, exist_ok=True)
    plan = {claim.id: runs_of(claim, quick) for claim in claim_set.claims}
    todo = {spec.key: spec for arms in plan.values() for specs in arms.values() for spec in specs}
    done = {
        key: json.loads((cache / f"{key}.json").read_text())
        for key in todo
        if (cache / f"{key}.json").is_file()
    }
    pending = [spec for key, spec in todo.items() if key not in done]

    with progress_bar(f"reproduce {name}", lines=True) as progress:
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
    for claim in claim_set.claims:
        arms = plan[claim.id]
        per_seed = [
            done[b.key][claim.metric] / done[t.key][claim.metric]
            for b, t in zip(arms["baseline"], arms["treatment"], strict=True)
        ]
        rows.append(claim_row(claim, per_seed))
    seeds = sorted(
        {seed for claim in claim_set.claims for seed in (claim.quick if quick else claim.full).seeds}
    )
    return report(name, claim_set.paper, quick, seeds, out, rows)


def claim_row(claim: Claim, per_seed: list[float]) -> ClaimRow:
    """A claim's row from its baseline / treatment ratio per seed; ours is their mean."""
    return ClaimRow(
        claim.id,
        claim.claim,
        claim.source,
        claim.paper,
        statistics.fmean(per_seed),
        claim.accept,
        "{:.2f}x",
        why=claim.why,
        per_seed=tuple(per_seed),
    )
