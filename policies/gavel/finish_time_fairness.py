"""Finish-time fairness (Themis) as Gavel states it ([Narayanan] §5.4.2).

    ρ_m(X) = (t_m + s_m/τ_m(X)) / (t^iso_m + s_m/τ_m(X^iso)),        min_X max_m ρ_m(X)  s.t. (5.1)–(5.3)

t_m = now − arrival, t^iso_m the caller's accumulated isolated elapsed time (0 when not given), s_m the
remaining steps, and X^iso[m,j] = N_j/(n·sf_m) with each row scaled down to sum ≤ 1 (1/n of every
type). Gavel writes the objective with cvxpy's inv_pos; it is convex but not an LP. For a fixed ρ,
ρ_m(X) ≤ ρ is the linear row τ_m(X) ≥ s_m/(ρ·D_m − t_m) with D_m = t^iso_m + s_m/τ_m(X^iso) (and
impossible when ρ·D_m ≤ t_m), so we bisect on ρ with a feasibility LP per step. Only the rows' lower
bounds change between steps, so one HiGHS model is kept and each step warm-starts dual simplex from the
previous basis. Every feasible step also tightens the upper end to the max ρ the found X achieves.
Bisection stops at a relative gap of 1e-6; then the efficiency phase of `lp.solve_max_min` (maximise
Σ_m τ_m/τ_m(X^iso) with ρ relaxed by 1e-6) picks an allocation that leaves no capacity idle.

Jobs with no steps left, or that can run on no type, have no finite or X-dependent ρ and are left out
of the max. Priority weights are not used (Gavel's code also ignores them here). The agnostic baseline
replaces every positive T entry by 1 (`lp.policy_throughputs`), as Gavel's code does, so s_m/τ is then
measured in steps rather than seconds; of its optima it returns the symmetric one
(`symmetric.symmetric_split`: each job's time over its usable types in proportion to their sizes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
from clustertwin.policies.gavel import lp
from clustertwin.policies.gavel.isolated import isolated_fractions
from clustertwin.policies.gavel.problem import Allocation, AllocationInput
from clustertwin.policies.gavel.symmetric import symmetric_allocation
from clustertwin.policies.registry import register

RELATIVE_GAP = 1e-6


def finish_time_ratios(
    tau: np.ndarray, steps: np.ndarray, elapsed: np.ndarray, isolated_duration: np.ndarray
) -> np.ndarray:
    """ρ_m for effective throughputs ``tau`` (inf where τ_m = 0)."""
    remaining = np.divide(steps, tau, out=np.full(tau.shape, np.inf), where=tau > 0)
    return (elapsed + remaining) / isolated_duration


def ftf_allocation(inp: AllocationInput, aware: bool = True, space_sharing: bool = False) -> Allocation:
    """The allocation minimising max_m ρ_m(X), by bisection on ρ (formulation: the module docstring)."""
    inp.require("remaining_steps")
    t, pair_t = lp.policy_throughputs(inp, aware, space_sharing)
    layout = lp.layout_for(inp, t, pair_t)
    steps = np.asarray(inp.remaining_steps, dtype=float)
    elapsed = np.zeros(inp.n) if inp.arrival_times is None else inp.now - np.asarray(inp.arrival_times, float)
    iso_elapsed = np.zeros(inp.n) if inp.iso_elapsed is None else np.asarray(inp.iso_elapsed, dtype=float)

    x_iso = isolated_fractions(inp.num_workers, inp.scale_factors)
    tau_iso = (t * x_iso).sum(axis=1)
    jobs = np.flatnonzero(layout.runnable() & (steps > 0) & (tau_iso > 0))
    if jobs.size == 0:
        return lp.to_allocation(inp, layout, np.zeros(layout.nv))
    steps, elapsed, tau_iso = steps[jobs], elapsed[jobs], tau_iso[jobs]
    duration = iso_elapsed[jobs] + steps / tau_iso
    iso_time = steps / tau_iso  # each row of the model is τ_m/τ^iso_m ≥ iso_time_m/(ρ·D_m − t_m)

    base, lower, upper = lp.base_rows(layout)
    tput = layout.throughput[jobs]
    model = lp.HighsModel(
        sp.vstack([base, sp.diags(1.0 / tau_iso) @ tput], format="csc"),
        np.concatenate([lower, np.zeros(jobs.size)]),
        np.concatenate([upper, np.full(jobs.size, np.inf)]),
        np.zeros(layout.nv),
        np.zeros(layout.nv),
        np.ones(layout.nv),
        False,
    )
    ftf_rows = np.arange(base.shape[0], base.shape[0] + jobs.size)

    def ratios(x: np.ndarray) -> np.ndarray:
        return finish_time_ratios(tput @ x, steps, elapsed, duration)

    def feasible(rho: float) -> np.ndarray | None:
        slack = rho * duration - elapsed
        if np.any(slack <= 0):
            return None
        model.set_row_bounds(ftf_rows, iso_time / slack, np.full(jobs.size, np.inf))
        return model.solve(warm="dual")

    # Lower end: every job alone at its best throughput. Upper end: X^iso restricted to the LP's
    # columns, feasible because X^iso meets (5.2)–(5.3) and dropping columns only frees capacity.
    lo = float(np.max(finish_time_ratios(layout.best_throughput()[jobs], steps, elapsed, duration)))
    single = layout.row < layout.n_jobs
    x_isolated = np.zeros(layout.nv)
    x_isolated[single] = x_iso[layout.row[single], layout.col[single]]
    hi = float(np.max(ratios(x_isolated)))
    x_hi = x_isolated  # an allocation whose worst ratio is at most hi
    while hi - lo > RELATIVE_GAP * hi:
        mid = 0.5 * (lo + hi)
        x = feasible(mid)
        if x is None:
            lo = mid
        else:
            x_hi, hi = x, min(mid, float(np.max(ratios(x))))
    # hi is often the exact ratio of a solution on the boundary, feasible only within the solver's
    # tolerance; the efficiency phase relaxes it by the same slack as `lp.solve_max_min` so primal
    # simplex does not declare it infeasible.
    if feasible(hi * (1 + lp.OPTIMUM_SLACK)) is not None:
        model.set_costs(-lp.efficiency_costs(layout, _expand(tau_iso, jobs, inp.n)))
        x = model.solve(warm="primal")
        x_hi = x_hi if x is None else x
    model.release()
    allocation = lp.to_allocation(inp, layout, x_hi)
    return allocation if aware else symmetric_allocation(inp, allocation, t)


def _expand(values: np.ndarray, jobs: np.ndarray, n: int) -> np.ndarray:
    full = np.zeros(n)
    full[jobs] = values
    return full


@register("ftf")
@dataclass(frozen=True)
class FinishTimeFairness:
    """Minimise the worst finish-time fairness ratio ρ (the module docstring has the formulation)."""

    aware: bool = True
    space_sharing: bool = False
    name: ClassVar[str] = "ftf"
    needs: ClassVar[tuple[str, ...]] = ("iso_elapsed",)

    def allocate(self, inp: AllocationInput, rng: np.random.Generator) -> Allocation:
        return ftf_allocation(inp, self.aware, self.space_sharing)
