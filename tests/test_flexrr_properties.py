"""Property tests of RapidReassignment under arbitrary speeds, latencies and message orders.

An adversarial driver runs a few RRWorker machines directly: at every step hypothesis picks which worker
processes how many items, or which in-flight message is delivered next (any order, any delay). Then a
fair scheduler drains the system. Whatever the schedule: every item is committed exactly once per
iteration, the slack bound holds, no range is reassigned twice, and nobody is left waiting forever.
"""

from __future__ import annotations

from collections import defaultdict

from clustertwin.policies.flexrr.config import RRConfig
from clustertwin.policies.flexrr.consistency import may_start
from clustertwin.policies.flexrr.groups import helpee_groups, helper_groups
from clustertwin.policies.flexrr.messages import Commit, DoThis, IterationDone, Wasted
from clustertwin.policies.flexrr.worker import RRWorker
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st


class Driver:
    def __init__(
        self, workers: int, machines: int, items: list[int], slack: int, iterations: int, cfg: RRConfig
    ):
        helpers = helper_groups(workers, machines, cfg.helper_group_size)
        helpees = helpee_groups(helpers)
        bounds = [0]
        for n in items:
            bounds.append(bounds[-1] + n)
        self.bounds = bounds
        self.m = [
            RRWorker(w, bounds[w], bounds[w + 1], helpers[w], helpees[w], cfg, iterations)
            for w in range(workers)
        ]
        self.slack = slack
        self.iterations = iterations
        self.now = 0.0
        self.inflight: list = []
        self.completed = [0] * workers
        self.commits: list[Commit] = []
        self.do_this: list[DoThis] = []
        self.starts: list[tuple[int, int, int]] = []  # worker, iteration, min_completed at start

    def dispatch(self, actions):
        for a in actions:
            if isinstance(a, Commit):
                self.commits.append(a)
            elif isinstance(a, IterationDone):
                self.completed[a.worker] += 1
                assert self.completed[a.worker] == a.iteration + 1
            elif isinstance(a, Wasted):
                pass
            else:
                if isinstance(a, DoThis):
                    self.do_this.append(a)
                self.inflight.append(a)

    def tick(self):
        self.now += 0.01

    def try_start(self, w: int) -> bool:
        m = self.m[w]
        if m.ready_for_iteration() and may_start(m.iteration, min(self.completed), self.slack):
            self.starts.append((w, m.iteration, min(self.completed)))
            self.dispatch(m.start_iteration(self.now))
            return True
        return False

    def process(self, w: int, items: int) -> bool:
        t = self.m[w].task()
        if t is None:
            return False
        self.dispatch(self.m[w].advance(self.now, min(items, t.items)))
        return True

    def deliver(self, index: int) -> None:
        msg = self.inflight.pop(index)
        self.dispatch(self.m[msg.dst].receive(self.now, msg))

    def drain(self, limit: int = 200_000) -> None:
        """Fair: deliver everything, process every task a bit, start whoever may start."""
        for _ in range(limit):
            self.tick()
            progressed = False
            while self.inflight:
                self.deliver(0)
                progressed = True
            for w in range(len(self.m)):
                progressed |= self.process(w, 3)
                progressed |= self.try_start(w)
            if not progressed and not self.inflight:
                return
        raise AssertionError("drain did not terminate")


@st.composite
def systems(draw):
    machines = draw(st.integers(1, 3))
    per_machine = draw(st.integers(1, 3))
    workers = machines * per_machine
    if workers < 2:
        per_machine, workers = 2, machines * 2
    items = [draw(st.integers(12, 60)) for _ in range(workers)]
    cfg = RRConfig(
        helper_group_size=draw(st.integers(1, 4)),
        initial_fraction=draw(st.sampled_from([0.025, 0.1, 0.3])),
        follow_up_fraction=draw(st.sampled_from([0.05, 0.2, 0.5])),
        trigger=draw(st.sampled_from([0.0, 0.1, 0.2])),
        message_checks=draw(st.sampled_from([4, 10])),
        replication=draw(st.sampled_from([0.25, 1.0])),
    )
    slack = draw(st.integers(0, 2))
    iterations = draw(st.integers(1, 3))
    return Driver(workers, machines, items, slack, iterations, cfg)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(system=systems(), data=st.data())
def test_exactly_once_slack_and_no_double_reassignment(system, data):
    d = system
    steps = data.draw(st.integers(0, 250))
    for _ in range(steps):
        d.tick()
        choice = data.draw(st.integers(0, 2))
        if choice == 0 and d.inflight:
            d.deliver(data.draw(st.integers(0, len(d.inflight) - 1)))  # any message, any order
        elif choice == 1:
            d.process(data.draw(st.integers(0, len(d.m) - 1)), data.draw(st.integers(1, 20)))
        else:
            d.try_start(data.draw(st.integers(0, len(d.m) - 1)))
    d.drain()
    event(f"do-this sent: {'yes' if d.do_this else 'no'}")
    event(f"reclaimed after cancel: {'yes' if any(c.kind == 'reclaimed' for c in d.commits) else 'no'}")

    # everyone finished (nobody waits forever for a help-completed or cancel-ack)
    assert d.completed == [d.iterations] * len(d.m)

    # exactly once: per (owner, iteration), commits tile the owner's range without overlap
    by_owner = defaultdict(list)
    for c in d.commits:
        by_owner[(c.owner, c.iteration)].append((c.start, c.end))
    for w in range(len(d.m)):
        for it in range(d.iterations):
            ranges = sorted(by_owner[(w, it)])
            covered = d.bounds[w]
            for start, end in ranges:
                assert start == covered, f"gap or overlap in worker {w} iteration {it}: {ranges}"
                covered = end
            assert covered == d.bounds[w + 1]

    # slack bound: iteration t started only when every worker had completed >= t - slack iterations
    for _, iteration, min_completed in d.starts:
        assert min_completed >= iteration - d.slack

    # no re-reassignment: a do-this only hands out the sender's own items, and no item twice per iteration
    seen = defaultdict(set)
    for msg in d.do_this:
        assert d.bounds[msg.src] <= msg.start < msg.end <= d.bounds[msg.src + 1]
        items = set(range(msg.start, msg.end))
        assert not (seen[(msg.src, msg.iteration)] & items)
        seen[(msg.src, msg.iteration)] |= items
