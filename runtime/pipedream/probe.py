"""What a real run measures about its interconnect for the simulator's link table: the point-to-point
link the activations cross, and the collective its replicated stages synchronise with.

- ``probe_link``: one-way latency and bandwidth from rank 0 to rank 1 on an activation channel
  (``runtime.pipedream.p2p``), from back-to-back messages of a small and a large size timed on the
  receiver (t = latency + bytes / bandwidth).
- ``probe_sync``: the replicas' gradient synchronisation itself, as ``StageExecutor`` runs it
  (``runtime.pipedream.distributed.sync_gradients``) on tensors of the chunk's real gradient shapes,
  among the chunk's replica group: one untimed call, then ``reps`` timed ones, each between two
  synchronisations of the members; the median. A point-to-point probe cannot price it: an all-reduce of a
  stage's gigabytes runs at the collective's own bandwidth (ring steps, kernel launches per tensor), which
  small messages on NVLink never show.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from clustertwin.policies.pipedream.ops import Schedule
from clustertwin.runtime.pipedream.distributed import OpClock, barrier, boundaries, sync_gradients
from clustertwin.runtime.pipedream.p2p import channel_orders
from torch.func import functional_call

if TYPE_CHECKING:
    from clustertwin.runtime.pipedream.distributed import StageExecutor


def probe_link(executor: StageExecutor, sizes: tuple[int, int], reps: int) -> dict[str, float]:
    """Latency and bandwidth of the rank 0 → rank 1 activation channel (see the module docstring)."""
    channel = (0, 1, "act")
    channels = executor.channels
    channels.connect([channel])
    device, rank = executor.device, executor.rank
    per_message = []
    for size in sizes:
        buf = torch.zeros(size // 4, dtype=torch.float32, device=device)
        for timed in (False, True):
            barrier(device)
            began = time.perf_counter()
            count = reps if timed else 2
            for _ in range(count):
                if rank == 0:
                    dist.send(buf, 1, group=channels.groups[channel])
                elif rank == 1:
                    dist.recv(buf, 0, group=channels.groups[channel])
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            elapsed = (time.perf_counter() - began) / count
        per_message.append(elapsed)
    small, large = sizes
    bandwidth = (large - small) / max(per_message[1] - per_message[0], 1e-12)
    latency = max(per_message[0] - small / bandwidth, 0.0)
    barrier(device)
    return {
        "latency_s": latency,
        "bandwidth_Bps": bandwidth,
        "small_s": per_message[0],
        "large_s": per_message[1],
    }


def _members_synchronised(device: torch.device, group: object) -> None:
    """Every member of ``group`` has finished its queued work and reached this point."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    token = torch.zeros(1, device=device)
    dist.all_reduce(token, group=group)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def probe_sync(executor: StageExecutor, schedule: Schedule, reps: int) -> list[dict[str, float]]:
    """Median seconds of the gradient synchronisation of each replicated chunk this rank holds in
    ``schedule`` (see the module docstring); one dict per chunk: ``chunk``, ``members``, ``bytes``,
    ``seconds``. Every rank must call it (chunk modules are built, and groups created, collectively)."""
    if executor.layout != (schedule.num_chunks, schedule.placement):
        executor.load(schedule)
    device = executor.device
    out = []
    for c in schedule.workers[executor.rank].chunks:
        group = executor.replica_groups.get(c)
        if group is None:
            continue
        grads = [torch.zeros_like(t) for t in executor.weights[c].values()]
        times = []
        for i in range(reps + 1):
            _members_synchronised(device, group)
            began = time.perf_counter()
            sync_gradients(grads, group)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if i:  # the first call sets up the collective's buffers
                times.append(time.perf_counter() - began)
        out.append(
            {
                "chunk": float(c),
                "members": float(len(schedule.placement[c])),
                "bytes": float(sum(g.numel() * g.element_size() for g in grads)),
                "seconds": statistics.median(times),
            }
        )
        del grads
    barrier(device)
    return out


TRAFFIC_MESSAGE_S = 5e-4  # target seconds of one message of ``probe_compute``'s traffic


def _traffic(executor: StageExecutor, buffers: tuple[torch.Tensor, torch.Tensor], count: int) -> list:
    """Post ``count`` messages to the next rank of the ring and as many receives from the previous one
    (each on its own channel, so both directions run at once); the handles."""
    rank, world, groups = executor.rank, executor.world, executor.channels.groups
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    works = []
    for _ in range(count):
        works.append(dist.isend(buffers[0], nxt, group=groups[(rank, nxt, "act")]))
        works.append(dist.irecv(buffers[1], prv, group=groups[(prv, rank, "act")]))
    return works


def _settle(device: torch.device, works: list) -> None:
    """This rank's compute has finished and every posted message has arrived, on every rank."""
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()  # not the device: the ring is still copying
    for work in works:
        work.wait()
    barrier(device)


def probe_compute(
    executor: StageExecutor, schedule: Schedule, reps: int, warmup: int = 2
) -> list[dict[str, float]]:
    """Seconds of one forward and one backward of each chunk this rank holds in ``schedule`` (median of
    ``reps``), alone and with ring traffic, as the executor runs them (see the module docstring); one
    dict per chunk: ``chunk``, ``forward_s``, ``backward_s``, ``forward_traffic_s``,
    ``backward_traffic_s`` (NaN where the schedule sends nothing between devices). Every rank must call
    it."""
    if executor.layout != (schedule.num_chunks, schedule.placement):
        executor.load(schedule)
    device, rank, world = executor.device, executor.rank, executor.world
    workload = executor.workload
    shapes = boundaries(workload, schedule.num_chunks)
    traffic = world >= 2 and bool(channel_orders(schedule)) and bool(shapes)
    buffers: tuple[torch.Tensor, torch.Tensor] | None = None
    if traffic:
        executor.channels.connect([((r - 1) % world, r, "act") for r in range(world)])
        shape, dtype = shapes[0]
        buffers = (
            torch.zeros(shape, dtype=dtype, device=device),
            torch.empty(shape, dtype=dtype, device=device),
        )
    last = schedule.num_chunks - 1
    scale = 1.0 / schedule.batch_microbatches
    held = schedule.workers[rank].chunks
    rounds = max(len(w.chunks) for w in schedule.workers)  # every rank takes part in every round
    x0, y = workload.microbatch(0, device)
    clock = OpClock(device)
    out = []
    for i in range(rounds):
        c = held[i] if i < len(held) else None
        if c is None:
            x = seed = None
        else:
            x = x0 if c == 0 else _noise(*shapes[c - 1], device)
            seed = None if c == last else _noise(*shapes[c], device)

        def pair(
            ring: tuple | None = None,
            messages: int = 0,
            c: int | None = c,
            x: torch.Tensor | None = x,
            seed=seed,
        ) -> tuple[float, float]:
            def forward_backward(timed: list) -> None:
                assert c is not None and x is not None
                inp = x if c == 0 else x.detach().requires_grad_()
                params = {n: t.detach().requires_grad_() for n, t in executor.weights[c].items()}
                result = functional_call(executor.modules[c], params, (inp,))
                if c == last:
                    result = workload.loss(result, y) * scale
                timed.append(clock.mark())
                wrt = list(params.values()) + ([inp] if c > 0 else [])
                torch.autograd.grad(result, wrt, seed)
                timed.append(clock.mark())

            marks: list = []
            if c is not None:
                # An untimed pass first keeps the device busy while the timed ones are enqueued, as in
                # the pipeline, where the host runs ahead: timed from an idle device, the forward would
                # include the launch of its first kernels. The traffic is posted behind it, and its
                # kernels start (NCCL waits for the compute stream) as the timed forward does.
                forward_backward([])
            works = _traffic(executor, ring, messages) if ring is not None else []
            clock.start()
            marks.append(clock.mark())
            if c is not None:
                forward_backward(marks)
            _settle(device, works)
            if c is None:
                return math.nan, math.nan
            f0, f1, b1 = (clock.seconds(m) for m in marks)
            return f1 - f0, b1 - f1

        for _ in range(warmup):
            pair()
        messages, ring = 0, None
        if traffic:
            began = time.perf_counter()
            _settle(device, _traffic(executor, buffers, 4))  # type: ignore[arg-type]
            per_message = max((time.perf_counter() - began) / 4, 1e-9)
            alone = sum(pair()) if c is not None else pair()[0]  # NaN: no chunk this round
            alone = 0.0 if math.isnan(alone) else alone
            # Messages of about TRAFFIC_MESSAGE_S each (posting one costs the host tens of microseconds,
            # so small ones would finish before the op is even enqueued), enough of them to outlast the
            # slowest rank's forward and backward.
            factor = min(max(math.ceil(TRAFFIC_MESSAGE_S / per_message), 1), 16)
            need = torch.tensor([factor, math.ceil(1.5 * alone / (factor * per_message)) + 1], device=device)
            dist.all_reduce(need, op=dist.ReduceOp.MAX)
            factor, messages = (int(v) for v in need.tolist())
            ring = tuple(b.new_zeros(b.numel() * factor) for b in buffers)  # type: ignore[union-attr]
        samples: dict[str, list[tuple[float, float]]] = {"alone": [], "traffic": []}
        for r in range(reps):
            for condition in ("alone", "traffic") if r % 2 == 0 else ("traffic", "alone"):
                if condition == "traffic" and not traffic:
                    continue
                samples[condition].append(pair(ring, messages) if condition == "traffic" else pair())
        if c is None:
            continue
        row = {"chunk": float(c), "messages": float(messages)}
        for condition, suffix in (("alone", ""), ("traffic", "_traffic")):
            got = samples[condition]
            row[f"forward{suffix}_s"] = statistics.median(f for f, _ in got) if got else math.nan
            row[f"backward{suffix}_s"] = statistics.median(b for _, b in got) if got else math.nan
        out.append(row)
    barrier(device)
    return out


def _noise(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A boundary-shaped tensor: normal noise for floating point, zeros (valid indices) otherwise."""
    if dtype.is_floating_point:
        return torch.randn(shape, dtype=dtype, device=device)
    return torch.zeros(shape, dtype=dtype, device=device)
