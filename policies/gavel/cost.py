"""Throughput and cost objectives for cloud deployments ([Narayanan] §6.4).

All four are LPs over the base constraints (5.1)–(5.3) (§6.4.1's per-type quotas are the N_j):

- ``max_sum_throughput`` (§6.4.1): max Σ_m τ_m(X), raw steps/s as in Gavel's code (no normalisation,
  so fast-stepping jobs are favoured; this is the throughput baseline of the cost experiments).
- ``min_cost`` (§6.4.2): the text's Σ_m τ_m(X)/cost(m,X) is a sum of ratios, not one linear-fractional
  program; Gavel's code solves the LP surrogate max Σ_m Σ_j T[m,j]/c_j · X[m,j] and so do we, with
  c_j the $/hour of the GPUs the job holds on type j (price × scale factor; the text's c_j for the
  single-GPU jobs of Ch. 6). A pair's throughputs are divided by the price of its shared GPUs.
- ``min_cost_slo`` (§6.4.3): min_cost plus τ_m(X) ≥ s_m/(deadline_m − now) for jobs with a finite
  deadline. A job whose requirement exceeds its best single-type throughput (a missed or unreachable
  deadline) gets no row: it could not be met and would make every other SLO void. If the remaining
  rows are still infeasible together, the LP is re-solved without SLO rows, as Gavel's code does.
- ``makespan_budget`` (§6.4.3): min makespan M with M·cost(X) ≤ B, solved as one LP in
  `makespan.solve_makespan` (B = ``inp.budget`` in dollars for the remaining work). When the budget
  cannot pay for finishing the jobs at any speed, it returns the min_cost allocation (the cheapest
  way to make progress).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
from clustertwin.policies.gavel import lp
from clustertwin.policies.gavel.makespan import column_costs, solve_makespan
from clustertwin.policies.gavel.problem import Allocation, AllocationInput
from clustertwin.policies.registry import register


def _layout(inp: AllocationInput, space_sharing: bool) -> lp.Layout:
    t, pair_t = lp.policy_throughputs(inp, True, space_sharing)
    return lp.layout_for(inp, t, pair_t)


def _throughput_per_column(layout: lp.Layout) -> np.ndarray:
    """Σ over the jobs in each column's row of their throughput: the column's steps/s at X = 1."""
    return np.asarray(layout.throughput.sum(axis=0)).ravel()


def _steps_per_dollar(inp: AllocationInput, layout: lp.Layout) -> np.ndarray:
    if np.any(np.asarray(inp.prices) <= 0):
        raise ValueError(f"cost policies need positive $/hour prices, got {inp.prices}")
    return _throughput_per_column(layout) / column_costs(inp, layout)


def slo_rows(inp: AllocationInput, layout: lp.Layout) -> lp.ExtraRows | None:
    """τ_m(X)/required_m ≥ 1 for every job with a finite deadline it can still meet."""
    deadlines = np.asarray(inp.slo_deadlines, dtype=float)
    steps = np.asarray(inp.remaining_steps, dtype=float)
    left = deadlines - inp.now
    required = np.divide(steps, left, out=np.full(inp.n, np.inf), where=left > 0)
    jobs = np.flatnonzero(np.isfinite(deadlines) & (steps > 0) & (required <= layout.best_throughput()))
    if jobs.size == 0:
        return None
    matrix = sp.diags(1.0 / required[jobs]) @ layout.throughput[jobs]
    return lp.ExtraRows(matrix, np.ones(jobs.size), np.full(jobs.size, np.inf))


def _solve_or_zero(layout: lp.Layout, objective: np.ndarray, extra: lp.ExtraRows | None = None) -> np.ndarray:
    x = lp.solve_max_linear(layout, objective, extra)
    return np.zeros(layout.nv) if x is None else x


@register("max_sum_throughput")
@dataclass(frozen=True)
class MaxSumThroughput:
    """max Σ_m τ_m(X) (§6.4.1)."""

    space_sharing: bool = False
    name: ClassVar[str] = "max_sum_throughput"

    def allocate(self, inp: AllocationInput, rng: np.random.Generator) -> Allocation:
        layout = _layout(inp, self.space_sharing)
        return lp.to_allocation(inp, layout, _solve_or_zero(layout, _throughput_per_column(layout)))


@register("min_cost")
@dataclass(frozen=True)
class MinCost:
    """max Σ_m Σ_j T[m,j]/c_j·X[m,j], Gavel's LP surrogate for §6.4.2."""

    space_sharing: bool = False
    name: ClassVar[str] = "min_cost"
    needs: ClassVar[tuple[str, ...]] = ("prices",)

    def allocate(self, inp: AllocationInput, rng: np.random.Generator) -> Allocation:
        inp.require("prices")
        layout = _layout(inp, self.space_sharing)
        return lp.to_allocation(inp, layout, _solve_or_zero(layout, _steps_per_dollar(inp, layout)))


@register("min_cost_slo")
@dataclass(frozen=True)
class MinCostSLO:
    """min_cost subject to each job's deadline (§6.4.3); falls back to no SLO rows if infeasible."""

    space_sharing: bool = False
    name: ClassVar[str] = "min_cost_slo"
    needs: ClassVar[tuple[str, ...]] = ("prices",)

    def allocate(self, inp: AllocationInput, rng: np.random.Generator) -> Allocation:
        inp.require("prices", "remaining_steps", "slo_deadlines")
        layout = _layout(inp, self.space_sharing)
        objective = _steps_per_dollar(inp, layout)
        x = lp.solve_max_linear(layout, objective, slo_rows(inp, layout))
        if x is None:
            x = _solve_or_zero(layout, objective)
        return lp.to_allocation(inp, layout, x)


@register("makespan_budget")
@dataclass(frozen=True)
class MakespanBudget:
    """Minimum makespan within a total budget (§6.4.3); min_cost when the budget cannot finish."""

    space_sharing: bool = False
    name: ClassVar[str] = "makespan_budget"
    needs: ClassVar[tuple[str, ...]] = ("prices", "budget")

    def allocate(self, inp: AllocationInput, rng: np.random.Generator) -> Allocation:
        inp.require("prices", "remaining_steps", "budget")
        layout = _layout(inp, self.space_sharing)
        x, makespan = solve_makespan(inp, layout, np.asarray(inp.throughputs, dtype=float), float(inp.budget))
        if not np.isfinite(makespan):
            x = _solve_or_zero(layout, _steps_per_dollar(inp, layout))
        return lp.to_allocation(inp, layout, x)
