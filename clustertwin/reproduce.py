"""``clustertwin reproduce NAME [--quick]``: run a paper's claims and print claim | paper | ours | accept.

A claim is a ratio of one metric between a baseline and a treatment run of the same scenario, one
metric of a treatment run, a measure computed from recorded runs or from the policies themselves, or
unmeasured (see ``scenarios/claims.py``). Runs go to a process pool (``claim_runs``); each finished
run's metrics are written at once to ``<out>/runs/<key>.json``, so an interrupted reproduction loses
nothing and a rerun reuses what is there.
Every claim with a band gates: the exit status is 1 when any falls outside it (its ``why`` says why).
"""

from __future__ import annotations

import math
import os
import statistics
from pathlib import Path

from clustertwin.claim_results import ClaimRow, report
from clustertwin.claim_runs import Spec, run_specs
from clustertwin.scenarios.claims import Claim, load_claims


def runs_of(claim: Claim, quick: bool) -> dict[str, list[Spec]]:
    if not claim.runs:
        return {}
    variant = claim.quick if quick else claim.full
    scenario = str(claim.scenario_path())
    common = list(claim.full.set) + (list(claim.quick.set) if quick else [])
    return {
        arm: [Spec(scenario, tuple(common + list(extra) + [f"seed={seed}"])) for seed in variant.seeds]
        for arm, extra in (("baseline", claim.baseline), ("treatment", claim.treatment))
        if arm == "treatment" or claim.measure == "ratio"
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
        if claim.measure == "ratio":
            per_seed = [
                done[b.key][claim.metric] / done[t.key][claim.metric]
                for b, t in zip(arms["baseline"], arms["treatment"], strict=True)
            ]
        elif claim.measure == "value":
            per_seed = [done[t.key][claim.metric] for t in arms["treatment"]]
        elif claim.measure == "computed":
            from clustertwin.analysis.gavel_claim_measures import compute

            per_seed = [compute(claim.metric, claim.args)]
        else:
            per_seed = [math.nan]
        shown = {m: statistics.fmean(done[t.key][m] for t in arms["treatment"]) for m in claim.show}
        rows.append(claim_row(claim, per_seed, shown))
    seeds = sorted(
        {
            seed
            for claim in claim_set.claims
            if claim.runs
            for seed in (claim.quick if quick else claim.full).seeds
        }
    )
    return report(name, claim_set.paper, quick, seeds, out, rows)


def claim_row(claim: Claim, per_seed: list[float], shown: dict[str, float] | None = None) -> ClaimRow:
    """A claim's row from its value per seed (ours is their mean); ``shown`` metrics join its text."""
    text = claim.claim
    if shown:
        text += " (ours: " + ", ".join(f"{k}={v:.3g}" for k, v in shown.items()) + ")"
    return ClaimRow(
        claim.id,
        text,
        claim.source,
        claim.paper,
        statistics.fmean(per_seed),
        claim.accept,
        "{:.2f}x" if claim.measure == "ratio" else "{:.3g}",
        gated=claim.gated,
        why=claim.why,
        per_seed=tuple(per_seed) if claim.runs else None,
    )
