"""Spot acquisition policies: what to request, renew or release at a decision point (Proteus §4, §6.3).

An executor (the simulator's market replay) calls :meth:`AcquisitionPolicy.decide` at every decision
point — the job's start, an eviction, a failed request, and whenever the policy asked to be called again
— with a :class:`DecisionPoint` (the time, the markets' prices, what the job holds), and carries out the
returned :class:`Decision`: requests to place and when to decide next. Renewal of a held allocation at
the end of its billing hour is asked separately (:meth:`AcquisitionPolicy.renewal_at`,
:meth:`AcquisitionPolicy.renew`). The built-in entries are in :mod:`policies.spot.bidding`.

Pure: every input is passed in; decisions are returned as values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from clustertwin.policies.bidbrain import (
    Allocation,
    BidBrainParams,
    EvictionTable,
    Market,
    MarketView,
    SpotRequest,
)
from clustertwin.policies.registry import Registry


@dataclass(frozen=True)
class DecisionPoint:
    """What the executor tells an acquisition policy at a decision point.

    ``why``: start | periodic | retry | eviction | request_failed. ``footprint``: the allocations held
    and not warned, plus the pending requests priced now; an allocation whose machines do no work (the
    reliable ones in AgileML's stage 3) has ``does_work=False``. ``held_rate``: ν held or requested,
    on demand included. ``markets`` are sorted, so ties resolve the same way every run.
    """

    now: float
    why: str
    markets: Sequence[MarketView]
    prices: Mapping[Market, float]
    footprint: Sequence[Allocation]
    held_rate: float
    target_rate: float  # ν of the reference cluster
    max_rate: float  # the most ν the job may hold at once


@dataclass(frozen=True)
class Decision:
    """Requests to place now, and when (and as what kind of point) to decide again; None: only at the
    next eviction or failed request."""

    requests: tuple[SpotRequest, ...] = ()
    next_s: float | None = None
    next_why: str = ""


@dataclass(frozen=True)
class AcquisitionInputs:
    """What an acquisition policy may be built from. ``eviction_table`` is called only by a policy that
    needs β/TTE tables (estimating them is the slow part of a run)."""

    bidbrain: BidBrainParams = BidBrainParams()
    eviction_table: Callable[[], EvictionTable] | None = None
    retry_s: float = 120.0  # how long a policy that found no acceptable market waits to look again


class AcquisitionPolicy:
    """Base type of the entries of :data:`ACQUISITION`; the defaults hold nothing and renew nothing.

    ``holds_transient``: whether the policy ever holds spot machines (all-on-demand does not, so it
    needs no fault tolerance).
    """

    holds_transient: bool = True

    def __init__(self, inputs: AcquisitionInputs = AcquisitionInputs()) -> None:
        self.inputs = inputs

    def on_demand_count(self, target_rate: float, rate: float) -> int:
        """On-demand machines of ``rate`` ν each to hold for the whole run (beyond fault tolerance's)."""
        return 0

    def decide(self, point: DecisionPoint) -> Decision:
        return Decision()

    def renewal_at(self, alloc: Allocation) -> float | None:
        """When to ask :meth:`renew` about a spot allocation's current billing hour; None: never."""
        return None

    def renew(
        self, now: float, alloc: Allocation, footprint: Sequence[Allocation], prices: Mapping[Market, float]
    ) -> bool:
        """Keep ``alloc`` for another billing hour?"""
        return True


ACQUISITION: Registry[Callable[[AcquisitionInputs], AcquisitionPolicy]] = Registry(
    "spot acquisition",
    "how a spot job acquires machines (policy of kind spot)",
    builtin="clustertwin.policies.spot",
    noun="policy",
)


def instances_for(rate: float, per_instance: float) -> int:
    """Instances of ``per_instance`` ν each that together give at least ``rate`` ν."""
    return math.ceil(rate / per_instance - 1e-9)


__all__ = [
    "ACQUISITION",
    "AcquisitionInputs",
    "AcquisitionPolicy",
    "Decision",
    "DecisionPoint",
    "instances_for",
]
