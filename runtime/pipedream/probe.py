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

import statistics
import time
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from clustertwin.policies.pipedream.ops import Schedule
from clustertwin.runtime.pipedream.distributed import barrier, sync_gradients

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
