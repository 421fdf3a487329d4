"""The instance-picking policy of the cloud what-ifs: invariants under any offer (hypothesis)."""

from __future__ import annotations

import math

from clustertwin.policies.cloud import Allowed, Option, cost_per_work, pick, repick
from hypothesis import given, settings
from hypothesis import strategies as st

GPUS = ("K80", "P100", "V100")


@st.composite
def options(draw: st.DrawFn) -> list[Option]:
    n = draw(st.integers(1, 8))
    out = []
    for i in range(n):
        out.append(
            Option(
                draw(st.sampled_from(("aws", "azure", "gcp"))),
                "r",
                f"z{i}",
                f"t{i}",
                draw(st.sampled_from(GPUS)),
                draw(st.sampled_from((1, 2, 4, 8))),
                draw(st.floats(0.01, 50.0)),
                draw(st.booleans()),
            )
        )
    return out


throughputs = st.fixed_dictionaries({g: st.floats(0.0, 100.0) for g in GPUS})
alloweds = st.builds(
    Allowed,
    spot=st.none() | st.booleans(),
    gpu_types=st.none() | st.frozensets(st.sampled_from(GPUS), min_size=1),
    max_gpus=st.none() | st.sampled_from((1, 4)),
    clouds=st.none() | st.frozensets(st.sampled_from(("aws", "azure", "gcp")), min_size=1),
)


@settings(max_examples=60, deadline=None)
@given(options(), throughputs, alloweds)
def test_pick_is_allowed_and_cheapest_per_work(offer: list[Option], thr: dict, allowed: Allowed) -> None:
    chosen = pick(offer, thr, allowed)
    runnable = [o for o in offer if allowed.admits(o) and math.isfinite(cost_per_work(o, thr))]
    if not runnable:
        assert chosen is None
        return
    assert chosen is not None and allowed.admits(chosen)
    assert all(cost_per_work(chosen, thr) <= cost_per_work(o, thr) for o in runnable)
    # Never a dearer option for the same throughput: the cheapest per GPU among options of its GPU type.
    assert all(chosen.gpu_price <= o.gpu_price for o in runnable if o.gpu_type == chosen.gpu_type)


@settings(max_examples=40, deadline=None)
@given(options(), throughputs, st.randoms(use_true_random=False))
def test_pick_ignores_the_order_of_the_offer(offer: list[Option], thr: dict, rnd) -> None:
    shuffled = list(offer)
    rnd.shuffle(shuffled)
    assert pick(offer, thr) == pick(shuffled, thr)


@settings(max_examples=40, deadline=None)
@given(options(), throughputs, options())
def test_a_wider_offer_never_costs_more_per_work(offer: list[Option], thr: dict, more: list[Option]) -> None:
    narrow, wide = pick(offer, thr), pick(offer + more, thr)
    if narrow is not None:
        assert wide is not None and cost_per_work(wide, thr) <= cost_per_work(narrow, thr)


@settings(max_examples=40, deadline=None)
@given(options(), throughputs, st.floats(0.0, 0.5))
def test_repick_moves_only_for_a_gain_above_the_threshold(
    offer: list[Option], thr: dict, gain: float
) -> None:
    current = pick(offer, thr)
    if current is None:
        return
    # Prices change: the current option doubles in price.
    dearer = [
        Option(
            *[getattr(o, f) for f in ("cloud", "region", "zone", "instance_type", "gpu_type", "gpus")],
            o.price * (2 if o.key == current.key else 1),
            o.spot,
        )
        for o in offer
    ]  # noqa: E501
    now = next(o for o in dearer if o.key == current.key)
    chosen = repick(current, dearer, thr, Allowed(), gain)
    assert chosen is not None
    if chosen.key != current.key:
        assert cost_per_work(chosen, thr) < cost_per_work(now, thr) * (1 - gain)
    else:
        assert chosen.price == now.price  # it stays at the new price
