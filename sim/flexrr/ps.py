"""A sharded parameter server with BSP/SSP semantics, and the NIC traffic it causes ([Harlap], §3.2).

The paper's PS is LazyTable/IterStore-like: sharded over the same processes as the workers,
with a client-side cache whose updates are "sent asynchronously to shards once per iteration", and an
SSP read rule: a read at local iteration t is served only by values that include every worker's
updates of iterations <= t - slack - 1. This module models that data plane at message level:

* **Shards.** ``S`` shards (default: one per machine), shard ``j`` on machine ``j mod M``, each owning a
  contiguous 1/S slice of the ``model_bytes`` model (the byte split is ``B*(j+1)//S - B*j//S``).
* **Push.** When a worker completes iteration t (own items and every reassigned range committed) it pushes
  its update's slice to every shard. Slices bound for a shard on the worker's own machine are an
  in-process write: they cost nothing [interp: §3.2 runs the shards in the worker processes]. Any other
  slice is a flow that leaves through the worker machine's NIC and enters through the shard machine's.
* **Applied.** Shard j has *applied* iteration t once it holds every worker's update of iterations <= t.
* **Pull.** A worker that is ready for iteration t (and t > slack) asks each shard for its slice as of
  t - slack - 1; shard j answers once it has applied t - slack - 1 (its slice leaves through the shard
  machine's NIC and enters the worker's). The worker's read is done when every slice has arrived; the
  engine then opens the SSP gate (after the scenario's fixed ``ps_sync_s``).

**The NIC model: fluid flows, max-min fair (processor sharing over two NICs).** Every machine has one
full-duplex NIC of ``nic_bytes_per_s`` per direction. A flow crosses exactly two resources, the sender's
egress and the receiver's ingress, and flows share them max-min fairly (``sim/flows.py``: rates are
recomputed when a flow starts or ends, never per packet). With one
resource per flow this is exactly processor sharing; with two it is its standard generalisation, and it
is work-conserving, so pushes into one shard contend for that shard's ingress and the result does not
depend on the order in which simultaneous pushes were issued (a FIFO per NIC would need a rule for which
of a flow's two queues serves it when, and would make simultaneous pushes order-dependent). A flow's
data arrives ``latency_s`` after its last byte has drained (propagation after serialisation), so an
uncontended remote transfer of b bytes takes ``latency_s + b / nic_bytes_per_s``.

Flows between the same pair of machines always get the same rate, so the network keeps one *path group*
per (sender, receiver) machine pair with a virtual-time clock (the bytes one flow of the group has been
served so far) and a heap of its flows' finishing virtual times: an event costs O(active groups), not
O(flows), and equal flows started together finish at exactly the same instant.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from clustertwin.sim.flows import max_min_rates

# what a drained flow or an arrival is about: (kind, worker, shard, iteration); kind "push" or "pull"
Tag = tuple[str, int, int, int]


@dataclass(frozen=True)
class PSConfig:
    """The parameter server's size and the network it runs on (scenario section ``ps``)."""

    model_bytes: int
    shards: int
    nic_bytes_per_s: float  # per NIC and direction (full duplex)
    latency_s: float  # one-way propagation after a flow's last byte


class FlowNetwork:
    """Fluid flows between machines' full-duplex NICs, shared max-min fairly (see module docstring).

    Group ``g = src * machines + dst`` holds the flows from machine ``src`` to machine ``dst``. Rates are
    recomputed lazily: adding or removing flows only marks them stale, so the S flows of one push (or
    the slices several workers start pulling at one instant) cost one recomputation.
    """

    def __init__(self, machines: int, nic_bytes_per_s: float) -> None:
        self.machines = machines
        self.capacity = nic_bytes_per_s
        self.now = 0.0
        n = machines * machines
        # group g crosses link src (the sender's egress) and link machines + dst (the receiver's ingress)
        self._paths = np.column_stack(
            [np.repeat(np.arange(machines), machines), machines + np.tile(np.arange(machines), machines)]
        )
        self._capacity = np.full(2 * machines, float(nic_bytes_per_s))
        self._served = np.zeros(n)  # virtual time: bytes served to each flow of the group so far
        self._rate = np.zeros(n)  # per-flow rate of each group (0 where it has no flows)
        self._head = np.full(n, math.inf)  # the group's earliest finishing virtual time
        self._count = np.zeros(n, dtype=np.int64)
        self._heap: list[list[tuple[float, int, Tag]]] = [[] for _ in range(n)]
        self._seq = 0
        self._stale = False  # the flow set changed since the rates were computed
        self._next: float | None = None  # cached next_drain
        self.bytes_sent = 0  # total bytes that crossed NICs (each flow counted once)

    def _rates(self) -> None:
        """Recompute the rates if the flow set changed (they hold from ``self.now`` on)."""
        if not self._stale:
            return
        self._stale = False
        active = np.flatnonzero(self._count)
        self._rate[:] = 0.0
        if len(active):
            self._rate[active] = max_min_rates(
                self._paths[active], self._capacity, self._count[active], order="bottleneck"
            )

    def _settle(self, t: float) -> None:
        """Serve every group from ``self.now`` to ``t`` at its current rate."""
        if t < self.now:
            raise RuntimeError(f"network time went back from {self.now} to {t}")
        if t > self.now:
            self._rates()
            self._served += self._rate * (t - self.now)
            self.now = t
            self._next = None

    def add(self, t: float, src: int, dst: int, size: float, tag: Tag) -> None:
        """Start a flow of ``size`` > 0 bytes from machine ``src`` to machine ``dst`` != ``src`` at ``t``."""
        if src == dst or size <= 0:
            raise ValueError(f"a network flow needs two machines and bytes, got {src}->{dst}, {size}")
        self._settle(t)
        g = src * self.machines + dst
        self._seq += 1
        h = self._heap[g]
        heapq.heappush(h, (float(self._served[g]) + size, self._seq, tag))
        self._head[g] = h[0][0]
        self._count[g] += 1
        self.bytes_sent += int(size)
        self._stale, self._next = True, None

    def _time_left(self) -> np.ndarray:
        """Per group: time until its earliest flow drains at the current rates (inf: no flows)."""
        self._rates()
        with np.errstate(invalid="ignore", divide="ignore"):
            left = (self._head - self._served) / self._rate
        left[self._count == 0] = math.inf
        return left

    def next_drain(self) -> float:
        """When the next flow's last byte leaves (inf: no flows)."""
        if self._next is None:
            self._next = self.now + float(self._time_left().min()) if self._count.any() else math.inf
        return self._next

    def pop_drained(self, t: float) -> list[Tag]:
        """Advance to ``t`` and remove (returning their tags) the flows that have drained by then."""
        due = self.next_drain()
        self._settle(t)
        left = self._time_left()
        # drained up to rounding: less time left than 1e-12 of the clock's magnitude
        eps = 1e-12 * max(1.0, t)
        groups = np.flatnonzero(left <= eps)
        forced = not len(groups) and due <= t
        if forced:  # the flow that defined ``due`` has drained, whatever the rounding says
            groups = np.array([int(np.argmin(left))])
        out: list[Tag] = []
        for g in groups.tolist():
            h = self._heap[g]
            r = self._rate[g]
            while h and (h[0][0] - self._served[g]) / r <= eps:
                out.append(heapq.heappop(h)[2])
            if forced and not out:
                out.append(heapq.heappop(h)[2])
            self._count[g] = len(h)
            self._head[g] = h[0][0] if h else math.inf
        if out:
            self._stale, self._next = True, None
        return out


@dataclass
class PSLog:
    """What the PS did: when each shard applied each iteration, and every worker's pulls."""

    applied: list[tuple[int, int, float]] = field(default_factory=list)  # shard, iteration, time
    pulls: list[tuple[int, int, float, float]] = field(default_factory=list)  # worker, it, asked, done
    pushes: list[tuple[int, int, float, float]] = field(default_factory=list)  # worker, it, start, landed


class ShardedPS:
    """The shards' state and their traffic; the engine calls ``push``, ``request_pull`` and ``advance``.

    Times only move forward: every call's ``t`` must be >= the previous call's (the engine's clock).
    """

    def __init__(self, config: PSConfig, worker_machine: Sequence[int], machines: int) -> None:
        if config.shards < 1 or config.model_bytes < 0:
            raise ValueError(f"bad PS config {config}")
        self.config = config
        self.workers = len(worker_machine)
        self.worker_machine = list(worker_machine)
        s, b = config.shards, config.model_bytes
        self.shard_machine = [j % machines for j in range(s)]
        self.slice_bytes = [b * (j + 1) // s - b * j // s for j in range(s)]
        self.net = FlowNetwork(machines, config.nic_bytes_per_s)
        self._arrivals: list[tuple[float, int, Tag]] = []
        self._seq = 0
        self._received: list[dict[int, int]] = [{} for _ in range(s)]  # iteration -> updates in
        self.applied = [-1] * s  # highest iteration each shard has applied (cumulatively)
        self._waiting: list[list[tuple[int, int]]] = [[] for _ in range(s)]  # heap of (iteration, worker)
        self._pull_left: dict[tuple[int, int], int] = {}  # (worker, iteration) -> slices not yet in
        self._pull_asked: dict[tuple[int, int], float] = {}
        self._pulled: dict[tuple[int, int], float] = {}
        self._push_left: dict[tuple[int, int], tuple[float, int]] = {}  # (worker, it) -> (start, left)
        self.log = PSLog()

    # ---- engine interface ----------------------------------------------------------------------
    def push(self, t: float, worker: int, iteration: int) -> None:
        """Worker ``worker`` committed iteration ``iteration`` at ``t``: send a slice to every shard."""
        self._push_left[(worker, iteration)] = (t, self.config.shards)
        for j in range(self.config.shards):
            self._send(
                t, self.worker_machine[worker], self.shard_machine[j], j, ("push", worker, j, iteration)
            )

    def request_pull(self, t: float, worker: int, iteration: int) -> None:
        """Worker ``worker`` needs every shard's slice as of ``iteration`` (idempotent)."""
        key = (worker, iteration)
        if key in self._pull_asked or key in self._pulled:
            return
        self._pull_asked[key] = t
        self._pull_left[key] = self.config.shards
        for j in range(self.config.shards):
            if self.applied[j] >= iteration:
                self._start_pull(t, j, worker, iteration)
            else:
                heapq.heappush(self._waiting[j], (iteration, worker))

    def pulled(self, worker: int, iteration: int) -> float | None:
        """When ``worker``'s read of every slice as of ``iteration`` completed (None: not yet)."""
        return self._pulled.get((worker, iteration))

    def next_time(self) -> float:
        """The next moment the PS has something to do (inf: nothing in flight)."""
        first = self._arrivals[0][0] if self._arrivals else math.inf
        return min(first, self.net.next_drain())

    def advance(self, t: float) -> list[tuple[int, int, float]]:
        """Carry out everything due by ``t``; return the reads completed: (worker, iteration, time)."""
        done: list[tuple[int, int, float]] = []
        while True:
            drain = self.net.next_drain()
            first = self._arrivals[0][0] if self._arrivals else math.inf
            now = min(drain, first)
            if now > t:
                return done
            if drain <= first:  # drains first: a zero-latency arrival it causes comes after it
                for tag in self.net.pop_drained(drain):
                    self._arrive_at(drain + self.config.latency_s, tag)
                continue
            _, _, tag = heapq.heappop(self._arrivals)
            self._on_arrival(now, tag, done)

    # ---- internals -----------------------------------------------------------------------------
    def _arrive_at(self, t: float, tag: Tag) -> None:
        self._seq += 1
        heapq.heappush(self._arrivals, (t, self._seq, tag))

    def _send(self, t: float, src: int, dst: int, shard: int, tag: Tag) -> None:
        size = self.slice_bytes[shard]
        if src == dst:
            self._arrive_at(t, tag)  # in-process: the shard lives in the worker's process (§3.2)
        elif size == 0:
            self._arrive_at(t + self.config.latency_s, tag)  # an empty slice still travels
        else:
            self.net.add(t, src, dst, size, tag)

    def _start_pull(self, t: float, shard: int, worker: int, iteration: int) -> None:
        self._send(
            t,
            self.shard_machine[shard],
            self.worker_machine[worker],
            shard,
            ("pull", worker, shard, iteration),
        )

    def _on_arrival(self, t: float, tag: Tag, done: list[tuple[int, int, float]]) -> None:
        kind, worker, shard, iteration = tag
        if kind == "push":
            start, left = self._push_left[(worker, iteration)]
            if left == 1:
                del self._push_left[(worker, iteration)]
                self.log.pushes.append((worker, iteration, start, t))
            else:
                self._push_left[(worker, iteration)] = (start, left - 1)
            got = self._received[shard]
            got[iteration] = got.get(iteration, 0) + 1
            # applied is cumulative (all updates of iterations <= t); per (worker, shard) pushes are
            # equal-sized flows on one path, so they arrive in order anyway
            while got.get(self.applied[shard] + 1, 0) == self.workers:
                del got[self.applied[shard] + 1]
                self.applied[shard] += 1
                self.log.applied.append((shard, self.applied[shard], t))
            waiting = self._waiting[shard]
            while waiting and waiting[0][0] <= self.applied[shard]:
                it, w = heapq.heappop(waiting)
                self._start_pull(t, shard, w, it)
            return
        key = (worker, iteration)
        self._pull_left[key] -= 1
        if self._pull_left[key] == 0:
            del self._pull_left[key]
            self._pulled[key] = t
            self.log.pulls.append((worker, iteration, self._pull_asked.pop(key), t))
            done.append((worker, iteration, t))
