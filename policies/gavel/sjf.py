"""Shortest job first as a greedy placement ([Narayanan] §5.4.2 "Shortest Job First").

The text's objective, min_X min_m s_m/τ_m(X), minimises a minimum of convex functions: the feasible
set is convex but the objective is not, so it is no LP (and Gavel's code has no SJF policy). Taken
literally it only cares about the single shortest job and leaves everyone else's allocation arbitrary.
We implement the policy the objective describes: at every reset, jobs in order of shortest remaining
time s_m / max_j T[m,j] each take a whole type (aware: the fastest type with sf_m free GPUs; agnostic:
a uniformly random one, as FIFO's agnostic baseline), so the shortest job gets its fastest
configuration, then the next, and so on. A job that fits nowhere is skipped and later, smaller jobs
may still fill the gaps. Ties go to the earlier arrival.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from clustertwin.policies.gavel.fifo import arrival_order, greedy_allocation, place_in_order
from clustertwin.policies.gavel.problem import Allocation, AllocationInput
from clustertwin.policies.registry import register


def shortest_first_order(inp: AllocationInput) -> np.ndarray:
    """Row indices by remaining time at the job's best throughput; ties by arrival order."""
    best = np.asarray(inp.throughputs, dtype=float).max(axis=1)
    steps = np.asarray(inp.remaining_steps, dtype=float)
    remaining = np.divide(steps, best, out=np.full(inp.n, np.inf), where=best > 0)
    rank = np.empty(inp.n, dtype=np.int64)
    rank[arrival_order(inp)] = np.arange(inp.n)
    return np.lexsort((rank, remaining))


@register("sjf")
@dataclass(frozen=True)
class ShortestJobFirst:
    """Shortest remaining time first, whole types per job (the module docstring has the formulation)."""

    aware: bool = True
    name: ClassVar[str] = "sjf"

    def allocate(self, inp: AllocationInput, rng: np.random.Generator) -> Allocation:
        inp.require("remaining_steps")
        order = shortest_first_order(inp)
        return greedy_allocation(inp, place_in_order(inp, order, self.aware, rng, stop_when_blocked=False))
