"""What a Gavel scheduler knows of jobs sharing a GPU ([Narayanan] §5.3.1, §5.3.3, Fig. 5.16): the table's
pair throughputs (an oracle), or estimates from profiling new jobs against reference types.

Both executors build their scheduler's colocation oracle here (``scenarios.gavel_scheduler``).

The scheduler does not know how two jobs will do when they share a GPU; Gavel profiles each new job type
against a fraction of the pre-profiled reference types on dedicated workers, and the estimator
(``policies.gavel.estimator``) completes the rest. Here the "measurements" are the true table values, and
a job type is never its own reference (leave one out), so the estimate is a real prediction. The policy
then plans with the estimated pair throughputs while the simulator moves jobs at the true ones.

Only single-GPU job types are estimated (pairs of larger jobs get no estimate, so they are not packed);
estimates are not refined online as jobs run, which Gavel does with measured throughputs.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np
from clustertwin.policies.gavel.cluster import ClusterLayout
from clustertwin.policies.gavel.estimator import ThroughputEstimator
from clustertwin.policies.gavel.scheduler import JobSpec
from clustertwin.traces.gavel_throughputs import ThroughputTable

Colocation = Callable[[JobSpec, JobSpec], np.ndarray | None]


def colocation_oracle(table: ThroughputTable, layout: ClusterLayout) -> Colocation:
    """The table's pair throughputs per worker type of ``layout`` (None: the pair was never measured)."""

    @cache
    def pair(a: tuple[str, int], b: tuple[str, int]) -> np.ndarray | None:
        rows = [table.colocated(a, b, t) for t in layout.worker_types]
        if all(r is None for r in rows):
            return None
        return np.array([r if r is not None else (0.0, 0.0) for r in rows], dtype=float)

    def oracle(a: JobSpec, b: JobSpec) -> np.ndarray | None:
        return pair((a.job_type, a.scale_factor), (b.job_type, b.scale_factor))

    return oracle


def normalised_colocation(
    table: ThroughputTable, worker_types: tuple[str, ...]
) -> tuple[list[str], np.ndarray]:
    """Rows: single-GPU job types; columns: worker type × partner type; entries pair / isolated in [0, 1]."""
    types = [t for t in table.job_types() if table.has(t, 1)]
    matrix = np.zeros((len(types), len(worker_types) * len(types)))
    for a, job in enumerate(types):
        for w, worker in enumerate(worker_types):
            alone = table.isolated(job, 1, worker)
            for b, partner in enumerate(types):
                pair = table.colocated((job, 1), (partner, 1), worker)
                if pair is not None and alone > 0:
                    matrix[a, w * len(types) + b] = min(pair[0] / alone, 1.0)
    return types, matrix


def estimated_colocation(
    table: ThroughputTable, worker_types: tuple[str, ...], profiling_fraction: float, rng: np.random.Generator
) -> Colocation:
    """A colocation oracle that answers with each job type's estimated row (leave-one-out references)."""
    types, matrix = normalised_colocation(table, worker_types)
    estimated = np.zeros_like(matrix)
    for a in range(len(types)):
        others = np.array([r for r in range(len(types)) if r != a])
        estimator = ThroughputEstimator(matrix[others])
        measured = estimator.profiling_plan(profiling_fraction, rng)
        partial = np.where(measured, matrix[a], np.nan)
        estimated[a] = estimator.estimate(partial, rng).row
    index = {t: i for i, t in enumerate(types)}
    k = len(types)

    def oracle(first: JobSpec, second: JobSpec) -> np.ndarray | None:
        if first.scale_factor != 1 or second.scale_factor != 1:
            return None
        a, b = index.get(first.job_type), index.get(second.job_type)
        if a is None or b is None:
            return None
        shares = np.array(
            [[estimated[a, w * k + b], estimated[b, w * k + a]] for w in range(len(worker_types))]
        )
        if not shares.any():
            return None
        alone = np.column_stack([first.throughputs, second.throughputs])
        return shares * alone

    return oracle
