"""Unit tests of FlexRR's pure policy code: groups, Algorithm 1, gating, the RR state machine, stragglers."""

from __future__ import annotations

import numpy as np
import pytest
from clustertwin.policies.flexrr import stragglers as st
from clustertwin.policies.flexrr.config import RRConfig
from clustertwin.policies.flexrr.consistency import may_start
from clustertwin.policies.flexrr.groups import helpee_groups, helper_groups, machine_of
from clustertwin.policies.flexrr.messages import (
    BegunHelping,
    CancelAck,
    CancelHelp,
    Commit,
    DoThis,
    HelpCompleted,
    IterationDone,
    ProgressReport,
    Wasted,
)
from clustertwin.policies.flexrr.progress import progress_difference
from clustertwin.policies.flexrr.worker import Phase, RRWorker


def of(actions, kind):
    return [a for a in actions if isinstance(a, kind)]


def make(worker=0, lo=0, hi=1000, helpers=(1,), helpees=(1,), iterations=3, **cfg):
    return RRWorker(worker, lo, hi, helpers, helpees, RRConfig(**cfg), iterations)


# ---- groups --------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [1, 2, 4, 8, 16])
def test_helper_groups_one_colocated_rest_elsewhere(size):
    workers, machines = 128, 16
    helpers = helper_groups(workers, machines, size)
    for w, group in enumerate(helpers):
        assert len(group) == size and w not in group and len(set(group)) == size
        same = [h for h in group if machine_of(h, machines) == machine_of(w, machines)]
        assert len(same) == 1  # §3.3.1: exactly one helper on the same machine
    helpees = helpee_groups(helpers)
    assert all(len(g) == size for g in helpees)  # equal in- and out-degree
    for w, group in enumerate(helpers):
        for h in group:
            assert w in helpees[h]


def test_helper_group_zero_is_empty():
    assert all(g == () for g in helper_groups(16, 4, 0))


# ---- Algorithm 1 and gating ----------------------------------------------------------------------
def test_progress_difference_extrapolates_report_age():
    # helper at 75% of iteration 3, me at 40% of iteration 3, report 1 s old, my iterations take 10 s
    diff = progress_difference(
        helper_iteration=3,
        helper_fraction=0.75,
        helper_timer=5.0,
        own_iteration=3,
        own_fraction=0.40,
        now=6.0,
        avg_iteration_s=10.0,
    )
    assert diff == pytest.approx(0.35 + 0.1)


@pytest.mark.parametrize(
    "iteration,min_completed,slack,ok",
    [(0, 0, 0, True), (1, 0, 0, False), (1, 1, 0, True), (2, 1, 1, True), (3, 1, 1, False), (5, 2, 3, True)],
)
def test_may_start(iteration, min_completed, slack, ok):
    assert may_start(iteration, min_completed, slack) is ok


# ---- the state machine ---------------------------------------------------------------------------
def test_progress_report_sent_once_at_checkpoint():
    w = make(helpees=(1, 2, 3))
    w.start_iteration(0.0)
    assert w.items_until_stop() == 750
    assert not of(w.advance(1.0, 749), ProgressReport)
    reports = of(w.advance(1.1, 1), ProgressReport)
    assert sorted(r.dst for r in reports) == [1, 2, 3] and all(r.iteration == 0 for r in reports)
    assert not of(w.advance(1.2, 100), ProgressReport)


def test_behind_helpee_sends_initial_assignment_from_the_tail():
    w = make(helpers=(5,), helpees=())
    w.start_iteration(0.0)
    w.advance(4.0, 300)  # 30% done when the helper is at 75%: 45% behind
    out = w.receive(4.0, ProgressReport(5, 0, 0, 4.0))
    (do,) = of(out, DoThis)
    assert (do.dst, do.iteration, do.start, do.end) == (5, 0, 975, 1000)  # 2.5%, carved from the end
    assert w.tail == 975


def test_not_behind_helpee_ignores_report():
    w = make(helpers=(5,), helpees=())
    w.start_iteration(0.0)
    w.advance(4.0, 600)  # 15% behind < 20% trigger
    assert w.receive(4.0, ProgressReport(5, 0, 0, 4.0)) == []


def test_report_from_non_helper_is_ignored():
    w = make(helpers=(5,), helpees=())
    w.start_iteration(0.0)
    assert w.receive(0.0, ProgressReport(7, 0, 3, 0.0)) == []


def test_same_iteration_do_this_deferred_until_own_work_done():
    h = make(worker=1, lo=1000, hi=2000, helpers=(), helpees=(0,))
    h.start_iteration(0.0)
    h.advance(1.0, 800)
    out = h.receive(1.0, DoThis(0, 1, 0, 975, 1000, 1, 1.0))
    assert not of(out, BegunHelping) and h.task().kind == "own"
    out = h.advance(2.0, 200)  # own work done -> deferred help starts
    (begun,) = of(out, BegunHelping)
    assert begun.aid == (0, 1) and h.task().kind == "help"
    out = h.advance(2.5, 25)
    assert of(out, HelpCompleted) and of(out, Commit)[0].by == 1


def test_older_iteration_do_this_preempts_own_work():
    h = make(worker=1, lo=1000, hi=2000, helpers=(), helpees=(0,))
    h.start_iteration(0.0)
    h.advance(5.9, 999)
    h.advance(6.0, 1)
    h.start_iteration(6.0)  # iteration 1
    h.advance(7.0, 100)
    out = h.receive(7.0, DoThis(0, 1, 0, 975, 1000, 1, 6.9))
    assert of(out, BegunHelping) and h.task().kind == "help"


def test_do_this_from_the_future_or_before_a_cancel_is_discarded():
    h = make(worker=1, lo=1000, hi=2000, helpers=(), helpees=(0,))
    h.start_iteration(0.0)
    assert h.receive(0.1, DoThis(0, 1, 1, 975, 1000, 1, 0.1)) == [] and not h.deferred
    h.receive(0.2, CancelHelp(0, 1, 5, (), 0.2))
    h.receive(0.3, DoThis(0, 1, 0, 950, 975, 4, 0.1))  # stamped before the cancel
    assert not h.deferred and not h.help_queue


def test_begun_earns_follow_up_of_twice_the_size():
    w = make(helpers=(5,), helpees=())
    w.start_iteration(0.0)
    w.advance(4.0, 300)
    (do,) = of(w.receive(4.0, ProgressReport(5, 0, 0, 4.0)), DoThis)
    (follow,) = of(w.receive(4.5, BegunHelping(5, 0, do.aid)), DoThis)
    assert (follow.start, follow.end) == (925, 975)  # 5%, the next block from the end


def test_cancel_not_begun_is_reclaimed_and_committed_once():
    w = make(helpers=(5,), helpees=())
    w.start_iteration(0.0)
    w.advance(4.0, 300)
    (do,) = of(w.receive(4.0, ProgressReport(5, 0, 0, 4.0)), DoThis)
    out = w.advance(5.0, 675)  # own unassigned items done
    (cancel,) = of(out, CancelHelp)
    assert cancel.aids == (do.aid,) and w.task().kind == "spec"
    w.advance(5.1, 25)  # speculative processing done, not yet committed
    assert w.phase is Phase.CLEANUP
    out = w.receive(5.2, CancelAck(5, 0, cancel.aids, ()))
    commits = of(out, Commit)
    assert [(c.start, c.end, c.kind) for c in commits] == [(975, 1000, "reclaimed")]
    assert of(out, IterationDone)


def test_cancel_race_lost_helper_copy_counts():
    w = make(helpers=(5,), helpees=())
    w.start_iteration(0.0)
    w.advance(4.0, 300)
    (do,) = of(w.receive(4.0, ProgressReport(5, 0, 0, 4.0)), DoThis)
    (cancel,) = of(w.advance(5.0, 675), CancelHelp)
    w.advance(5.05, 10)  # speculative start
    out = w.receive(5.1, CancelAck(5, 0, cancel.aids, (do.aid,)))  # helper had begun
    assert of(out, Wasted)[0].items == 10 and not of(out, Commit) and not of(out, IterationDone)
    assert w.task() is None
    out = w.receive(5.3, HelpCompleted(5, 0, do.aid))
    assert of(out, IterationDone)


def test_helper_acknowledges_begun_assignments():
    h = make(worker=1, lo=1000, hi=2000, helpers=(), helpees=(0,))
    h.start_iteration(0.0)
    h.advance(1.0, 1000)
    h.receive(1.0, DoThis(0, 1, 0, 975, 1000, 1, 0.9))
    h.receive(1.0, DoThis(0, 1, 0, 925, 975, 2, 0.9))  # queued, not begun
    (ack,) = of(h.receive(1.1, CancelHelp(0, 1, 3, ((0, 1), (0, 2)), 1.05)), CancelAck)
    assert ack.begun == ((0, 1),)
    assert not h.help_queue


def test_disabled_rr_sends_nothing():
    w = make(helpers=(1,), helpees=(1,), helper_group_size=0)
    w.start_iteration(0.0)
    out = w.advance(1.0, 1000)
    assert not [a for a in out if not isinstance(a, (Commit, IterationDone))]


def test_helpee_keeps_one_check_interval():
    w = make(helpers=(5, 6), helpees=())
    w.start_iteration(0.0)
    w.advance(4.0, 960)
    # 40 unassigned; keeps 10 (1000 / 100 checks), so at most 25 go
    (do,) = of(w.receive(4.0, ProgressReport(5, 0, 1, 4.0)), DoThis)
    assert do.end - do.start == 25
    (do2,) = of(w.receive(4.0, ProgressReport(6, 0, 1, 4.0)), DoThis)
    assert do2.end - do2.start == 5 and w.tail - w.cursor == 10


# ---- straggler profiles --------------------------------------------------------------------------
def test_nominal_profile():
    p = st.nominal(6.0)
    assert p.elapsed(3.0, 0.2, 0.5) == pytest.approx(3.0)
    assert p.work_in(3.0, 0.2, 3.0) == pytest.approx(0.5)


@pytest.mark.parametrize(
    "factory",
    [
        lambda r: st.slow_worker(r, 6.0, 2.0, probability=0.3),
        lambda r: st.power_law(r, 6.0, 4.0),
        lambda r: st.disrupted_machine(r, 6.0, 2.0, period_s=5.0, probability=0.5),
        lambda r: st.trace_driven(6.0, [1.0, 2.5, 0.7], offset=1),
    ],
)
def test_profiles_are_invertible_and_order_independent(factory):
    a, b = factory(np.random.default_rng(3)), factory(np.random.default_rng(3))
    b.elapsed(0.0, 0.0, 40.0)  # extend b far first: the realisation must not depend on it
    for t0, w0, work in [(0.0, 0.0, 1.0), (7.3, 1.2, 0.37), (30.0, 4.0, 2.5)]:
        dt = a.elapsed(t0, w0, work)
        assert dt >= 6.0 * work * 0.69  # nothing is faster than its fastest factor
        assert dt == pytest.approx(b.elapsed(t0, w0, work))
        assert a.work_in(t0, w0, dt) == pytest.approx(work)


def test_slow_worker_periods_slow_by_one_plus_delay():
    p = st.slow_worker(np.random.default_rng(0), 1.0, 3.0, probability=1.0)
    assert p.elapsed(0.0, 0.0, 1.0) == pytest.approx(4.0)  # slowed from the first delay point on
    q = st.slow_worker(np.random.default_rng(0), 1.0, 3.0, probability=0.0)
    assert q.elapsed(0.0, 0.0, 5.0) == pytest.approx(5.0)


def test_ideal_time_balances_work():
    fast, slow = st.nominal(1.0), st.trace_driven(1.0, [3.0])
    # rates 1 and 1/3 work per second: 4 units of work take 3 s
    assert st.ideal_time([fast, slow], 4.0) == pytest.approx(3.0, rel=1e-6)
