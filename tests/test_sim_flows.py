"""Max-min fair sharing of flows over links (``sim/flows.py``, used by the FlexRR PS and the PSLD engine).

For any flows (groups of ``weight`` flows) over any links of any positive capacities, in either evaluation
order: no link carries more than its capacity, and every flow is bottlenecked somewhere: it crosses a full
link on which no flow gets more than it does (max-min fairness; work conservation follows). The two orders
give the same rates up to rounding.
"""

from __future__ import annotations

import numpy as np
import pytest
from clustertwin.sim.flows import max_min_rates
from hypothesis import given, settings
from hypothesis import strategies as st


@st.composite
def networks(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n_links = draw(st.integers(2, 8))
    k = draw(st.integers(1, min(3, n_links)))  # links per path, distinct within a path
    path = st.lists(st.integers(0, n_links - 1), min_size=k, max_size=k, unique=True)
    paths = np.array(draw(st.lists(path, min_size=1, max_size=30)))
    weight = np.array(draw(st.lists(st.integers(1, 5), min_size=len(paths), max_size=len(paths))))
    capacity = np.array(draw(st.lists(st.floats(0.1, 100.0), min_size=n_links, max_size=n_links)))
    return paths, capacity, weight


@pytest.mark.parametrize("order", ["level", "bottleneck"])
@settings(max_examples=150, deadline=None)
@given(network=networks())
def test_no_link_over_capacity_and_every_flow_bottlenecked(
    order: str, network: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> None:
    paths, capacity, weight = network
    rates = max_min_rates(paths, capacity, weight, order=order)  # type: ignore[arg-type]
    assert (rates > 0).all()
    load = np.zeros(len(capacity))
    for links, rate, k in zip(paths, rates, weight, strict=True):
        load[links] += rate * k
    tol = 1e-7 * capacity.max()
    assert (load <= capacity + tol).all()
    full = load >= capacity - tol
    for i, links in enumerate(paths):
        fastest = {link: max(rates[j] for j in range(len(paths)) if link in paths[j]) for link in links}
        assert any(full[link] and rates[i] >= fastest[link] - tol for link in links), (
            f"flow {i} at {rates[i]} could grow without slowing a flow of no larger rate"
        )


@settings(max_examples=150, deadline=None)
@given(network=networks())
def test_both_orders_give_the_same_rates_up_to_rounding(
    network: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> None:
    paths, capacity, weight = network
    level = max_min_rates(paths, capacity, weight, order="level")
    assert np.allclose(level, max_min_rates(paths, capacity, weight, order="bottleneck"), rtol=1e-9)


@pytest.mark.parametrize("order", ["level", "bottleneck"])
def test_unweighted_is_weight_one_and_a_group_shares_like_its_flows(order: str) -> None:
    paths = np.array([[0, 2], [1, 2], [0, 3]])
    capacity = np.array([10.0, 4.0, 9.0, 100.0])

    def rates(p: np.ndarray, w: list[int] | None = None) -> np.ndarray:
        return max_min_rates(p, capacity, w, order=order)  # type: ignore[arg-type]

    assert np.array_equal(rates(paths), rates(paths, [1, 1, 1]))
    # two flows on path (0, 2) as one group of weight 2: the same rates as listing them twice
    grouped = rates(paths, [2, 1, 1])
    listed = rates(np.vstack([paths[:1], paths]))
    assert np.allclose(grouped, listed[1:]) and np.isclose(listed[0], listed[1])
    # link 2 (capacity 9) is shared by three flows: 3 each; flow (0, 3) then takes what link 0 has left
    assert np.allclose(grouped, [3.0, 3.0, 4.0])
