"""Max-min fair bandwidth sharing of flows over links (DESIGN.md: flows, not packets).

A flow crosses a fixed set of links (here: its source NIC's egress and its destination NIC's ingress,
so incast at a PS shares the PS's ingress among the workers pushing to it). Rates are recomputed only
when a flow starts or ends, by progressive filling: raise every unfrozen flow's rate together until some
link saturates, freeze the flows crossing it, repeat. The result never exceeds a link's capacity and is
work-conserving (every flow crosses at least one saturated link).
"""

from __future__ import annotations

import numpy as np


def max_min_rates(paths: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Max-min fair rates of flows; ``paths[i]`` lists the links flow ``i`` crosses (shape (n, k)).

    ``capacity`` is per link and must be positive where a flow crosses it.
    """
    paths = np.asarray(paths, dtype=np.int64)
    n, k = paths.shape if paths.ndim == 2 else (len(paths), 0)
    rates = np.zeros(n)
    if n == 0:
        return rates
    n_links = len(capacity)
    cols = [paths[:, i] for i in range(k)]
    left = np.asarray(capacity, dtype=float).copy()
    active = np.ones(n, dtype=bool)
    tol = 1e-12 * float(np.max(capacity)) + 1e-9
    level = 0.0
    while True:
        counts = np.zeros(n_links)
        for col in cols:
            counts += np.bincount(col[active], minlength=n_links)
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
