"""LAS as weighted max-min fairness over normalised effective throughput ([Narayanan] §5.4.1).

Heterogeneity-aware form (§5.4.1, the multi-GPU objective at the end of the section):

    max_X  min_m  (sf_m / w_m) · τ_m(X) / τ_m(X^eq)      s.t. (5.1)–(5.3)

with X^eq[m,j] = N_j / Σ_j' N_j' (each job's share of the whole fleet in proportion to type counts,
the same for every job, as Gavel's code computes it). The agnostic baseline is the same LP with every
positive T entry replaced by 1 (`lp.policy_throughputs`), and of its many optima we return the symmetric
one, each job's time spread over the types it can use in proportion to their sizes
(`symmetric.symmetric_split`, which says why that is an optimum). With space sharing, τ_m includes the job's
share of every candidate pair it belongs to (§5.3.1).

Solved as one epigraph LP plus the efficiency phase of `lp.solve_max_min` (our choice: Gavel used
whatever interior point ECOS returned; we instead maximise total normalised throughput among the
max-min optima so no capacity is left idle). Jobs that can run on no type are left out of the min.

Class aggregation (no pairs): the LP's data for job m is only (T row, sf_m, w_m), so jobs with equal
tuples are interchangeable. The feasible set is invariant under permuting such jobs and both phases'
objectives (a min of linear terms, then a sum) are concave and permutation-invariant, so averaging any
optimum over the permutations of a class gives an optimum in which all its jobs share one allocation.
The LP therefore needs one row per class with count-weighted GPU use in (5.3); expanding the class
row to its members is exact. The simulator's 50–400 job rounds collapse to a few dozen classes, and
the class LP is built straight from arrays (`lp.solve_rows_max_min`): the same LP entry for entry, so
HiGHS takes the same path and returns the same bits, without the sparse maps' set-up.

Warm start (``warm_start=True``, class LP only): phase 1 starts from the previous reset's optimal basis,
carried on the returned `Allocation` as its ``solver_state`` and read back from ``inp.previous``
(`lp.ClassBasis`), so the allocation stays a function of its input. It reaches the same optimum in a
few pivots instead of ~73, but the values HiGHS returns at that optimum depend on the pivots that led
there: they agree with a cold solve's only to ~1e-12, and the round mechanism's priority comparisons
(X over received share, with ties between classes) do see such differences, so a run's event log is
not the cold solve's. Off by default for that reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from clustertwin.policies.compiled import compiled
from clustertwin.policies.gavel import lp
from clustertwin.policies.gavel.problem import Allocation, AllocationInput
from clustertwin.policies.gavel.symmetric import eligible_types, symmetric_allocation, symmetric_split
from clustertwin.policies.registry import register


def las_allocation(
    inp: AllocationInput,
    aware: bool = True,
    space_sharing: bool = False,
    aggregate: bool = True,
    warm_start: bool = False,
) -> Allocation:
    """The LAS allocation; ``aggregate=False`` solves one row per job (for checking aggregation),
    ``warm_start`` starts the class LP from the basis carried on ``inp.previous``."""
    t, pair_t = lp.policy_throughputs(inp, aware, space_sharing)
    sf = np.asarray(inp.scale_factors, dtype=float)
    weights = inp.weights_or_ones()
    reference = lp.equal_share_throughput(t, inp.num_workers)
    coeff = np.divide(sf / weights, reference, out=np.zeros(inp.n), where=reference > 0)
    if pair_t is not None or not aggregate or inp.n == 0:
        layout = lp.layout_for(inp, t, pair_t)
        x, _ = lp.solve_max_min(layout, coeff, reference)
        allocation = lp.to_allocation(inp, layout, x)
        return allocation if aware else symmetric_allocation(inp, allocation, t)

    classes, first, member_class, counts = job_classes(np.column_stack([t, sf, weights]))
    row, col, x, basis = lp.solve_rows_max_min(
        classes[:, : inp.k],
        classes[:, inp.k],
        inp.num_workers,
        counts,
        coeff[first],
        reference[first],
        keys=classes if warm_start else None,
        start=carried_basis(inp, aware) if warm_start else None,
    )
    per_class = np.zeros((len(classes), inp.k))
    per_class[row, col] = np.clip(x, 0.0, 1.0)
    if not aware:
        eligible = eligible_types(classes[:, : inp.k], classes[:, inp.k], inp.num_workers)
        per_class = symmetric_split(per_class, eligible, classes[:, inp.k], inp.num_workers, counts)
    state = None if basis is None else LasBasis(aware, basis)
    return Allocation(inp.job_ids, inp.worker_types, per_class[member_class], solver_state=state)


@dataclass(frozen=True)
class LasBasis:
    """The class LP's phase-1 basis as LAS carries it from one reset to the next."""

    aware: bool
    basis: lp.ClassBasis


def carried_basis(inp: AllocationInput, aware: bool) -> lp.ClassBasis | None:
    """The basis the previous LAS allocation left, when it was made over the same types and view."""
    previous = inp.previous
    state = None if previous is None else previous.solver_state
    if not isinstance(state, LasBasis) or state.aware != aware or previous.worker_types != inp.worker_types:
        return None
    return state.basis


def job_classes(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The distinct rows of ``keys`` in lexicographic order, the first row holding each, each row's
    class and the class sizes: ``np.unique(keys, axis=0, return_index, return_inverse, return_counts)``
    (the LP's rows, and so the solver's path, follow this order), in one compiled pass."""
    keys = np.ascontiguousarray(keys, dtype=float)
    order, member_class, heads = _classes(keys)
    counts = np.diff(np.append(heads, keys.shape[0]))
    return keys[order[heads]], order[heads], member_class, counts


@compiled
def _classes(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows of ``keys`` in lexicographic order, ties in row order (a stable sort per column, last
    column first, as ``np.lexsort`` does), each row's class (its rank among the distinct rows) and where
    each class starts in that order."""
    n, d = keys.shape
    order = np.arange(n)
    column = np.empty(n)
    for c in range(d - 1, -1, -1):
        for i in range(n):
            column[i] = keys[order[i], c]
        order = order[np.argsort(column, kind="mergesort")]
    member_class = np.empty(n, dtype=np.int64)
    heads = np.empty(n, dtype=np.int64)
    classes = 0
    for i in range(n):
        if i == 0 or _differs(keys, order[i], order[i - 1]):
            heads[classes] = i
            classes += 1
        member_class[order[i]] = classes - 1
    return order, member_class, heads[:classes]


@compiled
def _differs(keys: np.ndarray, i: int, j: int) -> bool:
    for c in range(keys.shape[1]):
        if keys[i, c] != keys[j, c]:
            return True
    return False


@register("las")
@dataclass(frozen=True)
class LAS:
    """Max-min fairness (Tiresias' LAS) over normalised throughput."""

    aware: bool = True
    space_sharing: bool = False
    warm_start: bool = False  # phase 1 from the previous reset's basis (changes the event log's bits)
    name: ClassVar[str] = "las"

    def allocate(self, inp: AllocationInput, rng: np.random.Generator) -> Allocation:
        return las_allocation(inp, self.aware, self.space_sharing, warm_start=self.warm_start)
