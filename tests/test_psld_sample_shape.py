"""The real runtime's block sample is the simulator's: push transfer + PS service + pull transfer.

``sim.psld.engine`` times a block per (worker, block) as its push's transfer from the moment it heads its
connection, plus the PS's CPU time for the block, plus the pull's transfer, each with the message
latency. A link-bound PS at ``rate`` bytes/s that W workers push to at once shares its ingress W ways and
its egress W ways, so a block of ``b`` bytes takes ``2 W b / rate`` there. The runtime used to time a
PS's first block of an iteration from its push (so it held the wait for the slowest worker's push) and a
later one from the previous pull (the pipeline's spacing, ``W b / rate`` on a link-bound PS). Now each PS
reports how long it held each worker's copy of a block without carrying or serving it
(``ps.held_s``), and the worker subtracts that from its round trip (``ps.shaped``).

The first test is arithmetic on a hand-made timeline; the other two run gloo processes (1 PS, 2 workers,
a few seconds each).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch.distributed as dist
from clustertwin.policies.psld.blocks import Block
from clustertwin.runtime.launch import join, launch, report
from clustertwin.runtime.psld.ps import Job, block_layout, held_s, run_server, run_worker, shaped
from test_psld_samples import dequeued  # the runtime's sample before shaped


def test_a_slow_workers_push_is_not_in_the_fast_workers_sample() -> None:
    # one unthrottled PS, two blocks of 1 MB; worker 1 pushes 50 ms after worker 0. PS clock: worker 0's
    # pushes land at 1.000 s, worker 1's at 1.050 s; each block is served for 4 ms, and its pulls start
    # as soon as it is served. Worker 0's clock is offset by 100 s: only durations may cross.
    blocks = (Block(0, 0, 0, 1 << 20), Block(1, 0, 1 << 20, 1 << 20))
    owners = (0, 0)
    first = {0: 1.000, 1: 1.050}
    served = [(1.050, 1.054), (1.054, 1.058)]  # (start, end) of each block's service
    pull_s, push_s = 0.002, 0.001  # each pull's transport; the first push's transport
    issued = {0: 101.000 - push_s, 1: 101.000 - push_s}  # worker 0 issued both pushes at once
    done = {b.id: 100.0 + end + pull_s for b, (_, end) in zip(blocks, served, strict=True)}
    held = {
        b.id: held_s(first[0], start, 0.0, end, end) for b, (start, end) in zip(blocks, served, strict=True)
    }
    times = shaped(blocks, owners, issued, done, held)
    # push transport + 4 ms of service + pull transport, for both blocks: no 50 ms, no queue
    assert np.allclose(times, push_s + 0.004 + pull_s)
    old = dequeued(blocks, owners, issued, done)
    assert old[0] > 0.05  # the old sample of the first block held the wait for worker 1
    assert abs(old[1] - 0.004) < 1e-9  # and a later one only the spacing of the pulls


def _rank(rank: int, job: Job) -> None:
    join()
    try:
        if rank < job.servers:
            run_server(rank, job)
            report((rank, [], []))
        else:
            raw: list = []
            _, samples = run_worker(rank, job, raw=raw)
            report((rank, [(s.nbytes, s.seconds) for s in samples], [(s.nbytes, s.seconds) for s in raw]))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _run(job: Job) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Worker -> (samples, raw) as arrays of (iteration, block, bytes, seconds), first iteration dropped
    (it pays the process group's first touches)."""
    world = job.servers + job.workers
    out = {}
    for rank, samples, raw in launch(_rank, world, (job,), limit_s=120.0, expected=world):
        if rank < job.servers:
            continue
        n = len(job.blocks)
        rows = [
            np.array([(i // n, i % n, nb, s) for i, (nb, s) in enumerate(part) if i >= n])
            for part in (samples, raw)
        ]
        out[rank - job.servers] = (rows[0], rows[1])
    return out


RATE = 5e6  # bytes/s each way: a 64 KiB copy takes 13 ms


def test_a_link_bound_ps_block_takes_both_directions_at_the_fair_share() -> None:
    # 1 PS capped at RATE, 2 workers, blocks of 64 and 128 KiB: in the simulator each worker's copy
    # of a block crosses the PS's ingress and then its egress, each shared by the 2 workers' copies
    numel, blocks = block_layout([8192, 16384] * 3, 128 * 1024)
    job = Job(1, 2, numel, blocks, (0,) * len(blocks), 5, "byteps", {}, throttle={0: RATE})
    runs = _run(job)
    W = job.workers
    for samples, raw in runs.values():
        for nbytes in (64 * 1024, 128 * 1024):
            sim = 2 * W * nbytes / RATE  # push W b / rate + pull W b / rate (+ latency, service: ms)
            mine = samples[samples[:, 2] == nbytes, 3]
            assert sim * 0.97 < np.median(mine) < sim * 1.15 + 0.01, (nbytes, np.median(mine), sim)
            # the sample is not the time from push issue, which grows with the blocks ahead
            assert np.median(raw[raw[:, 2] == nbytes, 3]) > 2 * sim
        # the line through the two sizes: both directions' 2 W / rate seconds per byte
        small, large = (np.median(samples[samples[:, 2] == nb, 3]) for nb in (64 * 1024, 128 * 1024))
        slope = (large - small) / (64 * 1024)
        assert slope == pytest.approx(2 * W / RATE, rel=0.15)


def test_the_first_block_does_not_wait_for_a_slow_workers_push() -> None:
    # 1 unthrottled PS, 2 workers, worker 1 sleeps 100 ms before pushing: worker 0's first block of
    # every iteration sits at the PS until worker 1's push is there
    delay = 0.1
    numel, blocks = block_layout([8192] * 4, 64 * 1024)
    job = Job(1, 2, numel, blocks, (0,) * len(blocks), 6, "byteps", {}, push_delay={1: delay})
    runs = _run(job)
    samples, raw = runs[0]
    first, later = samples[samples[:, 1] == 0, 3], samples[samples[:, 1] > 0, 3]
    assert np.median(raw[raw[:, 1] == 0, 3]) > delay  # from push issue it waited for worker 1
    assert np.median(first) < 0.3 * delay, (np.median(first), np.median(later))
    # the first block is sampled like any other block of the same size (milliseconds of transport)
    assert np.median(first) < np.median(later) + 0.2 * delay
    slow, _ = runs[1]  # worker 1, the slow one, never waited: its samples are milliseconds too
    assert np.median(slow[:, 3]) < 0.3 * delay
