"""The op-level SimPy executor: runs a ``policies.pipedream`` schedule's op lists in simulated time.

Each device has a compute engine (its op list, run strictly in order) and a communication engine
(one transfer at a time, so sends overlap compute but not each other); transfers between servers also
queue on the sending server's NIC. An op waits only for what it needs (see ``policies.pipedream.ops``);
nothing here decides *what* to run, only *when* it can run. A weight version lives while it is the
newest or while a later op of its worker still needs it, which gives Table 7.1's version counts
(PipeDream up to p, 2BW 2, the flush schedules 1) as an outcome, not an input.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import simpy
from clustertwin.policies.pipedream.ops import Op, Schedule
from clustertwin.sim.pipedream.memory import DeviceMemory
from clustertwin.sim.pipedream.model import ChunkCost, Device, MemoryModel, Network


class ScheduleError(RuntimeError):
    """The schedule cannot run: a backward before its forward, a missing version, or a deadlock."""


# One op-table row: device, worker, stage (chunk), replica, kind, microbatch, version, start, end, bytes.
OpRow = tuple[int, int, int, int, str, int, int, float, float, float]


@dataclass
class SimOutcome:
    """Everything a run measured; ``rows`` follow ``scenarios.pipedream_results.PIPEDREAM_TABLES["ops"]``."""

    rows: list[OpRow]
    makespan_s: float
    busy_s: list[float]  # compute seconds per device
    peak_memory: list[float]
    peak_stashes: list[int]  # most microbatches stashed at once, per worker
    peak_versions: list[int]  # most weight versions alive at once, per worker (max over its chunks)
    memory_trace: list[tuple[int, float, float]]  # (device, time, bytes)


def simulate(
    schedule: Schedule,
    costs: Sequence[ChunkCost],
    devices: Sequence[Device],
    network: Network,
    memory: MemoryModel | None = None,
    optimizer_step_s: float = 0.0,
    parallel_pipelines: int = 1,
    overlap_allreduce: bool = True,
    progress: Callable[[float, str], None] | None = None,
    rendezvous: bool = False,
    transfer_slowdown: Sequence[tuple[float, float]] | None = None,
) -> SimOutcome:
    """Run ``schedule`` to completion. ``devices[w.device]`` runs worker ``w``; ``costs[c]`` is chunk
    ``c``. ``parallel_pipelines`` > 1 models that many identical pipelines (data parallelism over
    whole pipelines, [Narayanan] §3.2.3) by widening each update's all-reduce, without simulating them.

    ``overlap_allreduce`` models wait-free backpropagation (DDP's gradient buckets): an update's ring
    all-reduce may run while the backward that produced its gradients is still computing, so its
    duration is credited with the time since the latest replica's backward began.

    ``rendezvous``: a message leaves only once its receiver has reached the op that consumes it (NCCL's
    stream-ordered receive, as ``runtime.pipedream.p2p`` posts it: the receive kernel cannot start before
    the compute stream has finished the receiver's earlier ops), so a transfer is never prefetched into
    the receiver's previous op. ``transfer_slowdown[c]`` = (s_F, s_B): chunk ``c``'s forward and backward
    run at speed 1 / (1 + s) while a transfer of their device (sent or received) is in flight, the
    measured cost of NCCL's copy kernels sharing the GPU (``runtime.pipedream.probe.probe_compute``)."""
    if len(costs) != schedule.num_chunks:
        raise ValueError(f"schedule has {schedule.num_chunks} chunks but {len(costs)} chunk costs were given")
    if len(devices) < len(schedule.workers):
        raise ValueError(f"schedule needs {len(schedule.workers)} devices, got {len(devices)}")
    memory = memory or MemoryModel()
    env = simpy.Environment()
    rows: list[OpRow] = []
    engines = [simpy.Resource(env, capacity=1) for _ in devices]
    nics: dict[int, simpy.Resource] = defaultdict(lambda: simpy.Resource(env, capacity=1))
    arrivals: dict[tuple[str, int, int], simpy.Event] = {}
    versions: dict[tuple[int, int, int], simpy.Event] = {}
    barriers: dict[tuple[int, int, str], list] = {}
    mems = [DeviceMemory(i, d.memory_bytes) for i, d in enumerate(devices)]
    per_update = memory.gradient_buffer == "per_update"
    if memory.gradient_buffer not in ("persistent", "per_update"):
        raise ValueError(f"unknown gradient_buffer {memory.gradient_buffer!r}")
    # (worker, chunk) -> a gradient buffer is open (``per_update``: from the first backward to the W)
    grad_open: dict[tuple[int, int], bool] = defaultdict(bool)
    busy = [0.0] * len(devices)
    stash_count = [0] * len(schedule.workers)
    peak_stash = [0] * len(schedule.workers)
    peak_versions = [1] * len(schedule.workers)
    total_ops = sum(len(w.ops) for w in schedule.workers)
    done_ops = [0]
    posted_events: dict[tuple[str, int, int], simpy.Event] = {}
    in_flight = [0] * len(devices)  # transfers of each device in flight
    rate_changed = [env.event() for _ in devices]

    def event_in(table: dict, key: tuple) -> simpy.Event:
        """``table``'s event for ``key``, made by whichever side (waiter or trigger) comes first."""
        event = table.get(key)
        if event is None:
            event = table[key] = env.event()
        return event

    def transfers(delta: int, *ends: int) -> None:
        """``delta`` more transfers in flight on each device of ``ends``; tracked only for the slowdown."""
        if transfer_slowdown is None:
            return
        for device in ends:
            before = in_flight[device]
            in_flight[device] += delta
            if (before == 0) != (in_flight[device] == 0):
                event, rate_changed[device] = rate_changed[device], env.event()
                event.succeed()

    def compute(device: int, work: float, slowdown: float) -> object:
        """``work`` seconds at full speed, at 1 / (1 + slowdown) while a transfer of ``device`` runs."""
        if slowdown <= 0:
            yield env.timeout(work)
            return
        remaining = work
        while remaining > 0:
            rate = 1.0 / (1.0 + slowdown) if in_flight[device] else 1.0
            began = env.now
            timer = env.timeout(remaining / rate)
            fired = yield timer | rate_changed[device]
            if timer in fired:
                return
            remaining -= (env.now - began) * rate

    # Static memory and version 0 of every chunk a worker holds.
    live: dict[tuple[int, int], dict[int, int]] = {}  # (worker, chunk) -> version -> in-flight users
    newest: dict[tuple[int, int], int] = {}
    for wi, worker in enumerate(schedule.workers):
        mem = mems[worker.device]
        for c in worker.chunks:
            w = costs[c].parameter_bytes
            persistent = 0.0 if per_update else memory.gradient_factor
            mem.change(0.0, "static", w * (persistent + memory.optimizer_factor), f"chunk {c} state")
            mem.change(0.0, "weights", w, f"chunk {c} weights")
            live[(wi, c)] = {0: 0}
            newest[(wi, c)] = 0
            event_in(versions, (wi, c, 0)).succeed()

    # A version is freed once no later op of its worker needs it and a newer one exists. The schedule is
    # data, so "later ops" are known: 2BW keeps the shadow version for inputs of the next batch that
    # have not started yet, which a count of in-flight users alone would miss.
    future_uses: dict[tuple[int, int, int], int] = defaultdict(int)
    for wi, worker in enumerate(schedule.workers):
        for op in worker.ops:
            if op.kind == "F":
                future_uses[(wi, op.chunk, op.version)] += 1

    def release_old(wi: int, c: int, now: float) -> None:
        table = live[(wi, c)]
        stale = [
            v
            for v, users in table.items()
            if users == 0 and v != newest[(wi, c)] and future_uses[(wi, c, v)] == 0
        ]
        for v in stale:
            del table[v]
            mems[schedule.workers[wi].device].change(now, "weights", -costs[c].parameter_bytes, f"free v{v}")

    def send(
        src_w: int, dst_w: int, nbytes: float, key: tuple[str, int, int], kind: str, c: int, k: int
    ) -> object:
        src = schedule.workers[src_w].device
        dst = schedule.workers[dst_w].device
        if src == dst:
            event_in(arrivals, key).succeed()
            return
        a, b = devices[src], devices[dst]
        if rendezvous:
            yield event_in(posted_events, key)
        with engines[src].request() as req:
            yield req
            if a.server != b.server:
                with nics[a.server].request() as nic:
                    yield nic
                    start = env.now
                    transfers(1, src, dst)
                    yield env.timeout(network.transfer_s(a, b, nbytes))
            else:
                start = env.now
                transfers(1, src, dst)
                yield env.timeout(network.transfer_s(a, b, nbytes))
            transfers(-1, src, dst)
        rows.append((src, src_w, c, schedule.workers[src_w].replica, kind, k, -1, start, env.now, nbytes))
        event_in(arrivals, key).succeed()

    backward_start: dict[tuple[int, int], float] = {}

    def barrier(key: tuple[int, int, str], size: int) -> simpy.Event:
        entry = barriers.setdefault(key, [0, env.event()])
        entry[0] += 1
        if entry[0] == size:
            entry[1].succeed()
        return entry[1]

    def allreduce(wi: int, op: Op, seq: int, consumed: bool) -> object:
        worker = schedule.workers[wi]
        group = schedule.placement[op.chunk]
        yield barrier((op.chunk, seq, "arrive"), len(group))
        nbytes = costs[op.chunk].parameter_bytes
        duration = network.allreduce_s(
            [devices[schedule.workers[g].device] for g in group], nbytes, parallel_pipelines
        )
        nominal = duration
        if overlap_allreduce:
            began = max(backward_start.get((g, op.chunk), env.now) for g in group)
            duration = max(0.0, duration - (env.now - began))
        start = env.now
        if nominal > 0:  # recorded even when fully hidden (start == end), so every sync is visible
            with engines[worker.device].request() as req:
                yield req
                # Every member must hold its engine before the ring runs; sends never wait on compute,
                # so engines always free up and this cannot deadlock.
                yield barrier((op.chunk, seq, "engines"), len(group))
                start = env.now
                yield env.timeout(duration)
            rows.append(
                (
                    worker.device,
                    wi,
                    op.chunk,
                    worker.replica,
                    "allreduce",
                    op.microbatch,
                    op.version,
                    start,
                    env.now,
                    nbytes,
                )
            )
        if optimizer_step_s > 0:
            yield env.timeout(optimizer_step_s / devices[worker.device].speed)
        # Free unused old versions first: a flush schedule's update is then in place (one version).
        newest[(wi, op.chunk)] = op.version
        live[(wi, op.chunk)][op.version] = 0
        release_old(wi, op.chunk, env.now)
        mems[worker.device].change(
            env.now, "weights", costs[op.chunk].parameter_bytes, f"chunk {op.chunk} v{op.version}"
        )
        if consumed:  # ``per_update``: the buffer dies once the new weights exist (both coexist first)
            grad = costs[op.chunk].parameter_bytes * memory.gradient_factor
            mems[worker.device].change(env.now, "gradients", -grad, f"chunk {op.chunk} update")
        peak_versions[wi] = max(peak_versions[wi], len(live[(wi, op.chunk)]))
        event_in(versions, (wi, op.chunk, op.version)).succeed()

    def run_worker(wi: int) -> object:
        worker = schedule.workers[wi]
        dev = devices[worker.device]
        mem = mems[worker.device]
        forwarded: dict[tuple[int, int], int] = {}
        w_seq: dict[int, int] = defaultdict(int)
        last = schedule.num_chunks - 1
        for op in worker.ops:
            c, k, cost = op.chunk, op.microbatch, costs[op.chunk]
            if c not in worker.chunks:
                raise ScheduleError(f"worker {wi} runs {op} on a chunk it does not hold ({worker.chunks})")
            slow_f, slow_b = transfer_slowdown[c] if transfer_slowdown is not None else (0.0, 0.0)
            if op.kind == "F":
                if c > 0:
                    if rendezvous:
                        event_in(posted_events, ("act", k, c)).succeed()
                    yield event_in(arrivals, ("act", k, c))
                yield event_in(versions, (wi, c, op.version))
                if op.version not in live[(wi, c)]:
                    raise ScheduleError(f"worker {wi}: {op} needs weight version {op.version}, already freed")
                live[(wi, c)][op.version] += 1
                future_uses[(wi, c, op.version)] -= 1
                stash = cost.input_bytes + (0.0 if memory.recompute else cost.activation_bytes)
                mem.change(env.now, "stashes", stash, f"F mb {k} chunk {c}")
                stash_count[wi] += 1
                peak_stash[wi] = max(peak_stash[wi], stash_count[wi])
                start = env.now
                yield from compute(worker.device, cost.forward_s / dev.speed, slow_f)
                busy[worker.device] += env.now - start
                rows.append((worker.device, wi, c, worker.replica, "F", k, op.version, start, env.now, 0.0))
                forwarded[(k, c)] = op.version
                if c < last:
                    dst = schedule.worker_for(c + 1, k)
                    env.process(send(wi, dst, cost.output_bytes, ("act", k, c + 1), "send_act", c, k))
            elif op.kind == "B":
                if (k, c) not in forwarded:
                    raise ScheduleError(
                        f"worker {wi}: backward of microbatch {k} on chunk {c} before its forward"
                    )
                if c < last:
                    if rendezvous:
                        event_in(posted_events, ("grad", k, c)).succeed()
                    yield event_in(arrivals, ("grad", k, c))
                start = env.now
                backward_start[(wi, c)] = start
                duration = cost.backward_s
                if memory.recompute:
                    duration += cost.forward_s
                    mem.change(env.now, "transient", cost.activation_bytes, f"recompute mb {k} chunk {c}")
                yield from compute(worker.device, duration / dev.speed, slow_b)
                busy[worker.device] += env.now - start
                if memory.recompute:
                    mem.change(env.now, "transient", -cost.activation_bytes, "recompute done")
                v = forwarded.pop((k, c))
                rows.append((worker.device, wi, c, worker.replica, "B", k, v, start, env.now, 0.0))
                stash = cost.input_bytes + (0.0 if memory.recompute else cost.activation_bytes)
                mem.change(env.now, "stashes", -stash, f"B mb {k} chunk {c}")
                if per_update:  # the backward's fresh gradient (its stash is gone by its end)
                    grad = cost.parameter_bytes * memory.gradient_factor
                    if grad_open[(wi, c)]:  # next to the buffer until added into it
                        mem.change(env.now, "transient", grad, f"gradient of mb {k} chunk {c}")
                        mem.change(env.now, "transient", -grad, "gradient added")
                    else:  # becomes the buffer
                        mem.change(env.now, "gradients", grad, f"gradient buffer of chunk {c}")
                        grad_open[(wi, c)] = True
                stash_count[wi] -= 1
                live[(wi, c)][v] -= 1
                release_old(wi, c, env.now)
                if c > 0:
                    dst = schedule.worker_for(c - 1, k)
                    grad_bytes = costs[c - 1].output_bytes  # the gradient of what chunk c-1 sent
                    env.process(send(wi, dst, grad_bytes, ("grad", k, c - 1), "send_grad", c, k))
            else:
                seq = w_seq[c]
                w_seq[c] += 1
                consumed, grad_open[(wi, c)] = grad_open[(wi, c)], False
                proc = env.process(allreduce(wi, op, seq, consumed))
                start = env.now
                if op.blocking:
                    yield proc
                if cost.update_s > 0:  # the step itself occupies the compute engine, blocking or not
                    step_start = env.now
                    yield env.timeout(cost.update_s / dev.speed)
                    busy[worker.device] += env.now - step_start
                if op.blocking:
                    rows.append(
                        (worker.device, wi, c, worker.replica, "W", k, op.version, start, env.now, 0.0)
                    )
            done_ops[0] += 1
            if progress is not None and done_ops[0] % 256 == 0:
                progress(done_ops[0] / total_ops, f"{done_ops[0]}/{total_ops} ops")

    procs = [env.process(run_worker(wi)) for wi in range(len(schedule.workers))]
    env.run()
    stuck = [wi for wi, p in enumerate(procs) if not p.triggered]
    if stuck:
        raise ScheduleError(
            f"schedule {schedule.name!r} deadlocked: workers {stuck} never finished their op lists"
        )
    for p in procs:
        if not p.ok:  # pragma: no cover - SimPy re-raises failures from env.run()
            raise p.value
    trace = [(m.device, t, b) for m in mems for t, b in m.trace]
    return SimOutcome(
        rows=rows,
        makespan_s=env.now,
        busy_s=busy,
        peak_memory=[m.peak for m in mems],
        peak_stashes=peak_stash,
        peak_versions=peak_versions,
        memory_trace=trace,
    )
