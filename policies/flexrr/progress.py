"""Straggler detection: Algorithm 1 of [Harlap] (§3.3.3) and the iteration-time average it uses."""

from __future__ import annotations


def progress_difference(
    *,
    helper_iteration: int,
    helper_fraction: float,
    helper_timer: float,
    own_iteration: int,
    own_fraction: float,
    now: float,
    avg_iteration_s: float,
) -> float:
    """How far (in iterations) this worker is behind the sender of a progress-report (Algorithm 1).

    Line 1: completion diff = progress in the message minus this worker's progress (both as iteration +
    fraction). Line 3: time diff = this worker's timer minus the message's. Line 4: progress difference
    = completion diff + time diff / current avg, i.e. the sender's progress is extrapolated over the time
    the report was in flight, at this worker's average speed. Positive means this worker is behind.
    """
    completion_diff = (helper_iteration + helper_fraction) - (own_iteration + own_fraction)
    time_diff = now - helper_timer
    return completion_diff + time_diff / avg_iteration_s


def update_average(previous: float | None, latest: float, weight: float) -> float:
    """Algorithm 1 line 2's "weighted average time it takes ... to complete an iteration"; the paper
    does not give the weighting, so an exponentially weighted moving average [interp]."""
    if previous is None:
        return latest
    return weight * latest + (1.0 - weight) * previous


def estimate_iteration_s(avg: float | None, elapsed_s: float, fraction: float) -> float:
    """The average to use in Algorithm 1: the EWMA once an iteration has completed, before that an
    extrapolation of the current one (``elapsed / fraction``) [interp]."""
    if avg is not None and avg > 0:
        return avg
    if fraction > 0 and elapsed_s > 0:
        return elapsed_s / fraction
    return float("inf")  # nothing known yet: ignore the time term
