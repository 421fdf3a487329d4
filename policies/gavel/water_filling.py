"""Water filling: hierarchical policies and Pareto-efficient max-min fairness ([Narayanan], §5.4.3).

Every job that currently holds weight rises at the same weighted rate until some of them saturate; those
are frozen at the level they reached, their weight is handed on inside their entity, and the rest keep
rising over the capacity that is left. Each iteration solves two problems over the base constraints
(5.1)–(5.3), or their space-sharing variants when pair candidates are given:

* an LP, ``max_X min_{m: w_m>0} (sf_m / w_m)·(τ̂_m(X) − t_m)`` subject to ``τ̂_m(X) ≥ t_m`` for every job,
  where ``τ̂_m = τ_m / τ_m(X^eq)`` is the normalised throughput, ``X^eq[m, j] = N_j / Σ N`` and ``t_m`` is
  the level job m had reached. It is written in epigraph form, ``τ̂_m ≥ t_m + (w_m / sf_m)·c``, max c.
  The scale factor makes a job on sf GPUs rise sf times slower in time share, so equal weights mean equal
  GPU shares, as in single-level LAS (§5.4.1);
* the bottleneck MILP, ``max Σ z_m`` over jobs still rising, where ``z_m = 1`` forces
  ``τ̂_m ≥ t_m(1 + ρ) + ε`` while every job keeps ``τ̂ ≥ t``. Jobs left at ``z_m = 0`` cannot gain without
  another job losing: they are the bottleneck and are frozen.

Levels are carried as the water level each job reached (``t_m + rate_m·c``), not the LP's realised
throughput, which at a degenerate vertex may give some jobs more than their fair rise; the artifact does
the same. The dissertation also states the converse, ``z_m = 0 ⇒ no improvement``; the objective only
rewards ``z_m = 1``, so the converse never changes which jobs can rise, and it is left out.

The artifact solves the LP with ECOS and the MILP with GLPK_MI; here both are HiGHS, and each is built
once per allocation with ``cp.Parameter`` inputs and re-solved every iteration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import scipy.sparse as sp
from clustertwin.policies.gavel.problem import Allocation, AllocationInput
from clustertwin.policies.gavel.symmetric import symmetric_allocation
from clustertwin.policies.registry import register

if TYPE_CHECKING:
    import cvxpy as cp

# The bottleneck test's margin, relative and absolute; the artifact uses the same magnitudes (1.0001, 1e-5).
RISE_REL = 1e-4
RISE_ABS = 1e-5
# The MILP may bend a frozen job's floor by its feasibility tolerance, and trading between jobs whose
# throughput ratios differ a lot amplifies that bend into apparent headroom; HiGHS's default (1e-6) was
# seen to fake a rise of 1e-4 this way, so both problems run far tighter. Warm starts are off: HiGHS 1.16
# was seen to accept a zero-objective MIP start as optimal when a better solution existed, and without
# them a solve depends only on its inputs.
SOLVER_OPTIONS = {
    "warm_start": False,
    "mip_feasibility_tolerance": 1e-9,
    "primal_feasibility_tolerance": 1e-9,
}

Inner = Literal["fairness", "fifo"]

# Maps the jobs frozen so far to each job's weight for the next iteration (0 = not rising).
Reweighting = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class WaterFillingIteration:
    """One LP + MILP round of water filling."""

    weights: np.ndarray  # (n,) w^job_m used by this iteration's LP; 0 for frozen or waiting jobs
    levels: np.ndarray  # (n,) normalised throughput t_m each job is guaranteed after this iteration
    fractions: np.ndarray  # (n, k) the LP's allocation X
    pair_fractions: np.ndarray | None  # (p, k), rows aligned with ``inp.pairs``
    frozen: np.ndarray  # (n,) bool, bottlenecked jobs after this iteration (cumulative)


class EntityWeights:
    """Job weights inside entities, re-split after every iteration by each entity's inner policy (§5.4.3).

    An entity's weight is shared by its jobs that are not frozen: under ``fairness`` in proportion to their
    own weights (so a frozen job's weight goes to the others pro rata, which is "equally" when job weights
    are equal, and matches the artifact's renormalisation); under ``fifo`` all of it to the earliest
    arrival (ties by row), so a frozen job's weight passes to the next job in the queue.
    """

    def __init__(
        self,
        entities: np.ndarray,
        entity_weights: dict[int, float],
        job_weights: np.ndarray,
        inner: Inner,
        arrival_times: np.ndarray | None = None,
    ) -> None:
        if inner not in ("fairness", "fifo"):
            raise ValueError(f"inner policy must be 'fairness' or 'fifo', got {inner!r}")
        if inner == "fifo" and arrival_times is None:
            raise ValueError("the fifo inner policy needs arrival_times")
        ids, self._codes = np.unique(np.asarray(entities), return_inverse=True)
        # An entity the caller gave no weight counts as weight 1, like an unweighted job.
        self._entity_weight = np.array([float(entity_weights.get(int(e), 1.0)) for e in ids])
        self._job_weights = np.asarray(job_weights, dtype=float)
        self._inner = inner
        n = self._codes.shape[0]
        arrivals = np.zeros(n) if arrival_times is None else np.asarray(arrival_times, dtype=float)
        self._queue = np.lexsort((np.arange(n), arrivals))

    def __call__(self, frozen: np.ndarray) -> np.ndarray:
        live = ~frozen & (self._job_weights > 0)
        weights = np.zeros(self._codes.shape[0])
        if self._inner == "fairness":
            share = np.where(live, self._job_weights, 0.0)
            total = np.bincount(self._codes, weights=share, minlength=self._entity_weight.shape[0])
            np.divide(share * self._entity_weight[self._codes], total[self._codes], out=weights, where=live)
        else:
            waiting = self._queue[live[self._queue]]
            _, first = np.unique(self._codes[waiting], return_index=True)
            heads = waiting[first]
            weights[heads] = self._entity_weight[self._codes[heads]]
        return weights


class WaterFilling:
    """The LP and bottleneck MILP of one allocation problem, built once and re-solved per iteration."""

    def __init__(self, inp: AllocationInput, aware: bool = True) -> None:
        self._inp = inp
        n, k = inp.n, inp.k
        sf = np.asarray(inp.scale_factors, dtype=float)
        capacity = np.asarray(inp.num_workers, dtype=float)
        raw = np.asarray(inp.throughputs, dtype=float)
        # Agnostic: every type a job can run on is worth the same to it (the artifact's all-ones T).
        tput = raw if aware else (raw > 0).astype(float)
        equal_share = capacity / max(capacity.sum(), 1.0)
        tau_eq = tput @ equal_share
        inv_eq = np.divide(1.0, tau_eq, out=np.zeros(n), where=tau_eq > 0)
        # A job wider than a type's whole fleet can never be placed there, whatever its time share.
        fits = sf[:, None] <= capacity[None, :]
        self._norm = tput * inv_eq[:, None]
        feasible = (tput > 0) & fits
        self._runnable = feasible.any(axis=1) & (tau_eq > 0)

        import cvxpy as cp  # only water filling needs it: the registry's import stays light

        self._x = cp.Variable((n, k), nonneg=True)
        tau_hat = cp.sum(cp.multiply(self._norm, self._x), axis=1)
        time_share = cp.sum(self._x, axis=1)
        used = sf @ self._x
        bounds = [self._x <= feasible.astype(float)]
        tau_max = self._norm.max(axis=1, initial=0.0)

        pairs = inp.pairs if aware and inp.pairs is not None and len(inp.pairs) else None
        self._xp: cp.Variable | None = None
        if pairs is not None:
            p = len(pairs)
            members = np.asarray(pairs.members)
            ptput = np.asarray(pairs.throughputs, dtype=float)
            psf = sf[members].max(axis=1)
            self._pair_norm = ptput * inv_eq[members][:, None, :]  # (p, k, 2)
            pair_feasible = (ptput > 0).all(axis=2) & (psf[:, None] <= capacity[None, :])
            self._incidence = [
                sp.csr_matrix((np.ones(p), (members[:, side], np.arange(p))), shape=(n, p)) for side in (0, 1)
            ]
            self._xp = cp.Variable((p, k), nonneg=True)
            for side in (0, 1):
                tau_hat = tau_hat + self._incidence[side] @ cp.sum(
                    cp.multiply(self._pair_norm[:, :, side], self._xp), axis=1
                )
            time_share = time_share + (self._incidence[0] + self._incidence[1]) @ cp.sum(self._xp, axis=1)
            used = used + psf @ self._xp
            bounds.append(self._xp <= pair_feasible.astype(float))
            for side in (0, 1):
                best = np.where(pair_feasible, self._pair_norm[:, :, side], 0.0).max(axis=1)
                np.maximum.at(tau_max, members[:, side], best)

        base = [*bounds, time_share <= 1, used <= capacity]
        self._floor = cp.Parameter(n)
        self._rate = cp.Parameter(n, nonneg=True)
        self._rise = cp.Variable()
        self._rising = tau_hat >= self._floor + self._rate * self._rise
        self._lp = cp.Problem(cp.Maximize(self._rise), [*base, self._rising])

        self._target = cp.Parameter(n)
        self._eligible = cp.Parameter(n, nonneg=True)
        self._z = cp.Variable(n, boolean=True)
        # Big-M: large enough that z_m = 0 leaves the target constraint slack for any reachable target.
        big_m = tau_max * (1 + RISE_REL) + RISE_ABS + 1.0
        self._milp = cp.Problem(
            cp.Maximize(cp.sum(self._z)),
            [
                *base,
                tau_hat >= self._floor,
                tau_hat >= self._target - cp.multiply(big_m, 1 - self._z),
                self._z <= self._eligible,
            ],
        )

    def solve(self, reweight: Reweighting) -> list[WaterFillingIteration]:
        """Run water filling to the end: until every job is frozen or no job holds weight."""
        import cvxpy as cp

        n = self._inp.n
        sf = np.asarray(self._inp.scale_factors, dtype=float)
        # Jobs that can run nowhere start frozen at 0, so their weight flows to their entity's other jobs.
        frozen = ~self._runnable
        levels = np.zeros(n)
        history: list[WaterFillingIteration] = []
        while not frozen.all():
            weights = reweight(frozen)
            rising = (weights > 0) & ~frozen
            if not rising.any():
                break
            rate = np.where(rising, weights / sf, 0.0)
            self._rate.value = rate / rate.max()
            self._floor.value = levels
            self._lp.solve(solver=cp.HIGHS, **SOLVER_OPTIONS)
            if self._lp.status != cp.OPTIMAL:
                break
            fractions = np.clip(self._x.value, 0.0, 1.0)
            pair_fractions = None if self._xp is None else np.clip(self._xp.value, 0.0, 1.0)
            reached = self._realised(fractions, pair_fractions)
            rise = max(float(self._rise.value), 0.0)
            levels = np.where(rising, np.minimum(levels + self._rate.value * rise, reached), levels)

            self._floor.value = levels
            self._target.value = levels * (1 + RISE_REL) + RISE_ABS
            self._eligible.value = rising.astype(float)
            self._milp.solve(solver=cp.HIGHS, **SOLVER_OPTIONS)
            solved = self._milp.status == cp.OPTIMAL
            newly = rising & (self._z.value < 0.5) if solved else np.zeros(n, dtype=bool)
            if not newly.any():
                # Backstop for solver trouble (the LP's rounding can leave its levels a hair out of the
                # MILP's reach): a job whose rise constraint has a positive LP dual cannot gain without
                # another falling below its level (weak duality), so it is a bottleneck.
                newly = rising & (np.asarray(self._rising.dual_value) > 1e-9)
            frozen = frozen | newly
            history.append(
                WaterFillingIteration(weights, levels.copy(), fractions, pair_fractions, frozen.copy())
            )
            if not newly.any():
                break
        return history

    def allocation(self, history: list[WaterFillingIteration]) -> Allocation:
        """The last iteration's X as an Allocation (all zeros when no iteration ran)."""
        inp = self._inp
        pairs = inp.pairs if self._xp is not None else None
        if history:
            fractions, pair_fractions = history[-1].fractions, history[-1].pair_fractions
        else:
            fractions = np.zeros((inp.n, inp.k))
            pair_fractions = None if pairs is None else np.zeros((len(pairs), inp.k))
        return Allocation(
            job_ids=inp.job_ids,
            worker_types=inp.worker_types,
            fractions=fractions,
            pair_members=None if pairs is None else np.asarray(inp.job_ids)[pairs.members],
            pair_fractions=pair_fractions,
        )

    def _realised(self, fractions: np.ndarray, pair_fractions: np.ndarray | None) -> np.ndarray:
        tau = (self._norm * fractions).sum(axis=1)
        if pair_fractions is not None:
            for side in (0, 1):
                tau += self._incidence[side] @ (self._pair_norm[:, :, side] * pair_fractions).sum(axis=1)
        return tau


def _empty(inp: AllocationInput) -> Allocation:
    return Allocation(inp.job_ids, inp.worker_types, np.zeros((0, inp.k)))


@register("hierarchical")
class HierarchicalPolicy:
    """Weighted fairness across entities, fairness or FIFO inside each (§5.4.3), solved by water filling.

    Reads ``inp.entities`` (entity id per job), ``inp.entity_weights`` (w_s; missing ids weigh 1),
    ``inp.weights`` (job weights inside an entity under ``fairness``) and, for ``fifo``,
    ``inp.arrival_times``. ``aware=False`` is the heterogeneity-agnostic variant (T replaced by ones where a
    job can run; pair candidates ignored).
    """

    name = "hierarchical"
    needs = ("entities",)

    def __init__(self, aware: bool = True, inner: Inner = "fairness") -> None:
        if inner not in ("fairness", "fifo"):
            raise ValueError(f"inner policy must be 'fairness' or 'fifo', got {inner!r}")
        self.aware = aware
        self.inner = inner

    def allocate(self, inp: AllocationInput, rng: np.random.Generator) -> Allocation:
        inp.require("entities", *(("arrival_times",) if self.inner == "fifo" else ()))
        if inp.n == 0:
            return _empty(inp)
        assert inp.entities is not None
        weights = EntityWeights(
            inp.entities, inp.entity_weights, inp.weights_or_ones(), self.inner, inp.arrival_times
        )
        return _solve(inp, weights, self.aware)


@register("las_water_filling")
class LasWaterFillingPolicy:
    """Single-level weighted LAS (§5.4.1) made Pareto-efficient by water filling (§5.4.3, §5.4.4).

    All jobs form one entity with inner fairness, so job m rises at rate ``w_m / sf_m`` (``inp.weights``).
    """

    name = "las_water_filling"

    def __init__(self, aware: bool = True) -> None:
        self.aware = aware

    def allocate(self, inp: AllocationInput, rng: np.random.Generator) -> Allocation:
        if inp.n == 0:
            return _empty(inp)
        job_weights = inp.weights_or_ones()
        weights = EntityWeights(
            np.zeros(inp.n, dtype=int), {0: float(job_weights.sum())}, job_weights, "fairness"
        )
        return _solve(inp, weights, self.aware)


def _solve(inp: AllocationInput, weights: EntityWeights, aware: bool) -> Allocation:
    """Water filling; agnostic, its symmetric optimum (`symmetric.symmetric_split`: a vertex would
    favour some types that the agnostic policy cannot tell apart)."""
    problem = WaterFilling(inp, aware)
    allocation = problem.allocation(problem.solve(weights))
    if aware:
        return allocation
    return symmetric_allocation(inp, allocation, (np.asarray(inp.throughputs) > 0).astype(float))
