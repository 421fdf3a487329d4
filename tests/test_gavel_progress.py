"""A round's closed-form progress: the compiled loop against the same rule in numpy."""

from __future__ import annotations

import numpy as np
import pandas as pd
from clustertwin.policies.compiled import interpreted
from clustertwin.scenarios.load import load_scenario
from clustertwin.sim.gavel.progress import lone_slots_round, round_progress
from clustertwin.sim.gavel.setup import build
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


def test_lone_rounds_write_the_tables_the_general_round_writes():
    """A single-GPU trace run with every round through the general path (`_run_round`) and through the
    one-pass path for lone one-GPU jobs gives the same tables, bit for bit (restart overheads on)."""
    scenario = load_scenario(
        None,
        (
            "workload.generate.jobs_per_hour=null",
            "workload.generate.num_jobs=40",
            "workload.window=null",
            "mechanism.preemption_overhead_s=30.0",
        ),
    )
    tables = []
    for lone in (True, False):
        simulation = build(scenario)
        simulation._lone_rounds = lone
        tables.append(simulation.run())
    fast, general = tables
    assert (
        len(fast["rounds"]) > 100 and fast["rounds"]["renewed"].any() and not fast["rounds"]["renewed"].all()
    )
    for name in ("jobs", "rounds", "events"):
        pd.testing.assert_frame_equal(fast[name], general[name], check_exact=True)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([0.0, 0.5, 2.5, 7.0]), st.sampled_from([1.0, 100.0, 5000.0]), st.booleans()
        ),
        min_size=1,
        max_size=12,
        unique_by=lambda slot: slot,
    ),
    st.booleans(),
)
def test_the_lone_round_pass_is_the_same_compiled_and_plain(slots, on_first_start):
    n = len(slots)
    jobs = np.arange(n, dtype=np.int64)[::-1].copy()
    types = jobs % 2
    rate = np.array([s[0] for s in slots])
    rates = np.column_stack([rate, 2 * rate])
    results = []
    for kernel in (lone_slots_round, interpreted(lone_slots_round)):
        has_run = np.array([s[2] for s in slots])
        remaining = np.array([s[1] for s in slots])
        out = kernel(
            jobs,
            types,
            jobs % 3 > 0,
            jobs % 4 == 0,
            rates,
            rates / 2,
            np.array([15.0, 400.0]),
            on_first_start,
            has_run,
            remaining,
            7200.0,
            360.0,
        )
        results.append((*out, has_run, remaining))
        steps, finishes, end, seconds, first, latest = out
        assert has_run.all() and (remaining >= -1e-9).all()
        assert (end <= latest).all() and latest <= 7200.0 + 360.0
        assert (seconds <= 360.0).all()
    for a, b in zip(*results, strict=True):
        assert np.array_equal(a, b)
