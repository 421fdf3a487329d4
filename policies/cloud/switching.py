"""Dynamic re-picking: moving a job when prices change ([Narayanan] ch. 6, §6.3.2 "Impact of Job Duration
on Effectiveness of Dynamic Scheduling", Fig. 6.6).

At each price change the job may move to the option of least cost per work. A move costs a checkpoint
transfer (cents, Table 6.2) and a restart, so it is made only when the best option is cheaper per work
than staying by more than ``min_gain`` (a fraction); the current option is always left when it is no
longer on offer or no longer allowed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from clustertwin.policies.cloud.picking import ANY, Allowed, Option, cost_per_work, pick


def repick(
    current: Option | None,
    options: Iterable[Option],
    throughput: Mapping[str, float],
    allowed: Allowed = ANY,
    min_gain: float = 0.0,
) -> Option | None:
    """The option to run on from now: ``current`` at its present price (found among ``options`` by key),
    or the best option when that is cheaper per work by more than ``min_gain``."""
    if min_gain < 0:
        raise ValueError(f"min_gain must be >= 0, got {min_gain}")
    offered = list(options)
    best = pick(offered, throughput, allowed)
    if current is None or best is None:
        return best
    now = next((o for o in offered if o.key == current.key and allowed.admits(o)), None)
    if now is None:
        return best
    if cost_per_work(best, throughput) < cost_per_work(now, throughput) * (1.0 - min_gain):
        return best
    return now
