"""Multi-process execution of a schedule's op lists with torch.distributed (gloo on CPU, one process per
worker), writing the same ``ops`` event table as the simulator.

Each rank runs its worker's op list in order, exactly as ``sim.pipedream`` and ``runtime.pipedream.local``
do. Activations and gradients travel point-to-point: the sender posts a non-blocking ``isend`` (a small
shape header, then the payload) and the receiver a blocking ``recv`` when an op needs it, with a tag per
(kind, microbatch, chunk) so messages can never be confused; since sends never block, any dependency-
respecting op order is deadlock-free. A ``W`` op all-reduces the accumulated gradients over the chunk's
replicas (one process group per replicated chunk) and creates a new immutable weight version (see
``local``). PipeDream itself used gloo for pipeline traffic (seed 001 §2.4.4).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.func import functional_call

from policies.pipedream.ops import Schedule

# (chunks, microbatches, seed) -> (chunk modules, inputs, targets); must be a module-level function
# so it can be pickled into the spawned processes.
Workload = Callable[[int, int, int], tuple[list[nn.Module], list[torch.Tensor], list[torch.Tensor]]]
_HEADER = 8  # ndim followed by up to 7 sizes


def _tag(kind: str, microbatch: int, chunk: int, chunks: int, payload: bool) -> int:
    return (((microbatch * chunks + chunk) * 2 + (kind == "grad")) * 2) + payload


def _send(tensor: torch.Tensor, dst: int, tag: int, pending: list) -> None:
    header = torch.zeros(_HEADER, dtype=torch.int64)
    header[0] = tensor.dim()
    header[1 : 1 + tensor.dim()] = torch.tensor(tensor.shape, dtype=torch.int64)
    payload = tensor.detach().contiguous()
    pending.append(dist.isend(header, dst, tag=tag))
    pending.append(dist.isend(payload, dst, tag=tag + 1))
    pending.append(payload)  # keep the buffer alive until the send completes


def _recv(src: int, tag: int, dtype: torch.dtype) -> torch.Tensor:
    header = torch.zeros(_HEADER, dtype=torch.int64)
    dist.recv(header, src, tag=tag)
    shape = header[1 : 1 + int(header[0])].tolist()
    out = torch.empty(shape, dtype=dtype)
    dist.recv(out, src, tag=tag + 1)
    return out


def _worker(
    rank: int,
    world: int,
    schedule: Schedule,
    workload: Workload,
    seed: int,
    lr: float,
    rendezvous: str,
    out_dir: str,
) -> None:
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    modules, inputs, targets = workload(schedule.num_chunks, schedule.num_microbatches, seed)
    groups = {}
    for c, members in enumerate(schedule.placement):  # every rank creates every group, in one order
        if len(members) > 1:
            groups[c] = dist.new_group(list(members))
    worker = schedule.workers[rank]
    last = schedule.num_chunks - 1
    scale = 1.0 / schedule.batch_microbatches
    dtype = next(modules[0].parameters()).dtype
    versions = {
        c: {0: {n: p.detach().clone() for n, p in modules[c].named_parameters()}} for c in worker.chunks
    }
    grads: dict[int, dict[str, torch.Tensor]] = {}
    stash: dict[tuple[int, int], tuple] = {}
    local_mail: dict[tuple[str, int, int], torch.Tensor] = {}
    pending: list = []
    rows = []
    dist.barrier()
    t0 = time.perf_counter()

    def take(kind: str, k: int, c: int, src: int) -> torch.Tensor:
        if src == rank:
            return local_mail.pop((kind, k, c))
        return _recv(src, _tag(kind, k, c, schedule.num_chunks, False), dtype)

    def give(kind: str, k: int, c: int, dst: int, tensor: torch.Tensor) -> None:
        if dst == rank:
            local_mail[(kind, k, c)] = tensor.detach()
        else:
            _send(tensor, dst, _tag(kind, k, c, schedule.num_chunks, False), pending)

    for op in worker.ops:
        c, k = op.chunk, op.microbatch
        start = time.perf_counter() - t0
        if op.kind == "F":
            x = inputs[k] if c == 0 else take("act", k, c, schedule.worker_for(c - 1, k))
            x = x.detach().requires_grad_(c > 0)
            params = {n: t.detach().requires_grad_() for n, t in versions[c][op.version].items()}
            out = functional_call(modules[c], params, (x,))
            if c == last:
                out = ((out - targets[k]) ** 2).mean() * scale
            else:
                give("act", k, c + 1, schedule.worker_for(c + 1, k), out)
            stash[(k, c)] = (x, params, out)
        elif op.kind == "B":
            x, params, out = stash.pop((k, c))
            grad_out = (
                torch.ones_like(out) if c == last else take("grad", k, c, schedule.worker_for(c + 1, k))
            )
            wrt = list(params.values()) + ([x] if c > 0 else [])
            got = torch.autograd.grad(out, wrt, grad_out)
            acc = grads.setdefault(c, {n: torch.zeros_like(t) for n, t in params.items()})
            for name, g in zip(params, got, strict=False):
                acc[name] += g
            if c > 0:
                give("grad", k, c - 1, schedule.worker_for(c - 1, k), got[-1])
        else:
            base = versions[c][max(versions[c])]
            acc = grads.pop(c, {n: torch.zeros_like(t) for n, t in base.items()})
            if c in groups:
                flat = torch.cat([acc[n].reshape(-1) for n in base])
                dist.all_reduce(flat, group=groups[c])
                flat /= len(schedule.placement[c])
                offset = 0
                for n, t in base.items():
                    acc[n] = flat[offset : offset + t.numel()].view_as(t)
                    offset += t.numel()
            versions[c][op.version] = {n: t - lr * acc[n] for n, t in base.items()}
        end = time.perf_counter() - t0
        version = op.version
        rows.append((worker.device, rank, c, worker.replica, op.kind, k, version, start, end, 0.0))
    for item in pending:
        if hasattr(item, "wait"):
            item.wait()
    final = {c: versions[c][max(versions[c])] for c in worker.chunks if worker.replica == 0}
    torch.save({"rows": rows, "final": final}, Path(out_dir) / f"rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


def run_distributed(
    schedule: Schedule, workload: Workload, seed: int = 0, lr: float = 0.1
) -> tuple[list[tuple], dict[int, dict[str, torch.Tensor]]]:
    """Spawn one gloo process per worker of ``schedule``; return the op rows of every rank (the
    ``ops`` table columns, times from a common barrier) and the final weights of every chunk."""
    world = len(schedule.workers)
    with tempfile.TemporaryDirectory(prefix="pipedream-") as tmp:
        rendezvous = os.path.join(tmp, "rendezvous")
        mp.spawn(
            _worker, args=(world, schedule, workload, seed, lr, rendezvous, tmp), nprocs=world, join=True
        )
        rows: list[tuple] = []
        final: dict[int, dict[str, torch.Tensor]] = {}
        for rank in range(world):
            saved = torch.load(Path(tmp) / f"rank{rank}.pt")
            rows += saved["rows"]
            final.update(saved["final"])
    return rows, final
