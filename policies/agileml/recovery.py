"""What AgileML does when transient machines go (Proteus §3.3 "Removing machines"; [Proteus]).

An *eviction* comes with a warning (EC2: 2 min; GCE: 30 s). The elasticity controller polls for
warnings every 5 s, so it learns of one up to a poll period late. Each doomed ActivePS must then push
its unpushed aggregated updates plus an end-of-life flag to the BackupPSs. If every flush fits before
the machine dies the loss is nothing (an *end-of-life flush*); if not, the eviction is an *effective
failure*: the BackupPSs roll back to the last consistent state (the latest iteration whose updates
they all hold) and the workers redo the work since then.

Pure: sizes, bandwidths and times in; a :class:`RecoveryPlan` out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class RecoveryPlan:
    """``kind``: end_of_life_flush | effective_failure. ``lost_s`` is progress time to redo
    (0 for a flush); ``flush_s`` the time the end-of-life push needs."""

    kind: Literal["end_of_life_flush", "effective_failure"]
    flush_s: float
    lost_s: float


def plan_recovery(
    warning_s: float,
    poll_s: float,
    unpushed_bytes: float,
    flush_bandwidth_bps: float,
    since_consistent_s: float,
) -> RecoveryPlan:
    """Decide flush vs roll-back for an eviction seen with ``warning_s`` of notice.

    The worst case of the poll is assumed (the warning is noticed a full ``poll_s`` late), as a cautious
    controller must. ``since_consistent_s`` is the progress time since the last consistent state, which
    an effective failure loses. A warning of 0 is a plain failure.
    """
    flush_s = unpushed_bytes * 8.0 / flush_bandwidth_bps if flush_bandwidth_bps > 0 else float("inf")
    if warning_s > 0 and poll_s + flush_s <= warning_s:
        return RecoveryPlan("end_of_life_flush", flush_s, 0.0)
    return RecoveryPlan("effective_failure", flush_s, since_consistent_s)
