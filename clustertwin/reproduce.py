"""``clustertwin reproduce NAME [--quick]``: run a paper's claims and print claim | paper | ours | accept.

Each claim is a ratio of one metric between a baseline and a treatment run of the same scenario (see
``scenarios/claims.py``). Runs go to a process pool (``claim_runs``); each finished run's metrics are
written at once to ``<out>/runs/<key>.json``, so an interrupted reproduction loses nothing and a rerun
reuses what is there.
Every claim gates: the exit status is 1 when any falls outside its acceptance band (its ``why`` says why).
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

from clustertwin.claim_results import ClaimRow, report
from clustertwin.claim_runs import Spec, run_specs
from clustertwin.scenarios.claims import Claim, load_claims


def runs_of(claim: Claim, quick: bool) -> dict[str, list[Spec]]:
    variant = claim.quick if quick else claim.full
    scenario = str(claim.scenario_path())
    common = list(claim.full.set) + (list(claim.quick.set) if quick else [])
    return {
        arm: [Spec(scenario, tuple(common + list(extra) + [f"seed={seed}"])) for seed in variant.seeds]
        for arm, extra in (("baseline", claim.baseline), ("treatment", claim.treatment))
    }


def simulate(spec: Spec) -> dict[str, float]:
    """One simulation's flat metrics (runs in a worker process)."""
    from clustertwin.analysis.gavel_metrics import gavel_metrics
    from clustertwin.scenarios.load import load_scenario
    from clustertwin.sim.gavel.setup import run

    scenario = load_scenario(spec.scenario, spec.overrides)
    result = run(scenario)
    prices = scenario.cluster.prices
    metrics = gavel_metrics(result, dict(scenario.cluster.gpus), dict(prices) if prices else None)
    metrics["wall_s"] = float(result.info["wall_s"])
    return metrics


def reproduce(name: str, quick: bool, out: Path | None = None, workers: int | None = None) -> int:
    claim_set = load_claims(name)
    out = out or Path("runs") / f"reproduce-{name}{'-quick' if quick else ''}"
    plan = {claim.id: runs_of(claim, quick) for claim in claim_set.claims}
    specs = {spec.key: spec for arms in plan.values() for runs in arms.values() for spec in runs}
    done = run_specs(name, out, specs, simulate, workers or os.cpu_count() or 1)

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
        gated=claim.gated,
        why=claim.why,
        per_seed=tuple(per_seed),
    )
