"""Billing models for spot/preemptible instances (pluggable; the run's ``billing`` field picks one).

* ``hourly_refund`` — EC2 as in the Proteus paper (2016): each instance-hour is charged at its start at
  the spot price then in effect; if *the provider* evicts, the current hour is refunded (any hour, not
  only the first), so work done in it is free. A user release pays the whole hour. On-demand is charged
  the same way, never refunded.
* ``per_second`` — EC2 since Oct 2017: pay the spot price in effect each second, no refund.
* ``fixed_preemptible`` — GCE preemptible: a fixed price (``discount`` off on-demand, 70% in 2016),
  per second, 30 s warning, at most 24 h per instance; preemptions are not price-driven.

For every model the job's final partial hour is prorated (Proteus §6.3: the next job in the sequence
uses the rest), so schemes are compared on the time they actually use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

BillingName = Literal["hourly_refund", "per_second", "fixed_preemptible"]


@dataclass(frozen=True)
class BillingModel:
    """How instances are charged, and the eviction rules that come with each provider's model."""

    name: BillingName
    warning_s: float
    hourly: bool  # charge whole hours up front (else settle per second)
    refund_on_eviction: bool
    price_evictions: bool  # evicted when the spot price rises above the bid
    max_lifetime_s: float = float("inf")
    fixed_discount: float | None = None  # fixed spot price = (1 − discount) × on-demand


def billing_model(name: BillingName, warning_s: float | None = None) -> BillingModel:
    """The named model with its provider's defaults (warning: EC2 2 min, GCE 30 s)."""
    if name == "hourly_refund":
        return BillingModel(name, 120.0 if warning_s is None else warning_s, True, True, True)
    if name == "per_second":
        return BillingModel(name, 120.0 if warning_s is None else warning_s, False, False, True)
    if name == "fixed_preemptible":
        return BillingModel(
            name, 30.0 if warning_s is None else warning_s, False, False, False, 24 * 3600.0, 0.70
        )
    raise ValueError(f"unknown billing model {name!r}")


def lifetime_bill(
    model: BillingModel,
    start_s: float,
    end_s: float,
    *,
    evicted: bool,
    on_demand: bool,
    price_at: Callable[[float], float],
    integral_usd: Callable[[float, float], float],
    count: int = 1,
) -> list[tuple[float, str, float]]:
    """The line items ``(time_s, kind, usd)`` of ``count`` instances held over ``[start_s, end_s]``.

    The closed form of what :class:`sim.spot.engine.SpotSim` books incrementally, for an instance whose
    whole lifetime is known (granted at ``start_s``; gone at ``end_s`` by a provider eviction when
    ``evicted``, else released by the user): hourly schemes and on-demand charge each hour at its start
    at the price then in effect (``price_at``), refund the hour in progress on an eviction
    (``refund_on_eviction``) or prorate the final partial hour (Proteus §6.3); ``per_second`` settles
    ``∫ price dt`` (``integral_usd``) hour by hour. Kinds are the engine's: charge, refund, settle,
    prorate. No item is dated after ``end_s`` and the total is never negative (a refund or proration
    never exceeds the charge it corrects).
    """
    items: list[tuple[float, str, float]] = []
    if end_s <= start_s:
        return items
    hour = 3600.0
    hourly = model.hourly or on_demand
    t = start_s
    charge = 0.0
    while t < end_s:
        nxt = min(t + hour, end_s)
        if hourly:
            charge = count * price_at(t)
            items.append((t, "charge", charge))
        else:
            amount = count * integral_usd(t, nxt)
            if amount > 0:
                items.append((nxt, "settle", amount))
        last_start = t
        t += hour
    if hourly:
        if evicted and model.refund_on_eviction and not on_demand:
            items.append((end_s, "refund", -charge))  # the provider evicted: this hour is free
        else:
            used = end_s - last_start
            if used < hour:
                items.append((end_s, "prorate", -charge * (1.0 - used / hour)))
    return items
