"""``clustertwin reproduce NAME [--quick]``: run a paper's claims and print claim | paper | ours | accept.

A claim is a ratio of one metric between a baseline and a treatment run of the same scenario, one
metric of a treatment run, a measure computed from recorded runs or from the policies themselves, or
unmeasured (see ``scenarios/claims.py``). Runs go to a process pool (``claim_runs``); each finished
run's metrics are written at once to ``<out>/runs/<key>.json``, so an interrupted reproduction loses
nothing and a rerun by the same code reuses what is there.
Every claim with a band gates: the exit status is 1 when any falls outside it (its ``why`` says why).
``--quick`` runs each claim's ``quick`` variant: a lighter point whose ``note`` joins the claim's text, or
none when ``quick.skip`` says why no lighter point keeps the claim's physics (reported, not judged).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING

from clustertwin.claim_results import ClaimRow, report
from clustertwin.claim_runs import Spec, run_specs
from clustertwin.scenarios.claims import Claim, ClaimSet, load_claims
from clustertwin.scenarios.results import RunResult

if TYPE_CHECKING:
    from collections.abc import Callable

    import pandas as pd

    from clustertwin.scenarios.gavel_schema import Scenario
    from clustertwin.sim.gavel.engine import GavelSimulation


def runs_of(claim: Claim, quick: bool) -> dict[str, list[Spec]]:
    """The claim's simulations by arm (``baseline``, ``treatment``); none when it needs none, or when
    ``--quick`` does not judge it (``quick.skip``)."""
    if not claim.runs or (quick and claim.quick.skip):
        return {}
    variant = claim.quick if quick else claim.full
    scenario = str(claim.scenario_path())
    common = list(claim.full.set) + (list(claim.quick.set) if quick else [])
    return {
        arm: [Spec(scenario, tuple(common + list(extra) + [f"seed={seed}"])) for seed in variant.seeds]
        for arm, extra in (("baseline", claim.baseline), ("treatment", claim.treatment))
        if arm == "treatment" or claim.measure == "ratio"
    }


Plan = dict[str, dict[str, list[Spec]]]  # claim id -> arm -> one run per seed
Tables = dict[str, "pd.DataFrame"]  # a simulation's event tables by name


def plan_of(claim_set: ClaimSet, quick: bool) -> Plan:
    return {claim.id: runs_of(claim, quick) for claim in claim_set.claims}


def specs_of(plan: Plan) -> dict[str, Spec]:
    """Every simulation of the plan once, by its key (claims that share a run share its key)."""
    return {spec.key: spec for arms in plan.values() for runs in arms.values() for spec in runs}


def simulate(spec: Spec) -> dict[str, float]:
    """One simulation's flat metrics (runs in a worker process); ``{"saturated": 1}`` when the run has no
    steady state (`bounded_run`)."""
    from clustertwin.analysis.gavel_metrics import gavel_metrics
    from clustertwin.scenarios.load import load_scenario

    started = time.process_time()
    scenario = load_scenario(spec.scenario, spec.overrides)
    result = bounded_run(scenario)
    if result is None:
        return {"saturated": 1.0, "cpu_s": time.process_time() - started}
    prices = scenario.cluster.prices
    metrics = gavel_metrics(result, dict(scenario.cluster.gpus), dict(prices) if prices else None)
    metrics["wall_s"] = float(result.info["wall_s"])
    metrics["cpu_s"] = time.process_time() - started  # what a run costs on a shared machine
    return metrics


class _Saturated(Exception):
    """The window's jobs were not done when the trace's last job arrived."""


def bounded_run(scenario: Scenario) -> RunResult | None:
    """The run of ``scenario`` that ``sim.gavel.setup.run`` returns, or None where it would refuse the
    run as past its saturation point, found at a fraction of the cost.

    ``setup.run`` sizes a ``num_jobs: auto`` trace at AUTO_FIRST times the window's end and doubles it
    while the trace's last job arrives before the window's last job finishes, up to AUTO_LIMIT times;
    past that the queue grows for as long as jobs arrive, and it refuses the run. Each try it rejects has
    been simulated to the end, its queue draining after the last arrival, which past saturation means
    thousands of jobs for thousands of hours (hours of CPU at 108 GPUs). Here each try stops as soon as
    the window is still unfinished when its last job arrives: the same tries, the same verdicts, the
    same result when one suffices (past the window's last completion the trace's size changes nothing).
    Gavel's own sweeps stop a run at a wall-clock timeout and plot it as infinite; this bound is in jobs
    arrived, so the verdict is the same on every machine.
    """
    from clustertwin.sim.gavel.setup import AUTO_LIMIT, auto_first_size, run, run_result

    n = auto_first_size(scenario)
    if n is None:
        return run(scenario)
    assert scenario.workload.window is not None  # auto sizes from the window
    started = time.perf_counter()
    while True:
        tables, simulation = run_until_last_arrival(scenario, n)
        if tables is not None:
            break
        if n >= AUTO_LIMIT * scenario.workload.window[1]:
            return None
        n *= 2
    return run_result(scenario, simulation, tables, started)


def run_until_last_arrival(
    scenario: Scenario, num_jobs: int, progress: Callable[[float, str], None] | None = None
) -> tuple[Tables | None, GavelSimulation]:
    """A simulation of ``num_jobs`` jobs and its tables; None for the tables when a window job was still
    running at the last arrival (the run stops at the first window completion after it, and
    ``simulation.tables()`` holds what it made so far). ``progress`` hears each window completion."""
    from clustertwin.scenarios.gavel_workload import arrivals_end_early
    from clustertwin.sim.gavel.setup import build

    simulation: GavelSimulation | None = None

    def stop_past_last_arrival(done: float, text: str) -> None:
        # the simulator calls this at each window job's completion
        assert simulation is not None
        if progress is not None:
            progress(done, text)
        if simulation.env.now > simulation.jobs[-1].spec.arrival_s:
            raise _Saturated

    simulation = build(scenario, stop_past_last_arrival, num_jobs)
    try:
        tables = simulation.run()
    except _Saturated:
        return None, simulation
    # A run that ends without the check firing is judged as setup.run judges it (should the simulator
    # call back less often than at every window completion, a late window drains and is caught here).
    return (None if arrivals_end_early(tables["jobs"]) else tables), simulation


def metric_of(run: dict[str, float], name: str) -> float:
    """A run's metric; infinite for a saturated run (every window metric grows without bound)."""
    return math.inf if run.get("saturated") else run[name]


def ratio_of(baseline: dict[str, float], treatment: dict[str, float], name: str) -> float:
    """baseline / treatment; infinite when only the baseline saturated, NaN (never in a band) when the
    treatment did."""
    if treatment.get("saturated"):
        return math.nan
    return metric_of(baseline, name) / treatment[name]


def reproduce(name: str, quick: bool, out: Path | None = None, workers: int | None = None) -> int:
    claim_set = load_claims(name)
    out = out or Path("runs") / f"reproduce-{name}{'-quick' if quick else ''}"
    plan = plan_of(claim_set, quick)
    done = run_specs(name, out, specs_of(plan), simulate, workers or os.cpu_count() or 1, longest_first)
    return report(
        name, claim_set.paper, quick, seeds_of(claim_set, quick), out, judge(claim_set, plan, done, quick)
    )


def longest_first(spec: Spec) -> bool:
    """The runs to start first: the continuous-multiple trace's, whose longest multi-GPU window jobs run
    for thousands of simulated hours behind the queue (CPU-minutes each), so that on a pool they do not
    finish last alone."""
    return Path(spec.scenario).stem == "continuous-multiple"


def seeds_of(claim_set: ClaimSet, quick: bool) -> list[int]:
    """The seeds the judged simulations ran with."""
    return sorted(
        {
            seed
            for claim in claim_set.claims
            if claim.runs and not (quick and claim.quick.skip)
            for seed in (claim.quick if quick else claim.full).seeds
        }
    )


def judge(claim_set: ClaimSet, plan: Plan, done: dict[str, dict[str, float]], quick: bool) -> list[ClaimRow]:
    """Each claim's row, from the finished runs ``done`` (metrics by spec key): ours, and its verdict
    where the claim has a band and this run judges it."""
    rows = []
    for claim in claim_set.claims:
        if quick and claim.quick.skip:
            rows.append(not_judged(claim, f"not judged in --quick: {claim.quick.skip}"))
            continue
        arms = plan[claim.id]
        if claim.measure == "ratio":
            per_seed = [
                ratio_of(done[b.key], done[t.key], claim.metric)
                for b, t in zip(arms["baseline"], arms["treatment"], strict=True)
            ]
        elif claim.measure == "value":
            per_seed = [metric_of(done[t.key], claim.metric) for t in arms["treatment"]]
        elif claim.measure == "computed":
            from clustertwin.analysis.gavel_claim_measures import compute

            per_seed = [compute(claim.metric, claim.args)]
        else:
            per_seed = [math.nan]
        treatments = [done[t.key] for t in arms.get("treatment", [])]
        shown = {m: statistics.fmean(metric_of(run, m) for run in treatments) for m in claim.show}
        note = claim.quick.note if quick else claim.full.note
        rows.append(claim_row(claim, per_seed, shown, note))
    return rows


def not_judged(claim: Claim, why: str) -> ClaimRow:
    """A claim reported without a verdict (no band, so never gated), with the reason."""
    return ClaimRow(claim.id, claim.claim, claim.source, claim.paper, math.nan, None, why=why)


def claim_row(
    claim: Claim, per_seed: list[float], shown: dict[str, float] | None = None, note: str = ""
) -> ClaimRow:
    """A claim's row from its value per seed (ours is their mean); ``shown`` metrics and the run's
    ``note`` (how its point departs from the claim's setup) join its text."""
    text = claim.claim
    if note:
        text += f" [this run: {note}]"
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
