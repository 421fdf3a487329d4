"""RapidReassignment for one worker, as a transport-agnostic state machine ([Harlap], §3.3).

The executor (simulator or runtime) owns time and the processing of items. It tells the machine what
happened and asks what to process next:

* ``start_iteration(now)`` once the SSP gate lets the worker start its next iteration (§3.2.2);
* ``advance(now, items)`` after the current task processed ``items`` more items. Executors call it at
  every message check (§3.3.2), at the task's end and at ``items_until_stop()``;
* ``receive(now, msg)`` for each message found at a message check (or at once while the worker idles);
* ``task()``: the range to process now (``None``: idle; the executor polls messages and the gate).

Each call returns the actions to carry out: messages to send, commits, iteration completions. The
machine never reads a clock or touches a transport.

Decisions the paper leaves open, each marked [interp] below:

* progress counts the items given away: fraction = (own processed + reassigned) / own items;
* "more help needed" (for a follow-up) and the initial assignment: an assignment is cut down so that the
  helpee keeps at least one message-check interval of unassigned items (it must keep working and polling);
  nothing is sent when less than that would go;
* a do-this of the current iteration is deferred (Algorithm 2) only while the helper still has own work;
  once its own items are done it helps at once, before waiting for its own helpers;
* a helpee that cancels processes the cancelled ranges at once, speculatively, and commits them only
  when the helper's acknowledgement says it had not begun them (§3.3.3's fix of the race);
* a progress-report that arrives while the worker has no unassigned work (between its iterations) stays in
  its mailbox until its next iteration starts and is judged then, with the time term of Algorithm 1
  accounting for its age; only the latest report per helper is kept;
* help ranges are processed at the helper's own speed (a straggler's sleeps belong to its thread).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from enum import Enum

from clustertwin.policies.flexrr.config import RRConfig
from clustertwin.policies.flexrr.messages import (
    Action,
    AssignmentId,
    BegunHelping,
    CancelAck,
    CancelHelp,
    Commit,
    DoThis,
    HelpCompleted,
    IterationDone,
    Message,
    ProgressReport,
    Wasted,
)
from clustertwin.policies.flexrr.progress import estimate_iteration_s, progress_difference, update_average


class Phase(Enum):
    OWN = "own"  # processing its own unassigned items
    CLEANUP = "cleanup"  # own items done; cancelled ranges, deferred help, waiting for helpers
    GATED = "gated"  # iteration complete; waiting for the SSP gate
    FINISHED = "finished"  # all iterations complete (still helps others)


class OutState(Enum):
    SENT = "sent"
    BEGUN = "begun"
    DONE = "done"
    CANCELLED = "cancelled"  # cancel sent, acknowledgement pending
    RECLAIMED = "reclaimed"  # acknowledged: the helpee does it


@dataclass
class Outgoing:
    """An assignment this worker handed out (the helpee's view)."""

    aid: AssignmentId
    helper: int
    iteration: int
    start: int
    end: int
    state: OutState = OutState.SENT
    helper_done: bool = False  # help-completed seen (possibly before the cancel-ack)
    spec_done: bool = False  # processed speculatively by the helpee after a cancel
    committed: bool = False


@dataclass(frozen=True)
class Task:
    """What to process now: items [start, end) of ``owner``'s iteration ``iteration``."""

    kind: str  # "own", "help" or "spec" (a cancelled range, processed speculatively)
    owner: int
    iteration: int
    start: int
    end: int
    origin: int  # where the range began: the ``start`` of the Commit that will cover these items

    @property
    def items(self) -> int:
        return self.end - self.start


class RRWorker:
    """One worker's RapidReassignment state (Algorithms 1 and 2 plus the actions of §3.3.3)."""

    def __init__(
        self,
        worker: int,
        lo: int,
        hi: int,
        helpers: tuple[int, ...],
        helpees: tuple[int, ...],
        config: RRConfig,
        iterations: int,
    ) -> None:
        if hi <= lo:
            raise ValueError(f"worker {worker} needs a non-empty item range, got [{lo}, {hi})")
        self.worker = worker
        self.lo, self.hi = lo, hi
        self.n = hi - lo
        self.config = config
        enabled = config.enabled
        self.helpers = helpers if enabled else ()
        self.helpees = helpees if enabled else ()
        self.iterations = iterations
        self.iteration = 0
        self.phase = Phase.GATED
        self.cursor = lo  # next own item (own items are consumed from the front)
        self.tail = hi  # own unassigned work is [cursor, tail); assignments are carved from the end
        self.reported = False
        self.started_at = 0.0
        self.own_done_at = math.nan
        self.avg_iteration_s: float | None = None
        self.out: dict[AssignmentId, Outgoing] = {}
        self.deferred: list[DoThis] = []
        self.help_queue: deque[DoThis] = deque()
        self.active_help: DoThis | None = None
        self.active_start = 0  # next item of the active help
        self.spec_queue: deque[AssignmentId] = deque()
        self.spec_pos = 0  # next item of the speculative range at the head of spec_queue
        self.pending_reports: dict[int, ProgressReport] = {}
        self.last_cancel: dict[int, int] = {}
        self.begun_ids: set[AssignmentId] = set()
        self._stamp = 0
        self._initial = max(1, round(config.initial_fraction * self.n))
        self._follow_up = max(1, round(config.follow_up_fraction * self.n))
        self._keep = max(1, math.ceil(self.n / config.message_checks))
        self._replica_lo = self.lo + math.floor((1.0 - config.replication) * self.n)

    # ---- queries -------------------------------------------------------------------------------
    @property
    def check_every(self) -> int:
        """Items of processing between two message checks (Table 3.1: ``message_checks`` per iteration of
        this worker's own items); an executor checks the mailbox at every multiple of it."""
        return max(1, round(self.n / self.config.message_checks))

    def fraction_done(self) -> float:
        """Progress through the current iteration [interp: given-away items count as progress]."""
        if self.phase is not Phase.OWN:
            return 1.0
        return (self.cursor - self.lo + self.hi - self.tail) / self.n

    def unassigned(self) -> int:
        return self.tail - self.cursor if self.phase is Phase.OWN else 0

    def ready_for_iteration(self) -> bool:
        """Idle at an iteration boundary: the executor may start the next iteration once gated in."""
        return self.phase is Phase.GATED and self.task() is None

    def task(self) -> Task | None:
        """The range to process now. Help for an older iteration preempts own work (Algorithm 2,
        line 4-5); cancelled ranges come before deferred help since the iteration waits on them."""
        if self.active_help is not None:
            h = self.active_help
            return Task("help", h.src, h.iteration, self.active_start, h.end, h.start)
        if self.phase is Phase.OWN and self.cursor < self.tail:
            return Task("own", self.worker, self.iteration, self.cursor, self.tail, self.lo)
        if self.spec_queue:
            o = self.out[self.spec_queue[0]]
            return Task("spec", self.worker, self.iteration, self.spec_pos, o.end, o.start)
        return None

    def items_until_stop(self) -> int:
        """Items the current task may process before the machine needs control back (its end, or the
        progress checkpoint of §3.3.3); the executor also stops at message checks."""
        t = self.task()
        if t is None:
            return 0
        if t.kind == "own" and not self.reported and self.helpees:
            need = math.ceil(self.config.progress_checkpoint * self.n - 1e-9) - (
                self.cursor - self.lo + self.hi - self.tail
            )
            if need > 0:
                return min(t.items, need)
        return t.items

    # ---- events --------------------------------------------------------------------------------
    def start_iteration(self, now: float) -> list[Action]:
        """The SSP gate let this worker start its next iteration."""
        if self.phase is not Phase.GATED or self.task() is not None:
            raise RuntimeError(f"worker {self.worker} cannot start an iteration in phase {self.phase}")
        self.phase = Phase.OWN
        self.cursor, self.tail = self.lo, self.hi
        self.reported = False
        self.started_at = now
        self.own_done_at = math.nan
        self.out = {}
        actions: list[Action] = []
        pending, self.pending_reports = self.pending_reports, {}
        for msg in pending.values():
            actions.extend(self._on_report(now, msg))
        actions.extend(self._settle(now))
        return actions

    def advance(self, now: float, items: int) -> list[Action]:
        """The current task processed ``items`` more items (0 is allowed: a bare message check)."""
        actions: list[Action] = []
        if items < 0:
            raise ValueError(f"items must be >= 0, got {items}")
        t = self.task()
        if t is None:
            if items:
                raise RuntimeError(f"worker {self.worker} advanced {items} items with no task")
            return self._settle(now)
        if items > t.items:
            raise RuntimeError(f"worker {self.worker} advanced {items} items past its task {t}")
        if t.kind == "help":
            self.active_start += items
            if self.active_start == t.end:
                h = self.active_help
                assert h is not None
                self.active_help = None
                actions.append(Commit(h.src, h.iteration, h.start, h.end, self.worker, "help"))
                actions.append(HelpCompleted(self.worker, h.src, h.aid))
        elif t.kind == "own":
            self.cursor += items
            if (
                not self.reported
                and self.helpees
                and self.fraction_done() >= self.config.progress_checkpoint - 1e-12
            ):
                self.reported = True
                actions.extend(ProgressReport(self.worker, e, self.iteration, now) for e in self.helpees)
        else:  # spec
            self.spec_pos += items
            o = self.out[self.spec_queue[0]]
            if self.spec_pos == o.end:
                o.spec_done = True
                self._next_spec()
                actions.extend(self._commit_reclaimed(o))
        actions.extend(self._settle(now))
        return actions

    def receive(self, now: float, msg: Message) -> list[Action]:
        """Handle one message found at a message check."""
        actions: list[Action] = []
        if isinstance(msg, ProgressReport):
            actions.extend(self._on_report(now, msg))
        elif isinstance(msg, DoThis):
            self._on_do_this(msg)
        elif isinstance(msg, BegunHelping):
            actions.extend(self._on_begun(now, msg))
        elif isinstance(msg, HelpCompleted):
            o = self.out.get(msg.aid)
            if o is not None:
                o.helper_done = True
                if o.state is OutState.BEGUN:
                    o.state = OutState.DONE
        elif isinstance(msg, CancelHelp):
            actions.extend(self._on_cancel(msg))
        elif isinstance(msg, CancelAck):
            actions.extend(self._on_cancel_ack(msg))
        else:  # pragma: no cover - the union is closed
            raise TypeError(f"unknown message {msg!r}")
        actions.extend(self._settle(now))
        return actions

    # ---- message handlers ----------------------------------------------------------------------
    def _on_report(self, now: float, msg: ProgressReport) -> list[Action]:
        """Algorithm 1, then §3.3.3 "Reassigning Work": behind by more than the trigger -> an initial
        do-this to the report's sender, carved from the end of this iteration's items."""
        if msg.src not in self.helpers:
            return []
        if self.phase is not Phase.OWN:
            if self.phase is not Phase.FINISHED:
                self.pending_reports[msg.src] = msg
            return []
        avg = estimate_iteration_s(self.avg_iteration_s, now - self.started_at, self.fraction_done())
        diff = progress_difference(
            helper_iteration=msg.iteration,
            helper_fraction=self.config.progress_checkpoint,
            helper_timer=msg.sent_at,
            own_iteration=self.iteration,
            own_fraction=self.fraction_done(),
            now=now,
            avg_iteration_s=avg,
        )
        if diff <= self.config.trigger:
            return []  # "Ignore! (I don't need help)": no reply (Fig. 3.2)
        return self._carve(now, msg.src, self._initial)

    def _on_do_this(self, msg: DoThis) -> None:
        """Algorithm 2 (the helping decision)."""
        if msg.stamp <= self.last_cancel.get(msg.src, -1) or msg.iteration > self.iteration:
            return  # line 2-3: discard
        if msg.iteration < self.iteration or self.phase is not Phase.OWN:
            self.help_queue.append(msg)  # line 4-5: help now
        else:
            self.deferred.append(msg)  # line 7: save for the end of this iteration

    def _on_begun(self, now: float, msg: BegunHelping) -> list[Action]:
        """§3.3.3 "Assigning Additional Work": each begun-helping earns the helper a follow-up."""
        o = self.out.get(msg.aid)
        if o is None:
            return []
        if o.state is OutState.SENT:
            o.state = OutState.DONE if o.helper_done else OutState.BEGUN
            return self._carve(now, o.helper, self._follow_up)
        return []  # crossed our cancel: the cancel-ack is authoritative

    def _on_cancel(self, msg: CancelHelp) -> list[Action]:
        """§3.3.3 "Cancelling Work Reassignments", the helper's side: drop every not-yet-begun do-this
        stamped at or before the cancel, and acknowledge which of the cancelled ones were begun."""
        self.last_cancel[msg.src] = max(self.last_cancel.get(msg.src, -1), msg.stamp)

        def live(d: DoThis) -> bool:
            return not (d.src == msg.src and d.stamp <= msg.stamp)

        self.deferred = [d for d in self.deferred if live(d)]
        self.help_queue = deque(d for d in self.help_queue if live(d))
        begun = tuple(a for a in msg.aids if a in self.begun_ids)
        return [CancelAck(self.worker, msg.src, msg.aids, begun)]

    def _on_cancel_ack(self, msg: CancelAck) -> list[Action]:
        actions: list[Action] = []
        begun = set(msg.begun)
        for aid in msg.aids:
            o = self.out.get(aid)
            if o is None or o.state is not OutState.CANCELLED:
                continue
            if aid in begun:  # lost the race: the helper's copy counts, ours is thrown away
                o.state = OutState.DONE if o.helper_done else OutState.BEGUN
                if self.spec_queue and self.spec_queue[0] == aid:
                    done = self.spec_pos - o.start
                    if done:
                        actions.append(Wasted(self.worker, done))
                    self._next_spec()
                elif aid in self.spec_queue:
                    self.spec_queue.remove(aid)
                elif o.spec_done:
                    actions.append(Wasted(self.worker, o.end - o.start))
            else:
                o.state = OutState.RECLAIMED
                actions.extend(self._commit_reclaimed(o))
        return actions

    # ---- internals -----------------------------------------------------------------------------
    def _carve(self, now: float, helper: int, size: int) -> list[Action]:
        """Hand the last ``size`` unassigned items to ``helper`` (§3.3.3: "reassigns ranges of work
        starting from the end"), keeping at least one message-check interval for itself [interp], and
        only inside the tail the helpers cache (§3.4.5)."""
        if self.phase is not Phase.OWN:
            return []
        size = min(size, self.tail - self.cursor - self._keep)
        if size < 1:
            return []
        start = self.tail - size
        if start < self._replica_lo:
            return []
        self._stamp += 1
        msg = DoThis(self.worker, helper, self.iteration, start, self.tail, self._stamp, now)
        self.out[msg.aid] = Outgoing(msg.aid, helper, self.iteration, start, self.tail)
        self.tail = start
        return [msg]

    def _next_spec(self) -> None:
        self.spec_queue.popleft()
        if self.spec_queue:
            self.spec_pos = self.out[self.spec_queue[0]].start

    def _commit_reclaimed(self, o: Outgoing) -> list[Action]:
        if o.state is OutState.RECLAIMED and o.spec_done and not o.committed:
            o.committed = True
            return [Commit(self.worker, o.iteration, o.start, o.end, self.worker, "reclaimed")]
        return []

    def _settle(self, now: float) -> list[Action]:
        """Move through the phases until the machine has something to do or must wait."""
        actions: list[Action] = []
        while True:
            if (
                self.active_help is None
                and self.help_queue
                and not (self.phase is Phase.CLEANUP and self.spec_queue)
            ):
                h = self.help_queue.popleft()
                self.active_help = h
                self.active_start = h.start
                self.begun_ids.add(h.aid)
                actions.append(BegunHelping(self.worker, h.src, h.aid))
                continue
            if self.phase is Phase.OWN and self.cursor == self.tail and self.active_help is None:
                actions.extend(self._own_work_done(now))
                continue
            if self.phase is Phase.CLEANUP and self._iteration_complete():
                actions.append(
                    IterationDone(self.worker, self.iteration, self.started_at, self.own_done_at, now)
                )
                self.avg_iteration_s = update_average(
                    self.avg_iteration_s, now - self.started_at, self.config.avg_weight
                )
                self.iteration += 1
                self.phase = Phase.FINISHED if self.iteration >= self.iterations else Phase.GATED
                continue
            return actions

    def _own_work_done(self, now: float) -> list[Action]:
        """All unassigned own items are processed: cancel what no helper has begun and take it back
        (§3.3.3), and accept the deferred help (Algorithm 2 line 4: own work finished)."""
        actions: list[Action] = []
        self.phase = Phase.CLEANUP
        self.own_done_at = now
        if self.tail > self.cursor:  # pragma: no cover - guarded by the caller
            raise RuntimeError("own work is not done")
        actions.append(Commit(self.worker, self.iteration, self.lo, self.tail, self.worker, "own"))
        by_helper: dict[int, list[AssignmentId]] = {}
        for aid, o in self.out.items():
            if o.state is OutState.SENT:
                o.state = OutState.CANCELLED
                by_helper.setdefault(o.helper, []).append(aid)
                self.spec_queue.append(aid)
        if self.spec_queue:
            self.spec_pos = self.out[self.spec_queue[0]].start
        for helper, aids in by_helper.items():
            self._stamp += 1
            actions.append(CancelHelp(self.worker, helper, self._stamp, tuple(aids), now))
        self.help_queue.extend(self.deferred)
        self.deferred = []
        return actions

    def _iteration_complete(self) -> bool:
        if self.spec_queue:
            return False
        for o in self.out.values():
            if o.state is OutState.DONE:
                continue
            if o.state is OutState.RECLAIMED and o.committed:
                continue
            return False
        return True
