"""One rank of a ``kind: pipedream`` real run: probe the link, then for each of the run's plans (the
scenario's, and the data-parallel baseline when asked) a probe of its replicated chunks' gradient
synchronisation and of its chunks' compute, alone and beside NCCL traffic (``runtime.pipedream.probe``),
an untimed warm-up of the plan's schedule, a timed run,
and on CPU a memory run.

Every rank executes its worker's op list of the very schedule the simulator executes
(``runtime.pipedream.distributed.StageExecutor``). The timed run's wall time is barrier to barrier.
Peak memory on CUDA is ``max_memory_allocated`` over the timed run; on CPU, which keeps no allocator
statistics, one more run of the same schedule is recorded by ``torch.profiler`` and its allocations
replayed (``runtime.pipedream.memtrace``): the weights held when it starts plus the peak of the running
sum.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass

import torch
import torch.distributed as dist
from clustertwin.policies.pipedream.ops import Schedule
from clustertwin.runtime.launch import report
from clustertwin.runtime.pipedream.distributed import StageExecutor, barrier, init_rank
from clustertwin.runtime.pipedream.memtrace import allocations
from clustertwin.runtime.pipedream.probe import probe_compute, probe_link, probe_sync
from clustertwin.runtime.pipedream.workload import Workload

# (small, large) message bytes and timed repetitions of the point-to-point probe: on NVLink a large
# message must take far longer than the latency for the difference to be a bandwidth; gloo on loopback
# needs fewer repetitions (a CPU run is short).
LINK_PROBE = {"cuda": ((4096, 64 << 20), 10), "cpu": ((4096, 16 << 20), 3)}
SYNC_REPS = 5  # timed repetitions of each replicated chunk's gradient synchronisation (the median)
COMPUTE_REPS = 5  # timed forward-backward pairs of each chunk per condition (the median)


@dataclass(frozen=True)
class RealPlan:
    """One plan to run: its name ("plan", "ddp"), workload (the chain cut into its stages) and the
    schedules of the warm-up (None: none) and of the timed run."""

    name: str
    workload: Workload
    warmup: Schedule | None
    timed: Schedule


def _allocated_peak(executor: StageExecutor, schedule: Schedule) -> float:
    """Peak bytes of one more run of ``schedule`` on CPU: weights held at its start plus the peak of the
    replayed allocations (see the module docstring)."""
    held = sum(t.numel() * t.element_size() for p in executor.weights.values() for t in p.values())
    barrier(executor.device)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
    ) as prof:
        executor.run(schedule)
    total = peak = 0
    for _, nbytes in allocations(prof):
        total += nbytes
        peak = max(peak, total)
    return float(held + peak)


def rank_main(rank: int, backend: str, plans: list[RealPlan], lr: float) -> None:
    """Entry point of one rank (``runtime.launch``); reports one dict per plan, plus the link probe."""
    member = init_rank(backend)
    device = member.device
    executor = StageExecutor(rank, member.world, device, plans[0].workload, lr)
    if member.world >= 2:
        link = probe_link(executor, *LINK_PROBE[device.type])
        report({"rank": rank, "link": link})
    for plan in plans:
        executor.workload = plan.workload
        executor.layout = None  # a new workload: build its chunks afresh
        sync = probe_sync(executor, plan.timed, SYNC_REPS)
        compute = probe_compute(executor, plan.timed, COMPUTE_REPS)
        if plan.warmup is not None:
            executor.run(plan.warmup)
        record = executor.run(plan.timed)
        peak = record.peak_bytes if device.type == "cuda" else _allocated_peak(executor, plan.timed)
        report(
            {
                "rank": rank,
                "plan": plan.name,
                "rows": record.rows,
                "wall_s": record.wall_s,
                "peak_bytes": peak,
                "sync": sync,
                "compute": compute,
            }
        )
        executor.modules, executor.weights, executor.layout = {}, {}, None
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    barrier(device)
    dist.destroy_process_group()
