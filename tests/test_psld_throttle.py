"""A throttled PS behaves like a capped full-duplex NIC ([PSLD] §6.1 caps links with ``tc``).

One PS, 2 workers, 8 blocks of 64 KiB, the PS capped at 5 MB/s each way: per iteration 1 MiB comes in
and 1 MiB goes out. A NIC carries both directions at once, so an iteration takes about the ingress time
(0.21 s) plus one block's pulls; receiving, then sleeping, then sending (the runtime's old throttle)
would take twice that (0.42 s).
"""

from __future__ import annotations

import numpy as np
import torch.distributed as dist
from clustertwin.runtime.launch import join, launch, report
from clustertwin.runtime.psld.ps import Job, block_layout, run_server, run_worker

RATE = 5e6


def _rank(rank: int, job: Job) -> None:
    join()
    try:
        marks: list = []
        if rank < job.servers:
            run_server(rank, job, marks)
        else:
            run_worker(rank, job, marks)
        report((rank, marks))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_throttled_server_overlaps_its_two_directions() -> None:
    numel, blocks = block_layout([8192] * 8, 64 * 1024)
    job = Job(1, 2, numel, blocks, (0,) * len(blocks), 6, "byteps", {}, throttle={0: RATE})
    marks = dict(launch(_rank, 3, (job,), limit_s=120.0, expected=3))
    iteration = float(np.median(np.diff([m[1] for m in marks[0]])))
    one_way = job.workers * sum(b.nbytes for b in blocks) / RATE
    assert 0.9 * one_way < iteration < 0.85 * 2 * one_way, (iteration, one_way)


def test_link_keeps_its_own_clock() -> None:
    import time

    from clustertwin.runtime.psld.throttle import Link

    link = Link(1e6)  # 1 MB/s
    t0 = time.monotonic()
    link.carry(50_000, t0)  # 50 ms
    time.sleep(0.03)  # the caller wakes late: the link went on carrying the next, already-queued bytes
    link.carry(50_000, t0)
    assert abs(time.monotonic() - t0 - 0.10) < 0.02  # 100 ms in all, not 130 ms
    idle = time.monotonic() + 0.05
    time.sleep(0.05)  # an idle link banks nothing: bytes ready now take their full time
    assert link.carry(20_000, idle) > 0.015
    assert Link(None).carry(1e9, 0.0) == 0.0
