"""Block-level executor of a synchronous parameter-server job ([PSLD]).

One event loop over a heap plus a flow network. Each worker has one connection to each PS per direction
(push: worker -> PS, pull: PS -> worker) and a PS-to-PS connection carries vanilla-mode migrations; a
connection sends its queued block messages one after another, and the active connections share NIC
capacity max-min fairly (``sim.flows``), recomputed only when a connection becomes busy or idle.

An iteration of worker w: forward, then backward layer by layer (last layer first); the blocks of a
layer's tensors are pushed as soon as its gradients exist. A PS processes pushes first-come first-served
on its CPU (per-message overhead plus summing at ``cores`` x a per-core rate; vanilla PSs also run the
optimizer once per block). When all W pushes of a block are summed, the PS queues the block's pull to
every worker. A worker starts its next forward when it has pulled every block.

Timing samples for the scheduler: per (worker, block), the push's transfer time + the PS's service time
for the block (its CPU time for all W pushes of the block, plus the vanilla update) + the pull's
transfer time (queueing behind other blocks on the same connection and waiting
for the other workers' pushes are left out; this is what an RPC's send-to-ACK timer sees).

Every placement decision comes from ``policies.psld`` through the ``controller``; this module only
moves bytes and time.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from clustertwin.policies.psld.migration import migrations, reassignment_step
from clustertwin.policies.psld.profiling import Sample
from clustertwin.policies.psld.scheduler import Decision, PSLDScheduler
from clustertwin.scenarios.psld_setup import Change
from clustertwin.sim.flows import max_min_rates

GBPS = 1e9 / 8  # bytes per second in one Gbit/s
_GRAD, _AGG, _DONE, _CHANGE, _REMOVE, _RESUME = range(6)
_PUSH, _PULL, _MIGRATE = range(3)


@dataclass(frozen=True)
class EngineConfig:
    workers: int
    servers: int  # active at the start
    standby: int  # pre-launched PSs that scale-out may activate
    mode: str  # byteps | vanilla
    worker_gbps: float
    server_gbps: float
    colocate: bool  # PS r shares worker (r mod W)'s NIC
    message_latency_s: float
    message_cpu_s: float
    server_cores: float
    sum_bytes_per_core_s: float
    update_bytes_per_core_s: float
    state_factor: float  # vanilla: bytes moved per parameter byte (parameters + optimizer state)
    batch_size: int
    duration_s: float
    report_every: int
    control_rtt_s: float
    reassign_fixed_s: float
    algo_s_per_block_server: float
    timing_noise: float = 0.0  # sigma of a lognormal factor on every timing sample


@dataclass
class Log:
    iterations: list[tuple] = field(default_factory=list)
    reassignments: list[tuple] = field(default_factory=list)
    loads: list[tuple] = field(default_factory=list)
    reports: list[tuple] = field(default_factory=list)
    changes: list[tuple] = field(default_factory=list)
    events: int = 0


class Engine:
    """Runs one job; ``run()`` returns the ``Log``."""

    def __init__(
        self,
        config: EngineConfig,
        sizes: Sequence[int],
        block_layer: Sequence[int],
        forward_s: float,
        layer_ready_s: dict[int, float],
        owners: Sequence[int],
        controller: PSLDScheduler | None,
        changes: Sequence[Change],
        removals: Sequence[tuple[float, int]],
        rng: np.random.Generator,
        noise_rng: np.random.Generator,
        progress: Callable[[float, str], None] | None = None,
    ) -> None:
        self.c = config
        self.sizes = np.asarray(sizes, dtype=float)
        self.n_blocks = len(sizes)
        self.owners = list(owners)
        self.controller = controller
        self.rng = rng
        self.noise_rng = noise_rng
        self.progress = progress
        self.forward_s = forward_s
        self.log = Log()
        w_count, s_total = config.workers, config.servers + config.standby
        self.s_total = s_total
        # blocks grouped by the layer whose gradients produce them, in backward order
        by_layer: dict[int, list[int]] = {}
        for b, layer in enumerate(block_layer):
            by_layer.setdefault(layer, []).append(b)
        self.grad_groups = sorted(
            ((layer_ready_s[layer], blocks) for layer, blocks in by_layer.items()), key=lambda x: x[0]
        )
        # nodes and links
        n_nodes = w_count + (0 if config.colocate else s_total)
        self.capacity = np.empty(2 * n_nodes)
        self.capacity[: 2 * w_count] = config.worker_gbps * GBPS
        if not config.colocate:
            self.capacity[2 * w_count :] = config.server_gbps * GBPS
        self.server_node = [r % w_count if config.colocate else w_count + r for r in range(s_total)]
        # connections: push (w, r), pull (r, w), migrate (r, r2)
        n_conn = 2 * w_count * s_total + s_total * s_total
        self.paths = np.empty((n_conn, 2), dtype=np.int64)
        for w in range(w_count):
            for r in range(s_total):
                self.paths[self._push(w, r)] = (2 * w, 2 * self.server_node[r] + 1)
                self.paths[self._pull(r, w)] = (2 * self.server_node[r], 2 * w + 1)
        for r in range(s_total):
            for r2 in range(s_total):
                self.paths[self._mig(r, r2)] = (2 * self.server_node[r], 2 * self.server_node[r2] + 1)
        self.queue: list[deque] = [deque() for _ in range(n_conn)]
        self.head_bytes = np.zeros(n_conn)  # head message size of a connection that just became busy
        self.finish = np.full(n_conn, np.inf)  # when the head message is through, at the current rate
        self.rate = np.zeros(n_conn)
        self.active = np.zeros(n_conn, dtype=bool)
        self.head_start = [0.0] * n_conn
        self.dirty = False
        # servers
        self.cores = [float(config.server_cores)] * s_total
        self.cpu_free = [0.0] * s_total
        self.agg_count = [0] * self.n_blocks
        self.agg_service = [0.0] * self.n_blocks
        self.agg_cpu = [0.0] * self.n_blocks  # CPU seconds spent so far on the block's pushes
        self.push_tx = [[0.0] * self.n_blocks for _ in range(w_count)]
        self.block_bytes = [float(x) for x in sizes]
        # workers
        self.iteration = [0] * w_count
        self.pulled = [0] * w_count
        self.last_arrival = [0.0] * w_count
        self.start = [0.0] * w_count
        self.done_count: dict[int, int] = {}
        self.iter_start: dict[int, float] = {}
        self.stopped = [False] * w_count
        self.samples: list[Sample] = []
        self.map_version = 0
        self.pending: tuple[int, Decision] | None = None
        self.blocked: list[int] = []
        self.migrating = 0
        self.resume_at = 0.0
        self.barrier_at = 0.0
        self.deferred: list[int] = []
        self.report = 0
        self.now = 0.0
        self.heap: list[tuple] = []
        self.seq = 0
        for ch in changes:
            self._at(ch.time_s, _CHANGE, ch)
        for t, server in removals:
            self._at(t, _REMOVE, server)
        self._log_loads()

    # -- indices ---------------------------------------------------------------------------------
    def _push(self, w: int, r: int) -> int:
        return w * self.s_total + r

    def _pull(self, r: int, w: int) -> int:
        return self.c.workers * self.s_total + r * self.c.workers + w

    def _mig(self, r: int, r2: int) -> int:
        return 2 * self.c.workers * self.s_total + r * self.s_total + r2

    # -- plumbing --------------------------------------------------------------------------------
    def _at(self, t: float, kind: int, payload: object) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, payload))

    def _send(self, conn: int, message: tuple) -> None:
        """Queue a message (kind, block, iteration, worker/server, nbytes) on a connection."""
        q = self.queue[conn]
        q.append(message)
        if len(q) == 1:
            self.head_bytes[conn] = message[4]
            self.head_start[conn] = self.now
            self.active[conn] = True
            self.dirty = True

    # -- main loop -------------------------------------------------------------------------------
    def run(self) -> Log:
        for w in range(self.c.workers):
            self._start_iteration(w, 0)
        next_progress = 0.0
        finish, rate = self.finish, self.rate
        while True:
            if self.dirty:
                idx = np.flatnonzero(self.active)
                if len(idx):
                    f = finish[idx]
                    fin = np.isfinite(f)
                    left = self.head_bytes[idx].copy()
                    left[fin] = (f[fin] - self.now) * rate[idx][fin]
                    new_rate = max_min_rates(self.paths[idx], self.capacity, order="level")
                    rate[idx] = new_rate
                    finish[idx] = self.now + np.maximum(left, 0.0) / new_rate
                self.dirty = False
            j = int(np.argmin(finish))
            t_net = float(finish[j])
            t_heap = self.heap[0][0] if self.heap else np.inf
            if t_net == np.inf and t_heap == np.inf:
                break
            self.log.events += 1
            t = min(t_net, t_heap)
            self.now = t
            if t_net <= t:
                done = np.flatnonzero(finish <= t + 1e-12 * max(1.0, t))
                for conn in done.tolist():
                    self._complete(conn)
            heap = self.heap
            while heap and heap[0][0] <= t:
                _, _, kind, payload = heapq.heappop(heap)
                self._handle(kind, payload)
            if self.progress is not None and self.now >= next_progress:
                self.progress(min(1.0, self.now / self.c.duration_s), f"t={self.now:.0f}s")
                next_progress = self.now + self.c.duration_s / 50
        return self.log

    def _complete(self, conn: int) -> None:
        q = self.queue[conn]
        kind, block, k, who, nbytes = q.popleft()
        tx = self.now - self.head_start[conn] + self.c.message_latency_s
        arrival = self.now + self.c.message_latency_s
        if q:
            self.head_start[conn] = self.now
            self.finish[conn] = self.now + q[0][4] / float(self.rate[conn])
        else:
            self.finish[conn] = np.inf
            self.rate[conn] = 0.0
            self.active[conn] = False
            self.dirty = True
        if kind == _PUSH:
            w, r = who
            self.push_tx[w][block] = tx
            cost = self.c.message_cpu_s + nbytes / (self.c.sum_bytes_per_core_s * self.cores[r])
            start = max(arrival, self.cpu_free[r])
            self.cpu_free[r] = start + cost
            self.agg_count[block] += 1
            # the block's service is the PS's CPU time for all W pushes of it, not the last push's alone
            # (paper §4.1: beta covers the PS's update time; a CPU straggler delays "aggregating
            # gradients from workers", §6.1). This is the CPU analogue of the push's transfer time,
            # which already shares the PS's ingress among the W pushes (incast), and it is what the
            # real runtime's sample holds (pull completion waits for all W pushes to be summed).
            self.agg_cpu[block] += cost
            if self.agg_count[block] == self.c.workers:
                self.agg_count[block] = 0
                service, self.agg_cpu[block] = self.agg_cpu[block], 0.0
                if self.c.mode == "vanilla":
                    update = nbytes / (self.c.update_bytes_per_core_s * self.cores[r])
                    self.cpu_free[r] += update
                    service += update
                self.agg_service[block] = service
                self._at(self.cpu_free[r], _AGG, (block, k, r))
        elif kind == _PULL:
            r, w = who
            seconds = self.push_tx[w][block] + self.agg_service[block] + tx
            if self.c.timing_noise > 0:
                sigma = self.c.timing_noise
                seconds *= float(np.exp(sigma * self.noise_rng.standard_normal() - 0.5 * sigma * sigma))
            self.samples.append(Sample(w, r, nbytes, seconds))
            self.pulled[w] += 1
            self.last_arrival[w] = max(self.last_arrival[w], arrival)
            if self.pulled[w] == self.n_blocks:
                self._at(self.last_arrival[w], _DONE, (w, k))
        else:  # migration
            self.migrating -= 1
            if self.migrating == 0:
                self._at(max(arrival, self.resume_at), _RESUME, None)

    def _handle(self, kind: int, payload) -> None:
        if kind == _GRAD:
            w, k, blocks = payload
            for b in blocks:
                r = self.owners[b]
                self._send(self._push(w, r), (_PUSH, b, k, (w, r), self.block_bytes[b]))
        elif kind == _AGG:
            block, k, r = payload
            for w in range(self.c.workers):
                self._send(self._pull(r, w), (_PULL, block, k, (r, w), self.block_bytes[block]))
        elif kind == _DONE:
            self._worker_done(*payload)
        elif kind == _CHANGE:
            ch: Change = payload
            if ch.what == "bandwidth":
                # a cap, as the real throttle is: it never makes a link faster than the link itself
                node = self.server_node[ch.server]
                link = self.c.worker_gbps if self.c.colocate else self.c.server_gbps
                self.capacity[2 * node] = self.capacity[2 * node + 1] = min(ch.value, link) * GBPS
                self.dirty = True
            else:
                self.cores[ch.server] = ch.value
            self.log.changes.append((self.now, ch.server, ch.what, ch.value))
        elif kind == _REMOVE:
            if self.pending is not None:  # one reassignment at a time: retry once this one is done
                self.deferred.append(int(payload))
            elif self.controller is not None:
                server = int(payload)
                usable = server in self.controller.active and len(self.controller.active) > 1
                self.log.changes.append((self.now, server, "remove", 1.0 if usable else 0.0))
                if usable:
                    decision = self.controller.remove_server(server, self.rng)
                    k_now = max(self.iteration)
                    self._plan(decision, reassignment_step(k_now, self.c.control_rtt_s, self._t_iter()))
        elif kind == _RESUME:
            self._resume()

    # -- workers ---------------------------------------------------------------------------------
    def _start_iteration(self, w: int, k: int) -> None:
        if self.now >= self.c.duration_s:
            self.stopped[w] = True
            return
        self.iteration[w] = k
        self.pulled[w] = 0
        self.last_arrival[w] = self.now
        self.start[w] = self.now
        self.iter_start.setdefault(k, self.now)
        for ready_s, blocks in self.grad_groups:
            self._at(self.now + self.forward_s + ready_s, _GRAD, (w, k, blocks))

    def _t_iter(self) -> float:
        rows = self.log.iterations
        return rows[-1][2] - rows[-1][1] if rows else 1.0

    def _worker_done(self, w: int, k: int) -> None:
        n = self.done_count.get(k, 0) + 1
        self.done_count[k] = n
        if n == self.c.workers:
            del self.done_count[k]
            self._iteration_done(k)
        if self.pending is not None and self.pending[0] == k + 1:
            self.blocked.append(w)
            if len(self.blocked) == self.c.workers:
                self._barrier()
            return
        self._start_iteration(w, k + 1)

    def _iteration_done(self, k: int) -> None:
        start = self.iter_start.pop(k)
        loaded = len(set(self.owners))
        self.log.iterations.append((k, start, self.now, self.map_version, loaded))
        if self.controller is None or (k + 1) % self.c.report_every:
            return
        self.controller.observe(self.samples)
        model = self.controller.model()
        self.samples = []
        if self.pending is not None:
            return
        decision = self.controller.decide(self.report, self.owners, self.rng)
        s_ref = float(self.sizes.sum()) / max(1, len(self.controller.active))
        for r, m in sorted(model.items()):
            self.log.reports.append(
                (
                    self.report,
                    self.now,
                    r,
                    float(np.mean(m.alphas)),
                    float(np.mean(m.betas)),
                    m.mean(s_ref),
                    r in decision.superior,
                    decision.variation,
                )
            )
        self.report += 1
        if decision.action != "none":
            self._plan(decision, reassignment_step(k + 1, self.c.control_rtt_s, self._t_iter()))

    def _plan(self, decision: Decision, k_star: int) -> None:
        self.pending = (k_star, decision)
        self.blocked = []

    def _barrier(self) -> None:
        k_star, decision = self.pending
        assert decision.owners is not None
        moves = migrations(self.owners, decision.owners)
        suspend = (
            self.c.reassign_fixed_s
            + 3 * self.c.control_rtt_s
            + self.c.algo_s_per_block_server * self.n_blocks * len(decision.servers)
        )
        self.resume_at = self.now + suspend
        moved_bytes = float(sum(self.sizes[b] for b, _, _ in moves))
        self.log.reassignments.append(
            (
                self.now,
                k_star,
                decision.action,
                decision.variation,
                " ".join(map(str, decision.superior)),
                len(moves),
                moved_bytes,
                decision.added,
                decision.predicted_before_s,
                decision.predicted_after_s,
            )
        )
        self.barrier_at = self.now
        if self.c.mode == "vanilla" and moves:
            self.migrating = len(moves)
            for b, src, dst in moves:
                self._send(
                    self._mig(src, dst),
                    (_MIGRATE, b, k_star, (src, dst), self.sizes[b] * self.c.state_factor),
                )
        else:
            self._at(self.resume_at, _RESUME, None)

    def _resume(self) -> None:
        k_star, decision = self.pending
        self.owners = list(decision.owners)
        self.map_version += 1
        self.pending = None
        suspended = self.now - self.barrier_at
        row = self.log.reassignments[-1]
        self.log.reassignments[-1] = (*row, suspended)
        self._log_loads()
        for server in self.deferred:
            self._at(self.now, _REMOVE, server)
        self.deferred = []
        blocked, self.blocked = self.blocked, []
        for w in sorted(blocked):
            self._start_iteration(w, k_star)

    def _log_loads(self) -> None:
        per: dict[int, tuple[float, int]] = {}
        for b, r in enumerate(self.owners):
            nbytes, count = per.get(r, (0.0, 0))
            per[r] = (nbytes + self.sizes[b], count + 1)
        for r in range(self.s_total):
            nbytes, count = per.get(r, (0.0, 0))
            self.log.loads.append((self.map_version, self.now, r, nbytes, count))
