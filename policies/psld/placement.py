"""Algorithms 2 and 3 of [PSLD] (§4.2): exploitation cost and epsilon-greedy load distribution.

Algorithm 3 recomputes the whole assignment: for each block, with probability 1 - epsilon it *exploits*
(Algorithm 2: the superior PS minimising (theta0 / omega) Pred_mean(r, S_r) + theta1 S_r / S_assign, where
S_r is r's load including the candidate block and omega the mean predicted time of the superior PSs at
their current loads), otherwise it *explores* (a PS uniformly at random from all PSs, stragglers
included), so a PS that got no blocks is still measured and its recovery can be seen (Fig. 18).

Ambiguities resolved as the notes say (§2.4-2.5): S_assign includes the candidate block (no division by
zero for the first block); ties go to the last PS scanned (the test is "<="); blocks are visited in
descending size by default (``order="given"`` keeps the model order).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from clustertwin.policies.psld.profiling import PerfModel


def exploit(
    nbytes: float,
    superior: Sequence[int],
    loads: dict[int, float],
    assigned_total: float,
    model: PerfModel,
    theta0: float = 1.0,
    theta1: float = 1.0,
) -> int:
    """Algorithm 2: the superior PS with the lowest cost for one more block of ``nbytes``."""
    omega = sum(model[r].mean(loads.get(r, 0.0)) for r in superior) / len(superior)
    omega = max(omega, 1e-12)
    total = assigned_total + nbytes
    best, cost_min = superior[0], math.inf
    for r in superior:
        s_r = loads.get(r, 0.0) + nbytes
        cost = theta0 / omega * model[r].mean(s_r) + theta1 * s_r / total
        if cost <= cost_min:
            best, cost_min = r, cost
    return best


def eps_greedy(
    sizes: Sequence[float],
    servers: Sequence[int],
    superior: Sequence[int],
    model: PerfModel,
    epsilon: float,
    rng: np.random.Generator,
    *,
    theta_ratio: float = 1.0,
    order: str = "descending",
) -> list[int]:
    """Algorithm 3: an owner (a server id) for every block, computed from scratch."""
    if not superior:
        raise ValueError("the superior set is empty")
    index = list(range(len(sizes)))
    if order == "descending":
        index.sort(key=lambda i: (-sizes[i], i))
    owners = [-1] * len(sizes)
    loads: dict[int, float] = {}
    total = 0.0
    draws = rng.random(len(sizes))
    picks = rng.integers(0, len(servers), len(sizes))
    for k, i in enumerate(index):
        if draws[k] <= 1.0 - epsilon:
            r = exploit(sizes[i], superior, loads, total, model, 1.0, theta_ratio)
        else:
            r = servers[int(picks[k])]
        owners[i] = r
        loads[r] = loads.get(r, 0.0) + sizes[i]
        total += sizes[i]
    return owners


def loads_of(sizes: Sequence[float], owners: Sequence[int]) -> dict[int, float]:
    """Bytes per server under an assignment."""
    out: dict[int, float] = {}
    for size, r in zip(sizes, owners, strict=True):
        out[r] = out.get(r, 0.0) + size
    return out


def predicted_makespan(sizes: Sequence[float], owners: Sequence[int], model: PerfModel) -> float:
    """The slowest loaded PS's predicted time for its load: what a synchronous iteration waits for."""
    return max(model[r].mean(s) for r, s in loads_of(sizes, owners).items())
