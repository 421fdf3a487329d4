"""Workers stay blocked through a re-sharding's migration ([PSLD] §5: prepare, block, migrate, resume).

Two PSs, two workers, vanilla mode: every block starts on PS 1, whose emulated NIC is capped at 8 MB/s,
and a fixed plan moves them all to the unthrottled PS 0 at k* = 2, so PS 1 sends 4 MiB of parameters and
momentum at 8 MB/s: a migration of about 0.5 s. Iteration k* runs on PS 0 alone, whose blocks take a few
ms. Had the workers been released at PREPARE (the runtime's old protocol), they would have pushed while
PS 0 was still receiving the migration, and every sample of iteration k* would hold most of it.
"""

from __future__ import annotations

import torch.distributed as dist
from clustertwin.runtime.launch import join, launch, report
from clustertwin.runtime.psld.ps import Job, ServerStats, block_layout, reference, run_server, run_worker

RATE = 8e6  # bytes/s of PS 1's emulated NIC, each direction
K_STAR = 2


def _rank(rank: int, job: Job) -> None:
    join()
    try:
        if rank < job.ps_ranks:
            stats = ServerStats()
            run_server(rank, job, None, stats)
            report((rank, stats.migration_s))
        else:
            params, samples = run_worker(rank, job)
            report((rank, (params.numpy().tobytes(), [(s.server, s.seconds) for s in samples])))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_samples_after_reassignment_hold_no_migration() -> None:
    numel, blocks = block_layout([65536] * 4, 512 * 1024)
    n = len(blocks)
    job = Job(2, 2, numel, blocks, (1,) * n, 5, "vanilla", {K_STAR: (0,) * n}, throttle={1: RATE})
    out = dict(launch(_rank, 4, (job,), limit_s=50.0, expected=4))
    state_bytes = 2 * sum(b.nbytes for b in blocks)  # parameters and momentum
    (k, migration_s), *_ = out[1]
    assert k == K_STAR and migration_s >= 0.9 * state_bytes / RATE, migration_s
    for w in range(job.workers):
        params, samples = out[job.ps_ranks + w]
        first = samples[K_STAR * n : (K_STAR + 1) * n]  # iteration k*: every block on PS 0
        assert {server for server, _ in first} == {0}
        # a released worker's samples would each hold most of the ~0.5 s migration
        assert max(seconds for _, seconds in first) < 0.2 * migration_s, (first, migration_s)
        assert params == reference(job).numpy().tobytes()
