"""Minimum makespan ([Narayanan] §5.4.2 "Minimize Makespan"), optionally under a budget (§6.4.3).

    min_X max_m s_m / τ_m(X)   s.t. (5.1)–(5.3)

is the same as max_X min_m τ_m(X) / s_m, so it is one max-min LP (`lp.solve_max_min`) rather than
Gavel's bisection over the makespan with a feasibility LP per step (stopping at a 5% gap); the LP is
exact and one solve. The max-min variable is scaled to t = D̄/M, where D̄ is the longest
remaining time under the equal-share allocation X^eq, so t is O(1). The efficiency phase then maximises
total normalised throughput among the minimum-makespan allocations (Gavel's feasibility LPs had no
objective, so non-bottleneck jobs got an arbitrary feasible point).

§6.4.3's budget B (total dollars for the remaining work) adds M·cost(X)/3600 ≤ B with prices in $/hour
and M in seconds. Since t = D̄/M this is cost(X) − (3600·B/D̄)·t ≤ 0, still linear, so the budgeted
problem is one LP too (the text bisects on M). cost(X) = Σ_m Σ_j c_j·sf_m·X[m,j] charges every GPU a
job holds (a pair's GPUs once); with single-GPU jobs, as in Ch. 6, it is the text's Σ_j c_j·X[m,j].

Heterogeneity-agnostic baseline (Gavel's code): every column of T becomes the job's throughput on a
reference type (V100), so the LP sees no speed difference between types; of its optima it returns the
symmetric one (`symmetric.symmetric_split`: each job's time over its usable types in proportion to their
sizes), since a vertex would favour some types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
from clustertwin.policies.gavel import lp
from clustertwin.policies.gavel.problem import Allocation, AllocationInput
from clustertwin.policies.gavel.symmetric import symmetric_allocation
from clustertwin.policies.registry import register

SECONDS_PER_HOUR = 3600.0
# t = D̄/M below this means M beyond 1e9 equal-share lifetimes: the budget cannot finish the work
# (the LP's exact answer is t = 0, which the solver returns only up to its tolerances).
NEVER = 1e-9


def reference_type_throughputs(throughputs: np.ndarray, column: int) -> np.ndarray:
    """The agnostic view: each job's throughput on type ``column`` in every type where it can run
    (its best throughput instead when it cannot run on that type)."""
    ref = throughputs[:, column]
    ref = np.where(ref > 0, ref, throughputs.max(axis=1))
    return np.where(throughputs > 0, ref[:, None], 0.0)


def column_costs(inp: AllocationInput, layout: lp.Layout) -> np.ndarray:
    """$/hour of each LP column at X = 1: price of its type times the GPUs its row holds."""
    return np.asarray(inp.prices, dtype=float)[layout.col] * np.asarray(layout.capacity.sum(axis=0)).ravel()


def solve_makespan(
    inp: AllocationInput, layout: lp.Layout, throughputs: np.ndarray, budget: float | None = None
) -> tuple[np.ndarray, float]:
    """(x, makespan in seconds) minimising the makespan of ``inp``'s remaining steps, within ``budget``
    dollars when given; the makespan is inf when no job has steps left or the budget allows no work."""
    steps = np.asarray(inp.remaining_steps, dtype=float)
    reference = lp.equal_share_throughput(throughputs, inp.num_workers)
    runnable = layout.runnable() & (steps > 0)
    if not runnable.any():
        return np.zeros(layout.nv), np.inf
    scale = float(np.max(steps[runnable] / reference[runnable]))
    coeff = np.divide(scale, steps, out=np.zeros(inp.n), where=runnable)
    extra = None
    if budget is not None:
        extra = lp.ExtraRows(
            sp.csr_matrix(column_costs(inp, layout)[None, :]),
            np.array([-np.inf]),
            np.array([0.0]),
            t_coeff=np.array([-SECONDS_PER_HOUR * budget / scale]),
        )
    x, t = lp.solve_max_min(layout, coeff, reference, extra)
    return x, (scale / t if t > NEVER else np.inf)


def makespan_view(
    inp: AllocationInput, aware: bool, space_sharing: bool, reference_type: str
) -> tuple[np.ndarray, lp.Layout]:
    """The throughputs the makespan LP sees (aware: T; agnostic: the reference type's) and its layout."""
    t, pair_t = lp.policy_throughputs(inp, aware, space_sharing)
    if not aware:
        column = inp.worker_types.index(reference_type) if reference_type in inp.worker_types else 0
        t = reference_type_throughputs(np.asarray(inp.throughputs, dtype=float), column)
        if pair_t is not None:
            # Colocated throughput relative to running alone, times the job's reference speed.
            members = inp.pairs.members
            pair_t = pair_t * np.stack([t[members[:, 0]], t[members[:, 1]]], axis=2)
    return t, lp.layout_for(inp, t, pair_t)


@register("makespan")
@dataclass(frozen=True)
class Makespan:
    """Minimise the time to finish every active job (the module docstring has the formulation)."""

    aware: bool = True
    space_sharing: bool = False
    reference_type: str = "v100"
    name: ClassVar[str] = "makespan"

    def allocate(self, inp: AllocationInput, rng: np.random.Generator) -> Allocation:
        inp.require("remaining_steps")
        t, layout = makespan_view(inp, self.aware, self.space_sharing, self.reference_type)
        x, _ = solve_makespan(inp, layout, t)
        allocation = lp.to_allocation(inp, layout, x)
        return allocation if self.aware else symmetric_allocation(inp, allocation, t)
