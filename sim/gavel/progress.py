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


@compiled
def lone_slots_round(
    jobs: np.ndarray,
    types: np.ndarray,
    consolidated: np.ndarray,
    renewed: np.ndarray,
    rate_consolidated: np.ndarray,
    rate_spread: np.ndarray,
    overhead_per_type: np.ndarray,
    overhead_on_first_start: bool,
    has_run: np.ndarray,
    remaining: np.ndarray,
    start: float,
    length: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """A round in which every combination is one job alone on its GPUs, on a dedicated cluster, in one
    pass: each slot's rate on its placement, its restart overhead (charged where the lease was not renewed
    and the job ran before, or on every start when ``overhead_on_first_start``), then
    :func:`round_progress`. Moves the jobs' ``remaining`` steps and marks them in ``has_run``.

    Returns per slot the steps made, whether the job finishes, when its slot ends (its finish, else the
    round's end), the seconds it trained, and whether this was its first start; and the round's end (the
    round stops early when every slot has finished)."""
    n = jobs.size
    rate = np.empty(n)
    overhead = np.empty(n)
    left = np.empty(n)
    first = np.empty(n, dtype=np.bool_)
    for i in range(n):
        m, j = jobs[i], types[i]
        rate[i] = rate_consolidated[m, j] if consolidated[i] else rate_spread[m, j]
        first[i] = not has_run[m]
        charged = not renewed[i] and (has_run[m] or overhead_on_first_start)
        overhead[i] = min(overhead_per_type[j] if charged else 0.0, length)
        left[i] = remaining[m]
    steps, finishes, finish_t = round_progress(rate, left, overhead, start, length)
    cap = start + length
    latest = -np.inf
    for i in range(n):
        latest = max(latest, min(finish_t[i], cap))
    end = np.empty(n)
    seconds = np.empty(n)
    for i in range(n):
        end[i] = finish_t[i] if finishes[i] else latest
        seconds[i] = min(finish_t[i], cap) - start - overhead[i]
        has_run[jobs[i]] = True
        remaining[jobs[i]] -= steps[i]
    return steps, finishes, end, seconds, first, latest
