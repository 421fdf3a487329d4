"""What a Gavel scheduler knows of jobs sharing a GPU ([Narayanan] §5.3.1, §5.3.3, Fig. 5.16): the table's
pair throughputs (an oracle), or estimates from profiling new jobs against reference types.

Both executors build their scheduler's colocation oracle here (``scenarios.gavel_scheduler``).

The scheduler does not know how two jobs will do when they share a GPU; Gavel profiles each new job type
against a fraction of the pre-profiled reference types on dedicated workers, and the estimator
(``policies.gavel.estimator``) completes the rest of its row and names its nearest reference. Here the
"measurements" are the true table values. The references are every single-GPU type of the table, as in
Gavel's artifact (whose reference set defaults to its whole job table), so a job's own type is among
them; ``references="others"`` leaves it out, so that the estimate is a prediction for a type never seen.
The policy then plans with the estimated pair throughputs while the simulator moves jobs at the true
ones; a pair that shared a round plans with its measured rates from then on (the scheduler's
``observe_pair``).

Only single-GPU job types are estimated (pairs of larger jobs get no estimate, so they are not packed).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Literal

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
    table: ThroughputTable,
    worker_types: tuple[str, ...],
    profiling_fraction: float,
    rng: np.random.Generator,
    references: Literal["all", "others"] = "all",
) -> Colocation:
    """A colocation oracle that plans each pair with its reference jobs' measured pair throughputs.

    As Gavel's estimator does, per worker type: the reference matrix holds the single-GPU reference
    types' normalised throughputs with one another on that type; a job type is profiled against
    ``profiling_fraction`` of the references there, matrix completion fills the rest of its row, and the
    nearest reference row (cosine) is its reference on that type. Two jobs then plan with the
    throughputs their two references reached together (each normalised share times the job's own
    isolated throughput). ``references``: ``all`` single-GPU types of the table (Gavel's default, so a
    job's own type is among them), or ``others``, every type but the job's own (a type never seen).
    """
    types, matrix = normalised_colocation(table, worker_types)
    k = len(types)
    blocks = [matrix[:, w * k : (w + 1) * k] for w in range(len(worker_types))]
    nearest = np.zeros((len(worker_types), k), dtype=int)
    for w, block in enumerate(blocks):
        for a in range(k):
            refs = np.arange(k) if references == "all" else np.delete(np.arange(k), a)
            estimator = ThroughputEstimator(block[np.ix_(refs, refs)])
            measured = estimator.profiling_plan(profiling_fraction, rng)
            partial = np.where(measured, block[a, refs], np.nan)
            nearest[w, a] = refs[estimator.estimate(partial, rng).nearest]
    index = {t: i for i, t in enumerate(types)}

    def oracle(first: JobSpec, second: JobSpec) -> np.ndarray | None:
        if first.scale_factor != 1 or second.scale_factor != 1:
            return None
        a, b = index.get(first.job_type), index.get(second.job_type)
        if a is None or b is None:
            return None
        shares = np.array(
            [
                [block[nearest[w, a], nearest[w, b]], block[nearest[w, b], nearest[w, a]]]
                for w, block in enumerate(blocks)
            ]
        )
        if not shares.any():
            return None
        alone = np.column_stack([first.throughputs, second.throughputs])
        return shares * alone

    return oracle
