"""Max-min fair bandwidth sharing of flows over links, for every simulator (flows, not packets).

A flow crosses a fixed set of links (a NIC's egress, another NIC's ingress); rates are recomputed only when
a flow starts or ends. The rates are the max-min fair ones, found by progressive filling (water filling):
raise every unfrozen flow's rate together until a link is full, freeze the flows crossing it, repeat. With
``c_l`` the capacity of link ``l``, ``n_l(t)`` the (weighted) number of unfrozen flows crossing it in round
``t``, ``r_l(t)`` its capacity not yet taken, and ``L(t)`` the common rate of the unfrozen flows:

    r_l(0) = c_l,   L(0) = 0
    d(t)   = min_l r_l(t-1) / n_l(t)            over the links with n_l(t) > 0
    L(t)   = L(t-1) + d(t)
    r_l(t) = r_l(t-1) - d(t) n_l(t)             for every link

and the unfrozen flows crossing a link with ``r_l(t) = 0`` (up to rounding) freeze at rate ``L(t)``. Every
round freezes at least one flow, so there are at most as many rounds as flows. The result never puts a link
over its capacity, is work-conserving (every flow crosses a full link) and is max-min fair (on that full
link no flow has a larger rate: a flow can gain only at the expense of one whose rate is no larger).

The freezing rate of a flow frozen in round ``t`` on link ``l`` is equally ``L(t)`` and
``(c_l - sum of the rates already frozen on l) / n_l(t)``; the two are equal in real arithmetic, not in
floating point. ``order`` chooses how it is evaluated:

* ``level`` (vectorised over flows, for many flows): accumulate ``L(t)`` and every ``r_l`` as above, and
  freeze in one round every link that fills within rounding of the tightest.
* ``bottleneck`` (plain Python, a few times faster for a few dozen path groups): take one tightest link a
  round (the first in set order on ties), freeze its flows at ``r_l / n_l`` directly, and take their rates
  off the links they cross.

The PSLD engine uses ``level`` and the FlexRR parameter server ``bottleneck``: each keeps the order its
results were produced with, so that their event logs stay bit for bit what they were (a rounding difference
in a rate moves a finishing time, and FlexRR's reassignment thresholds amplify it).

``weight[i]`` flows share path ``i`` (a group of flows between the same endpoints, which always get the
same rate): they count ``weight[i]`` times on each link and each gets the returned rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np


def max_min_rates(
    paths: np.ndarray | Sequence[Sequence[int]],
    capacity: np.ndarray | Sequence[float],
    weight: np.ndarray | Sequence[int] | None = None,
    *,
    order: Literal["level", "bottleneck"] = "level",
) -> np.ndarray:
    """Max-min fair rate of each flow (or group); ``paths[i]`` lists the distinct links flow ``i`` crosses
    (shape (n, k)), ``weight[i]`` (default 1) how many flows follow path ``i``; ``order`` is the evaluation
    order of the module docstring.

    ``capacity`` is per link and must be positive where a flow crosses it.
    """
    paths = np.asarray(paths, dtype=np.int64)
    if order == "bottleneck":
        weights = [1] * len(paths) if weight is None else np.asarray(weight, dtype=np.int64).tolist()
        return np.array(_by_bottleneck(paths.tolist(), np.asarray(capacity, dtype=float).tolist(), weights))
    return _by_level(paths, capacity, weight)


def _by_level(
    paths: np.ndarray, capacity: np.ndarray | Sequence[float], weight: np.ndarray | Sequence[int] | None
) -> np.ndarray:
    n, k = paths.shape if paths.ndim == 2 else (len(paths), 0)
    rates = np.zeros(n)
    if n == 0:
        return rates
    n_links = len(capacity)
    cols = [paths[:, i] for i in range(k)]
    weights = None if weight is None else np.asarray(weight, dtype=float)
    left = np.asarray(capacity, dtype=float).copy()
    active = np.ones(n, dtype=bool)
    tol = 1e-12 * float(np.max(capacity)) + 1e-9
    level = 0.0
    while True:
        counts = np.zeros(n_links)
        on = None if weights is None else weights[active]
        for col in cols:
            counts += np.bincount(col[active], weights=on, minlength=n_links)
        used = counts > 0
        share = np.where(used, left / np.where(used, counts, 1.0), np.inf)
        inc = float(share.min())
        level += inc
        left -= inc * counts
        saturated = used & (left <= tol)
        if not saturated.any():  # rounding: saturate the tightest link anyway
            saturated = share <= inc
        left[saturated] = 0.0
        hit = np.zeros(n, dtype=bool)
        for col in cols:
            hit |= saturated[col]
        newly = hit & active
        rates[newly] = level
        active &= ~newly
        if not active.any():
            return rates


def _by_bottleneck(paths: list[list[int]], capacity: list[float], weight: list[int]) -> list[float]:
    n_links = len(capacity)
    load = [0] * n_links  # unfrozen flows crossing each link
    left = list(capacity)  # capacity not yet given to frozen flows
    members: list[list[int]] = [[] for _ in range(n_links)]
    for g, links in enumerate(paths):
        for x in links:
            load[x] += weight[g]
            members[x].append(g)
    rate = [0.0] * len(paths)
    frozen = [False] * len(paths)
    live = {x for x in range(n_links) if load[x]}
    while live:
        bottleneck = min(live, key=lambda x: left[x] / load[x])
        share = max(0.0, left[bottleneck] / load[bottleneck])  # max: rounding below zero
        for g in members[bottleneck]:
            if frozen[g]:
                continue
            frozen[g] = True
            rate[g] = share
            k = weight[g]
            for x in paths[g]:
                left[x] -= share * k
                load[x] -= k
                if load[x] == 0:
                    live.discard(x)
    return rate
