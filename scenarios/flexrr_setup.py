"""Build one FlexRR run from a scenario: item ranges, groups, policy machines and straggler profiles.

Straggler randomness comes from ``SeedSequence([seed, 1, ...])`` and depends only on the scenario's seed,
cluster and straggler fields, never on the mode, so BSP, SSP, BSP RR and FlexRR of one seed see the same
realisation (the paired comparison of §3.4). Message latency jitter uses its own stream.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from clustertwin.policies.flexrr import stragglers as st
from clustertwin.policies.flexrr.config import RRConfig
from clustertwin.policies.flexrr.convergence import ConvergenceModel
from clustertwin.policies.flexrr.groups import helpee_groups, helper_groups, machine_of
from clustertwin.policies.flexrr.straggler_models import StragglerParams, straggler_model
from clustertwin.policies.flexrr.worker import RRWorker
from clustertwin.scenarios.flexrr_results import frame
from clustertwin.scenarios.flexrr_schema import FlexRRScenario

STRAGGLER_STREAM, LATENCY_STREAM = 1, 2


def rr_config(scenario: FlexRRScenario) -> RRConfig:
    r = scenario.rr
    return RRConfig(
        helper_group_size=r.helper_group_size if scenario.rr_enabled else 0,
        initial_fraction=r.initial_fraction,
        follow_up_fraction=r.follow_up_fraction,
        trigger=r.trigger,
        progress_checkpoint=r.progress_checkpoint,
        message_checks=r.message_checks,
        replication=r.replication,
        avg_weight=r.avg_weight,
    )


def straggler_params(scenario: FlexRRScenario) -> StragglerParams:
    """The scenario's ``stragglers`` section as the straggler models read it (a trace loaded on demand)."""
    s = scenario.stragglers

    def series() -> list[list[float]]:
        from clustertwin.traces.alibaba_minibatch import job_factors, trace_factors

        if s.trace_file is not None:
            return list(trace_factors(Path(s.trace_file)))
        return [f for job in s.trace_jobs for f in job_factors(job)]

    return StragglerParams(
        delay=s.delay,
        probability=s.probability,
        points_per_iteration=s.points_per_iteration,
        max_duration=s.max_duration,
        period_s=s.period_s,
        alpha=s.alpha,
        heavy_share=s.heavy_share,
        heavy_machines=s.heavy_machines,
        series=series,
    )


def items_per_worker(scenario: FlexRRScenario) -> list[int]:
    """Items each worker owns, as the straggler model deals them (equal but for ``uneven``, §3.4.4)."""
    c = scenario.cluster
    model = straggler_model(scenario.stragglers.model)
    return model.items(straggler_params(scenario), scenario.items_per_worker, c.workers, c.machines)


def profiles(scenario: FlexRRScenario) -> list[st.SpeedProfile]:
    """One speed profile per worker (the workers of a disrupted machine share one).

    Worker ``w``'s undelayed iteration time is ``scenario.worker_iteration_s(w)``; workers outside
    ``stragglers.workers`` (when given) run at that nominal speed."""
    c, s = scenario.cluster, scenario.stragglers
    times = [scenario.worker_iteration_s(w) for w in range(c.workers)]
    slowed = set(range(c.workers)) if s.workers is None else set(s.workers)

    def rng(*key: int) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence([scenario.seed, STRAGGLER_STREAM, *key]))

    built = straggler_model(s.model).profiles(straggler_params(scenario), times, c.machines, rng)
    return [p if w in slowed else st.nominal(times[w]) for w, p in enumerate(built)]


def machines(scenario: FlexRRScenario, items: list[int]) -> list[RRWorker]:
    c = scenario.cluster
    cfg = rr_config(scenario)
    helpers = helper_groups(c.workers, c.machines, cfg.helper_group_size)
    helpees = helpee_groups(helpers)
    bounds = np.concatenate([[0], np.cumsum(items)])
    return [
        RRWorker(w, int(bounds[w]), int(bounds[w + 1]), helpers[w], helpees[w], cfg, scenario.iterations)
        for w in range(c.workers)
    ]


def run_tables(
    scenario: FlexRRScenario, items: list[int], iteration_log: list[tuple], commits: pd.DataFrame
) -> tuple[pd.DataFrame, dict[str, float | int | str]]:
    """The ``iterations`` table and the info both executors report, from what they logged: one
    ``(worker, iteration, start_s, own_done_s, end_s)`` row per worker iteration, and the commits."""
    helped = commits[commits["kind"] == "help"]
    reassigned = (
        helped.assign(n=helped["end_item"] - helped["start_item"]).groupby(["owner", "iteration"])["n"].sum()
    )
    machines_n = scenario.cluster.machines
    rows = [
        (w, machine_of(w, machines_n), it, start, own_done, end, items[w], int(reassigned.get((w, it), 0)))
        for w, it, start, own_done, end in iteration_log
    ]
    iterations = frame(rows, "iterations").sort_values(["iteration", "worker"], ignore_index=True)
    total_work = sum(items) * scenario.iterations / scenario.items_per_worker
    info: dict[str, float | int | str] = {
        "mode": scenario.mode,
        "slack": scenario.effective_slack,
        "workers": scenario.cluster.workers,
        "iterations": scenario.iterations,
        "makespan_s": float(iterations["end_s"].max()),
        # The Ideal bound of §3.4.1 from the same straggler realisation the run saw.
        "ideal_s": st.ideal_time(profiles(scenario), total_work),
        "total_items": int(sum(items) * scenario.iterations),
    }
    conv = scenario.convergence
    if conv.iterations is not None:
        needed = ConvergenceModel(conv.iterations, conv.per_staleness).iterations_to_target(
            scenario.effective_slack
        )
        info["iterations_to_target"] = needed
        info["time_to_target_s"] = info["makespan_s"] / scenario.iterations * needed
    return iterations, info
