"""A round's progress in closed form ([Narayanan] §5.5): each slot restarts, then trains at its rate.

A slot whose job has ``left`` steps to go spends ``overhead`` seconds restarting (a checkpoint load when its
lease was not renewed), then trains at ``rate`` steps/s for the rest of the round. It finishes inside the
round when the steps it can reach cover what it has left, at ``start + overhead + left / rate``; otherwise
it makes ``rate · (length − overhead)`` steps. Compiled by numba: on a round's ~100 slots numpy's per-call
cost, not the arithmetic, set the time of the vectorised form.
"""

from __future__ import annotations

import numpy as np
from clustertwin.policies.compiled import compiled


@compiled
def round_progress(
    rate: np.ndarray, left: np.ndarray, overhead: np.ndarray, start: float, length: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per slot: steps made, whether the job finishes, and when (``inf`` when it does not)."""
    steps = np.empty(rate.size)
    finishes = np.zeros(rate.size, dtype=np.bool_)
    finish_t = np.full(rate.size, np.inf)
    for i in range(rate.size):
        reach = rate[i] * (length - overhead[i])
        if rate[i] > 0 and reach >= left[i]:
            steps[i] = left[i]
            finishes[i] = True
            finish_t[i] = start + overhead[i] + left[i] / rate[i]
        else:
            steps[i] = reach
    return steps, finishes, finish_t
