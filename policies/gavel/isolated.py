"""The isolated baseline: every job gets a 1/n share of every worker type ([Narayanan], §5.4.4, §5.7).

``X^iso[m, j] = N_j / (n·sf_m)``, so the n jobs together use exactly the cluster; a row summing above 1
(fewer jobs than GPUs) is divided by its sum, so no job is promised more than all of its time. This is the
allocation whose feasibility gives Gavel's policies their sharing incentive, and FTF's ``τ_m(X^iso)``
reference (§5.4.2). The artifact's final version rescales row by row as here; an earlier one divided the
whole matrix by its largest row sum.
"""

from __future__ import annotations

import numpy as np
from clustertwin.policies.gavel.problem import Allocation, AllocationInput
from clustertwin.policies.registry import register


def isolated_fractions(
    num_workers: np.ndarray, scale_factors: np.ndarray, shares: int | None = None
) -> np.ndarray:
    """Rows ``N_j / (shares·sf)``, each divided by ``max(row sum, 1)``; ``shares`` defaults to the row count.

    Gandiva's baseline reuses it with ``shares`` = the number of job combinations.
    """
    sf = np.asarray(scale_factors, dtype=float)
    count = sf.shape[0] if shares is None else shares
    x = np.asarray(num_workers, dtype=float)[None, :] / (max(count, 1) * sf[:, None])
    return x / np.maximum(x.sum(axis=1, keepdims=True), 1.0)


@register("isolated")
class IsolatedPolicy:
    """The 1/n split, closed form; pair candidates are ignored.

    Time on a type where the job cannot run (T = 0) is withheld, so the round mechanism never spends a
    slot on it; every other entry is exactly X^iso.
    """

    name = "isolated"

    def allocate(self, inp: AllocationInput, rng: np.random.Generator) -> Allocation:
        x = isolated_fractions(inp.num_workers, inp.scale_factors)
        return Allocation(inp.job_ids, inp.worker_types, np.where(inp.throughputs > 0, x, 0.0))
