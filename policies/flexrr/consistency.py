"""BSP/SSP gating ([Harlap], §3.2.2; Cui et al.'s SSP).

A worker at local iteration t may read (and so start computing) only once every worker's updates of
iterations <= t - slack - 1 are in: with iterations numbered from 0, it may start iteration t when every
worker has *completed* at least t - slack iterations. BSP is slack 0; the paper's SSP uses slack 1.
"""

from __future__ import annotations


def may_start(iteration: int, min_completed: int, slack: int) -> bool:
    """Whether iteration ``iteration`` (0-based) may start when the slowest worker has completed
    ``min_completed`` iterations."""
    if slack < 0:
        raise ValueError(f"slack must be >= 0, got {slack}")
    return min_completed >= iteration - slack


def gating_iteration(iteration: int, slack: int) -> int:
    """How many iterations every worker must have completed before ``iteration`` may start."""
    return max(0, iteration - slack)
