"""Gavel claims measured without a simulation (``measure: computed`` in ``scenarios/claims/gavel.yaml``):
from recorded real runs under ``results/``, or by evaluating the policies directly.

Each measure is a function of the claim's ``args`` returning one number; ``compute`` looks it up by the
claim's ``metric``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from clustertwin.policies.gavel.problem import AllocationInput
from clustertwin.policies.registry import make_policy
from clustertwin.traces.gavel_generator import generate_gavel_jobs
from clustertwin.traces.gavel_throughputs import ThroughputTable

from clustertwin.errors import InputError

REPOSITORY = Path(__file__).resolve().parents[1]


def lease_overhead_share(runs: list[str], lease: str, round_s: float) -> float:
    """The largest share of a ``round_s`` round that a ``lease`` ("started" or "renewed") loses to
    overhead, over the worker types of the recorded real runs ([Narayanan] Table 5.4).

    A real run records the mean seconds of a round not spent training per worker type and lease kind
    (``run.round_overhead_s`` of its ``summary.json``): process start, model build and checkpoint load
    for a started lease, the save/report handshake for a renewed one.
    """
    shares = []
    for run in runs:
        path = REPOSITORY / run / "summary.json"
        if not path.is_file():
            raise InputError(str(path), "recorded run not found (the results/ folder of the repository)")
        lost = json.loads(path.read_text())["run"]["round_overhead_s"]
        shares += [seconds / round_s for key, seconds in lost.items() if key.endswith(f"/{lease}")]
    if not shares:
        raise InputError(", ".join(runs), f"no {lease} leases recorded")
    return max(shares)


def hierarchical_throughput_loss(
    gpus_per_type: int, jobs: int, entity_weights: list[float], seed: int, throughputs: str = "simulation"
) -> float:
    """How much lower total effective throughput the agnostic multi-level fairness policy gets than the
    aware one, 1 − agnostic/aware ([Narayanan] §5.7.3, Fig. 5.12).

    Fig. 5.12's set-up: ``gpus_per_type`` GPUs of each of V100, P100, K80; single-GPU jobs added one at a
    time (every 4 timesteps), the first ``jobs / len(entity_weights)`` to entity 0 and so on, fairness
    across and within entities. The allocation changes only when a job arrives, so the time average is
    the mean over the states with 1 … ``jobs`` jobs. Total effective throughput is Σ_m τ_m(X) / T_m,best
    (in fastest-GPU equivalents, so that jobs of different types add up). The paper's job types are not
    given; ours are drawn by the trace generator from ``seed``.
    """
    table = ThroughputTable.bundled(throughputs)
    types = tuple(table.worker_types)
    trace = generate_gavel_jobs(table, num_jobs=jobs, jobs_per_hour=None, seed=seed)
    t = table.isolated_matrix([(j.job_type, 1) for j in trace], types)
    per_entity = -(-jobs // len(entity_weights))
    totals = {True: [], False: []}
    for n in range(1, jobs + 1):
        inp = AllocationInput(
            job_ids=np.arange(n),
            worker_types=types,
            num_workers=np.full(len(types), gpus_per_type),
            throughputs=t[:n],
            scale_factors=np.ones(n, dtype=int),
            entities=np.arange(n) // per_entity,
            entity_weights=dict(enumerate(entity_weights)),
        )
        for aware in (True, False):
            x = make_policy("hierarchical", aware=aware).allocate(inp, np.random.default_rng(seed)).fractions
            totals[aware].append(float(((t[:n] * x).sum(axis=1) / t[:n].max(axis=1)).sum()))
    return 1.0 - float(np.mean(totals[False])) / float(np.mean(totals[True]))


MEASURES: dict[str, Callable[..., float]] = {
    "lease_overhead_share": lease_overhead_share,
    "hierarchical_throughput_loss": hierarchical_throughput_loss,
}


def compute(name: str, args: dict[str, Any]) -> float:
    """The computed measure ``name`` of a claim, with its ``args``."""
    if name not in MEASURES:
        raise InputError(f"claim measure {name!r}", f"unknown; known: {', '.join(sorted(MEASURES))}")
    try:
        return float(MEASURES[name](**args))
    except TypeError as err:
        raise InputError(f"claim measure {name!r}", f"bad args {args}: {err}") from err
