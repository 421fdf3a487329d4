"""FIFO as Gavel's code runs it: a greedy whole-GPU placement in arrival order ([Narayanan] §5.4.2).

The text writes FIFO as the LP max Σ_m τ_m(X)/τ_m(X^fastest)·(M − m); Gavel's code (and its reported
numbers) use a greedy instead, which we follow. X is 0/1: each placed job gets one type for the whole
period.

- Aware (Gavel's ``fifo_perf``): recomputed from scratch at every reset; in arrival order each job takes
  the type with the highest throughput among those with at least sf_m free GPUs. An early job moves to
  a faster type as soon as one frees up.
- Agnostic (Gavel's ``fifo``): placements are sticky. Jobs placed in ``inp.previous`` keep their type;
  the others, in arrival order, take a uniformly random type with room (``rng``).
- Either way the queue stops at the first job that fits nowhere, so no later job overtakes it (strict
  FIFO; jobs that could never run on this cluster, having no type with T > 0 and sf_m ≤ N_j, are
  skipped instead of blocking it forever).
- ``space_sharing`` (Gavel's ``fifo_packed``): after the whole-GPU pass, the waiting jobs in order are
  each packed with the placed single job of the same scale factor whose candidate pair (``inp.pairs``)
  has the highest combined normalised throughput Σ_i T^pair_i/T_i on that job's type, provided it
  exceeds ``packing_threshold`` (1.5 in Gavel); packing stops at the first waiting job with no such
  partner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from clustertwin.policies.gavel.problem import Allocation, AllocationInput
from clustertwin.policies.registry import register

UNPLACED = -1


def arrival_order(inp: AllocationInput) -> np.ndarray:
    """Row indices by arrival time, ties (and missing times) broken by job id."""
    if inp.arrival_times is None:
        return np.argsort(inp.job_ids, kind="stable")
    return np.lexsort((inp.job_ids, np.asarray(inp.arrival_times, dtype=float)))


def place_in_order(
    inp: AllocationInput,
    order: np.ndarray,
    aware: bool,
    rng: np.random.Generator,
    stop_when_blocked: bool,
    placed: np.ndarray | None = None,
) -> np.ndarray:
    """Type index per job (UNPLACED when it gets none), placing ``order``'s jobs one at a time.

    ``placed`` holds placements to keep; their GPUs are taken first. A job goes to its fastest type
    with room (aware) or a uniformly random one (agnostic); a job with no room anywhere stops the pass
    when ``stop_when_blocked``, otherwise it is skipped.
    """
    t = np.asarray(inp.throughputs, dtype=float)
    sf = np.asarray(inp.scale_factors)
    workers = np.asarray(inp.num_workers, dtype=float)
    free = workers.copy()
    assignment = np.full(inp.n, UNPLACED)
    if placed is not None:
        # Kept jobs first, in order, as long as their type still has room (it may have shrunk).
        for m in order:
            j = placed[m]
            if j != UNPLACED and free[j] >= sf[m]:
                assignment[m] = j
                free[j] -= sf[m]
    could_ever_run = ((t > 0) & (sf[:, None] <= workers[None, :])).any(axis=1)
    for m in order:
        if assignment[m] != UNPLACED or not could_ever_run[m]:
            continue
        room = np.flatnonzero((free >= sf[m]) & (t[m] > 0))
        if room.size == 0:
            if stop_when_blocked:
                break
            continue
        j = room[np.argmax(t[m, room])] if aware else rng.choice(room)
        assignment[m] = j
        free[j] -= sf[m]
    return assignment


def previous_placements(inp: AllocationInput) -> np.ndarray:
    """Each job's type in ``inp.previous`` when it ran alone there on one type, else UNPLACED."""
    placed = np.full(inp.n, UNPLACED)
    prev = inp.previous
    if prev is None:
        return placed
    row_of = {int(job): i for i, job in enumerate(inp.job_ids)}
    for i, job in enumerate(prev.job_ids):
        m = row_of.get(int(job))
        if m is not None and prev.fractions[i].max() >= 0.5:
            j = int(np.argmax(prev.fractions[i]))
            if inp.throughputs[m, j] > 0:
                placed[m] = j
    return placed


def pack_waiting(
    inp: AllocationInput, order: np.ndarray, assignment: np.ndarray, threshold: float
) -> np.ndarray:
    """The type each candidate pair runs on (UNPLACED when unused) after packing the waiting jobs."""
    pairs = inp.pairs
    pair_type = np.full(len(pairs), UNPLACED)
    t = np.asarray(inp.throughputs, dtype=float)
    sf = np.asarray(inp.scale_factors)
    index = {}
    for p, (a, b) in enumerate(pairs.members):
        index[(int(a), int(b))] = index[(int(b), int(a))] = p
    singles = [int(m) for m in order if assignment[m] != UNPLACED]
    for q in (int(m) for m in order if assignment[m] == UNPLACED):
        best, partner = threshold, None
        for s in singles:
            p = index.get((s, q))
            if p is None or sf[s] != sf[q]:
                continue
            j = assignment[s]
            packed = pairs.throughputs[p, j]
            if np.any(packed <= 0):  # the pair does not fit on that type
                continue
            alone = t[pairs.members[p], j]
            gain = float(np.sum(np.divide(packed, alone, out=np.zeros(2), where=alone > 0)))
            if gain > best:
                best, partner = gain, (s, p)
        if partner is None:
            break
        s, p = partner
        pair_type[p] = assignment[s]
        singles.remove(s)
    return pair_type


def greedy_allocation(
    inp: AllocationInput, assignment: np.ndarray, pair_type: np.ndarray | None = None
) -> Allocation:
    """0/1 X from per-job types (and per-pair types, whose members then run only in the pair)."""
    fractions = np.zeros((inp.n, inp.k))
    placed = np.flatnonzero(assignment != UNPLACED)
    fractions[placed, assignment[placed]] = 1.0
    if inp.pairs is None or pair_type is None:
        return Allocation(inp.job_ids, inp.worker_types, fractions)
    pair_fractions = np.zeros((len(inp.pairs), inp.k))
    used = np.flatnonzero(pair_type != UNPLACED)
    pair_fractions[used, pair_type[used]] = 1.0
    fractions[inp.pairs.members[used].ravel()] = 0.0
    return Allocation(
        inp.job_ids,
        inp.worker_types,
        fractions,
        pair_members=inp.job_ids[inp.pairs.members],
        pair_fractions=pair_fractions,
    )


@register("fifo")
@dataclass(frozen=True)
class FIFO:
    """First in, first out (the module docstring has the formulation)."""

    aware: bool = True
    space_sharing: bool = False
    packing_threshold: float = 1.5
    name: ClassVar[str] = "fifo"

    def allocate(self, inp: AllocationInput, rng: np.random.Generator) -> Allocation:
        order = arrival_order(inp)
        kept = None if self.aware else previous_placements(inp)
        assignment = place_in_order(inp, order, self.aware, rng, stop_when_blocked=True, placed=kept)
        if not self.space_sharing or inp.pairs is None or len(inp.pairs) == 0:
            return greedy_allocation(inp, assignment)
        pair_type = pack_waiting(inp, order, assignment, self.packing_threshold)
        return greedy_allocation(inp, assignment, pair_type)
