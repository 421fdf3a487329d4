"""Iteration- and message-level executor of data-parallel training with FlexRR ([Harlap], ch. 3).

A discrete-event loop over a heap. Between events every worker processes items at the rate its straggler
profile gives, in closed form; events are only: a worker reaching a point where its policy needs control
(a task's end, its progress checkpoint, or the first message check after a message arrived), a message
arriving, the SSP gate opening and, with a parameter server (``sim.flexrr.ps``), the PS's next flow
drain or arrival. Message checks happen every ``items / message_checks`` items of
processing (§3.3.2); a message that arrives while a worker is busy waits for the next one, and an idle
worker (at the gate, or waiting for its helpers) polls and sees it at once.

The SSP gate (§3.2.2) comes in two forms. Without a PS (``ps=None``, scenario ``ps.model_bytes: 0``)
iteration t opens ``ps_sync_s`` after every worker completed iteration t - slack - 1: update propagation
is a fixed delay. With a PS, a completed iteration is pushed to the shards and iteration t opens
``ps_sync_s`` after the worker's pull of every shard's slice as of t - slack - 1 has arrived, which the
shards serve only once they have applied that iteration; ``ps_sync_s`` is then the fixed per-read cost
the byte traffic does not cover (client bookkeeping, polling). The first form is kept verbatim, not
derived from the second, so that runs without a PS are bit-identical to before the PS existed.

We use our own heap rather than SimPy processes: one FlexRR run has ~10^5 events and a SimPy process
switch per message check would cost ~10x more, while nothing here needs SimPy's resources. Every
decision is taken by ``policies.flexrr.worker.RRWorker``; this module only moves time and messages.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from clustertwin.policies.flexrr.consistency import gating_iteration
from clustertwin.policies.flexrr.messages import Commit, IterationDone, Message, Wasted
from clustertwin.policies.flexrr.stragglers import SpeedProfile
from clustertwin.policies.flexrr.worker import RRWorker
from clustertwin.sim.flexrr.ps import PSLog, ShardedPS

_STOP, _ARRIVE, _GATE, _NET = 0, 1, 2, 3


@dataclass
class EngineConfig:
    slack: int
    iterations: int
    latency_s: float = 0.001  # one-way control-message latency
    latency_jitter_s: float = 0.0  # plus an exponential with this mean (reorders messages)
    # fixed delay from the needed updates being in (no PS: the slowest worker's completion; with a PS:
    # the worker's pull of every slice) to the gate opening
    ps_sync_s: float = 0.0
    record_messages: bool = True


@dataclass
class EngineLog:
    iterations: list[tuple] = field(default_factory=list)  # worker, it, start, own_done, done
    commits: list[tuple] = field(default_factory=list)  # owner, it, start, end, by, kind, time
    messages: list[tuple] = field(default_factory=list)  # kind, src, dst, sent, arrived, it, start, end
    wasted: list[tuple] = field(default_factory=list)  # worker, items, time
    gate_opens: list[tuple] = field(default_factory=list)  # worker, iteration, time, min_completed
    # worker, start, end, kind ("own" / "help" / "spec"), owner, iteration, items: every stretch of
    # processing, when ``record_messages`` is on (for timelines: a worker is idle outside these)
    busy: list[tuple] = field(default_factory=list)
    events: int = 0
    ps: PSLog | None = None  # the parameter server's log (None: no PS modelled)


class _Slot:
    """Executor-side state of one worker: its policy machine, profile and current busy segment."""

    __slots__ = (
        "machine",
        "profile",
        "nominal_items",
        "check_every",
        "odo",
        "seg_t0",
        "seg_w0",
        "target",
        "busy",
        "version",
        "mailbox",
    )

    def __init__(self, machine: RRWorker, profile: SpeedProfile, nominal_items: int) -> None:
        self.machine = machine
        self.profile = profile
        self.nominal_items = nominal_items
        self.check_every = machine.check_every
        self.odo = 0  # items processed by this worker so far (of any kind)
        self.seg_t0 = 0.0
        self.seg_w0 = 0
        self.target = 0
        self.busy = False
        self.version = 0
        self.mailbox: list[Message] = []


class Engine:
    def __init__(
        self,
        machines: Sequence[RRWorker],
        profiles: Sequence[SpeedProfile],
        nominal_items: int,
        config: EngineConfig,
        rng: np.random.Generator,
        progress: Callable[[float, str], None] | None = None,
        ps: ShardedPS | None = None,
    ) -> None:
        self.slots = [_Slot(m, p, nominal_items) for m, p in zip(machines, profiles, strict=True)]
        self.config = config
        self.rng = rng
        self.progress = progress
        self.heap: list[tuple[float, int, int, int, object]] = []
        self.seq = 0
        self.completed = [0] * len(self.slots)
        self.min_completed = 0
        # time at which every worker had completed k iterations
        self.min_time: list[float] = [0.0]
        self.log = EngineLog()
        self.ps = ps
        # the PS's next event is kept as one heap entry; a newer schedule supersedes it by version
        self.net_at = math.inf
        self.net_version = 0

    # ---- event plumbing ------------------------------------------------------------------------
    def _push(self, t: float, kind: int, worker: int, payload: object) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, worker, payload))

    def run(self) -> EngineLog:
        for w in range(len(self.slots)):
            self._push(0.0, _GATE, w, None)
        total = self.config.iterations * len(self.slots)
        reported = 0
        while self.heap:
            t, _, kind, w, payload = heapq.heappop(self.heap)
            self.log.events += 1
            slot = self.slots[w]
            if kind == _STOP:
                if payload != slot.version:
                    continue  # superseded by an earlier message check
                self._stop(w, t)
            elif kind == _ARRIVE:
                self._arrive(w, t, payload)  # type: ignore[arg-type]
            elif kind == _GATE:
                if not slot.busy:
                    self._reschedule(w, t)
            elif payload == self.net_version:
                self._net(t)
            if self.progress is not None:
                done = sum(self.completed)
                if done - reported >= max(1, total // 100):
                    reported = done
                    self.progress(done / total, f"{done}/{total} worker-iterations")
        unfinished = [w for w, c in enumerate(self.completed) if c < self.config.iterations]
        if unfinished:
            raise RuntimeError(f"simulation stalled: workers {unfinished[:8]} did not finish")
        return self.log

    # ---- worker transitions --------------------------------------------------------------------
    def _stop(self, w: int, t: float) -> None:
        slot = self.slots[w]
        items = slot.target - slot.seg_w0
        if self.config.record_messages:
            task = slot.machine.task()
            assert task is not None  # a busy segment always has a task
            self.log.busy.append((w, slot.seg_t0, t, task.kind, task.owner, task.iteration, items))
        slot.odo = slot.target
        slot.busy = False
        self._dispatch(w, t, slot.machine.advance(t, items))
        self._drain(w, t)
        self._reschedule(w, t)

    def _drain(self, w: int, t: float) -> None:
        slot = self.slots[w]
        while slot.mailbox:
            batch, slot.mailbox = slot.mailbox, []
            for msg in batch:
                self._dispatch(w, t, slot.machine.receive(t, msg))

    def _arrive(self, w: int, t: float, msg: Message) -> None:
        slot = self.slots[w]
        slot.mailbox.append(msg)
        if not slot.busy:
            self._drain(w, t)
            self._reschedule(w, t)
            return
        # the next message check after t: a multiple of check_every items of processing
        done = (
            slot.seg_w0
            + slot.profile.work_in(slot.seg_t0, slot.seg_w0 / slot.nominal_items, t - slot.seg_t0)
            * slot.nominal_items
        )
        boundary = (math.floor(done / slot.check_every + 1e-9) + 1) * slot.check_every
        boundary = max(boundary, slot.seg_w0 + 1)
        if boundary < slot.target:
            self._schedule_stop(w, boundary)

    def _schedule_stop(self, w: int, target: int) -> None:
        slot = self.slots[w]
        slot.target = target
        slot.version += 1
        dt = slot.profile.elapsed(
            slot.seg_t0, slot.seg_w0 / slot.nominal_items, (target - slot.seg_w0) / slot.nominal_items
        )
        self._push(slot.seg_t0 + dt, _STOP, w, slot.version)

    def _reschedule(self, w: int, t: float) -> None:
        """Start whatever the machine wants next, or idle (polling messages and the gate)."""
        slot = self.slots[w]
        m = slot.machine
        while True:
            if slot.mailbox:
                self._drain(w, t)
                continue
            task = m.task()
            if task is not None:
                slot.busy = True
                slot.seg_t0, slot.seg_w0 = t, slot.odo
                self._schedule_stop(w, slot.odo + m.items_until_stop())
                return
            slot.busy = False
            slot.version += 1
            if not m.ready_for_iteration():
                return
            need = gating_iteration(m.iteration, self.config.slack)
            if self.ps is None:
                if self.min_completed < need:
                    return  # woken by _dispatch when the slowest worker catches up
                opens = self.min_time[need] + self.config.ps_sync_s if need > 0 else 0.0
            elif need > 0:
                # SSP read rule (§3.2): the slices must include every update of iterations <= need - 1
                pulled = self.ps.pulled(w, need - 1)
                if pulled is None:
                    self.ps.request_pull(t, w, need - 1)
                    self._sync_net()
                    return  # woken by _net when the read completes
                opens = pulled + self.config.ps_sync_s
            else:
                opens = 0.0  # the first slack + 1 iterations read the initial model
            if opens > t:
                self._push(opens, _GATE, w, None)
                return
            self.log.gate_opens.append((w, m.iteration, t, self.min_completed))
            self._dispatch(w, t, m.start_iteration(t))

    def _dispatch(self, w: int, t: float, actions: list) -> None:
        cfg = self.config
        for a in actions:
            if isinstance(a, Commit):
                self.log.commits.append((a.owner, a.iteration, a.start, a.end, a.by, a.kind, t))
            elif isinstance(a, IterationDone):
                self.log.iterations.append((a.worker, a.iteration, a.started_at, a.own_done_at, a.done_at))
                self.completed[w] += 1
                new_min = min(self.completed)
                while self.min_completed < new_min:
                    self.min_completed += 1
                    self.min_time.append(t)
                    if self.ps is not None:
                        continue  # with a PS the gate waits for reads, not for this count
                    for v, slot in enumerate(self.slots):
                        if not slot.busy and slot.machine.ready_for_iteration():
                            self._push(t + cfg.ps_sync_s, _GATE, v, None)
                if self.ps is not None:
                    # the iteration's update (own items and every reassigned range) goes to the shards
                    self.ps.push(t, a.worker, a.iteration)
                    self._sync_net()
            elif isinstance(a, Wasted):
                self.log.wasted.append((a.worker, a.items, t))
            else:  # a message
                delay = cfg.latency_s
                if cfg.latency_jitter_s > 0:
                    delay += float(self.rng.exponential(cfg.latency_jitter_s))
                self._push(t + delay, _ARRIVE, a.dst, a)
                if cfg.record_messages:
                    self.log.messages.append(
                        (
                            type(a).__name__,
                            a.src,
                            a.dst,
                            t,
                            t + delay,
                            getattr(a, "iteration", -1),
                            getattr(a, "start", -1),
                            getattr(a, "end", -1),
                        )
                    )

    # ---- parameter server ----------------------------------------------------------------------
    def _sync_net(self) -> None:
        """(Re)schedule the PS's next event after anything changed its flows or arrivals."""
        assert self.ps is not None
        tn = self.ps.next_time()
        if tn != self.net_at:
            self.net_at = tn
            self.net_version += 1
            if tn < math.inf:
                self._push(tn, _NET, 0, self.net_version)

    def _net(self, t: float) -> None:
        """The PS's next event is due: carry it out and wake the workers whose read completed."""
        assert self.ps is not None
        self.net_at = math.inf
        for w, _, done in self.ps.advance(t):
            # _reschedule re-checks the gate (a busy worker re-checks when its task ends)
            self._push(done + self.config.ps_sync_s, _GATE, w, None)
        self._sync_net()
