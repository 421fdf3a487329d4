"""Spawn a PSLD parameter-server job as local gloo processes and collect what the workers report."""

from __future__ import annotations

import os
import socket
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from runtime.psld.ps import Job, run_server, run_worker


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_main, args=(r, world, port, jobs, queue)) for r in range(world)]
    for p in procs:
        p.start()
    out: list[dict[int, tuple[Any, Any]]] = [{} for _ in jobs]
    expected = len(jobs) * world
    try:
        for _ in range(expected):
            index, who, first, second = queue.get(timeout=120)
            out[index][who] = (first, second)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    if any(p.exitcode != 0 for p in procs):
        raise RuntimeError(f"a PS job process failed: exit codes {[p.exitcode for p in procs]}")
    return out
