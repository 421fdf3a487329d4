"""Spawn a PSLD parameter-server job as local gloo processes and collect what the workers report."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.distributed as dist
from clustertwin.runtime.launch import join, launch, report
from clustertwin.runtime.psld.ps import Job, run_server, run_worker


def _main(rank: int, jobs: list[Job]) -> None:
    join()
    try:
        for index, job in enumerate(jobs):
            if rank < job.ps_ranks:
                held, control = run_server(rank, job)
                report((index, -1 - rank, sorted(held), control.records if control else []))
            else:
                params, samples = run_worker(rank, job)
                report((index, rank - job.ps_ranks, params.numpy().tobytes(), len(samples)))
            dist.barrier()
    finally:
        dist.destroy_process_group()


def roles(job: Job) -> list[str]:
    """Each rank's name in a launch's messages: "PS r", "standby PS r" or "worker w"."""
    return (
        [f"PS {r}" for r in range(job.servers)]
        + [f"standby PS {r}" for r in range(job.servers, job.ps_ranks)]
        + [f"worker {w}" for w in range(job.workers)]
    )


def run_jobs(
    jobs: list[Job], on_start: Callable[[list], None] | None = None
) -> list[dict[int, tuple[Any, Any]]]:
    """Run ``jobs`` one after another on one process group. Per job: worker w -> (final parameters as
    bytes, number of timing samples), and server r (standby PSs included) under key -1-r -> (blocks it
    holds at the end, on rank 0 the scheduler's records ``(k, time, Decision, profile)``, else [])."""
    shape = {(j.servers, j.standby, j.workers) for j in jobs}
    if len(shape) != 1:
        raise ValueError("all jobs of one launch need the same numbers of servers, standby PSs and workers")
    world = jobs[0].ps_ranks + jobs[0].workers
    out: list[dict[int, tuple[Any, Any]]] = [{} for _ in jobs]
    items = launch(
        _main,
        world,
        (jobs,),
        roles=roles(jobs[0]),
        limit_s=120.0 * len(jobs),
        expected=len(jobs) * world,
        on_start=on_start,
    )
    for index, who, first, second in items:
        out[index][who] = (first, second)
    return out
