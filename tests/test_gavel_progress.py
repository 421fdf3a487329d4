"""A round's closed-form progress: the compiled loop against the same rule in numpy."""

from __future__ import annotations

import numpy as np
from clustertwin.policies.compiled import interpreted
from clustertwin.sim.gavel.progress import round_progress
from hypothesis import given, settings
from hypothesis import strategies as st

values = st.sampled_from([0.0, 0.5, 1.0, 2.5, 7.0, 100.0])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(values, values, st.sampled_from([0.0, 10.0, 360.0])), min_size=1, max_size=30),
    st.sampled_from([0.0, 3600.0, 1e7 + 0.25]),
)
def test_round_progress_matches_the_rule_in_numpy(slots, start):
    rate, left, overhead = (np.array(column) for column in zip(*slots, strict=True))
    length = 360.0
    steps, finishes, finish_t = round_progress(rate, left, overhead, start, length)
    reach = rate * (length - overhead)
    want_finishes = (rate > 0) & (reach >= left)
    assert finishes.tolist() == want_finishes.tolist()
    assert np.array_equal(steps, np.where(want_finishes, left, reach))
    with np.errstate(divide="ignore", invalid="ignore"):
        want_t = np.where(want_finishes, start + overhead + left / rate, np.inf)
    assert np.array_equal(finish_t, want_t)
    # A slot that finishes makes exactly what it had left, and does so within the round.
    assert (finish_t[finishes] <= start + length).all()
    for a, b in zip(
        interpreted(round_progress)(rate, left, overhead, start, length),
        (steps, finishes, finish_t),
        strict=True,
    ):
        assert np.array_equal(a, b)
