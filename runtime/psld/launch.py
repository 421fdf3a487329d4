"""Spawn a PSLD parameter-server job as local gloo processes and collect what the workers report."""

from __future__ import annotations

import os
import queue as queue_module
import socket
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from runtime.psld.ps import Job, run_server, run_worker


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_group(
    target: Callable[..., None],
    world: int,
    args: tuple,
    expected: int,
    limit_s: float,
    progress: Callable[[float, str], None] | None = None,
) -> list[tuple]:
    """Start ``world`` ranks of ``target(rank, world, port, *args, queue)`` and return the ``expected``
    items they put on the queue. A rank that dies, or a group past ``limit_s``, fails the launch at once
    rather than leaving the caller waiting; every process is reaped on the way out."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=target, args=(r, world, port, *args, queue)) for r in range(world)]
    for p in procs:
        p.start()
    items: list[tuple] = []
    limit = time.monotonic() + limit_s
    try:
        while len(items) < expected:
            try:
                items.append(queue.get(timeout=1.0))
                if progress is not None:
                    progress(len(items) / expected, f"{len(items)}/{expected} reports")
            except queue_module.Empty:
                failed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                if failed or time.monotonic() > limit:
                    codes = [p.exitcode for p in procs]
                    raise RuntimeError(f"a PS job process failed or timed out: exit codes {codes}") from None
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    if any(p.exitcode != 0 for p in procs):
        raise RuntimeError(f"a PS job process failed: exit codes {[p.exitcode for p in procs]}")
    return items


def _main(rank: int, world: int, port: int, jobs: list[Job], queue: Any) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        for index, job in enumerate(jobs):
            if rank < job.servers:
                held, control = run_server(rank, job)
                queue.put((index, -1 - rank, sorted(held), control.decisions if control else []))
            else:
                params, samples = run_worker(rank, job)
                queue.put((index, rank - job.servers, params.numpy().tobytes(), len(samples)))
            dist.barrier()
    finally:
        dist.destroy_process_group()


def run_jobs(jobs: list[Job]) -> list[dict[int, tuple[Any, Any]]]:
    """Run ``jobs`` one after another on one process group. Per job: worker w -> (final parameters as
    bytes, number of timing samples), and server r under key -1-r -> (blocks it holds at the end, the
    scheduler's (iteration, action) decisions; rank 0 only)."""
    servers, workers = jobs[0].servers, jobs[0].workers
    if any(j.servers != servers or j.workers != workers for j in jobs):
        raise ValueError("all jobs of one launch need the same numbers of servers and workers")
    world = servers + workers
    out: list[dict[int, tuple[Any, Any]]] = [{} for _ in jobs]
    for index, who, first, second in spawn_group(_main, world, (jobs,), len(jobs) * world, 120.0 * len(jobs)):
        out[index][who] = (first, second)
    return out
