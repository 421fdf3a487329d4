"""Ground-truth peak memory of the executor on CPU, from the allocator itself (for tests).

On CUDA the benchmark reads ``torch.cuda.max_memory_allocated``. CPU has no allocator statistics, and
the executor's own CPU figure only adds up the tensors its tables name (weights, gradients, stashed
inputs and outputs, messages), so it cannot see what else is alive: autograd's saved tensors, or a
weight version kept by a stray reference. Here every CPU allocation and free of a whole fresh run
(module construction included) is recorded by ``torch.profiler`` (``profile_memory``) and replayed in
order; the peak of the running sum is what ``max_memory_allocated`` would report, minus the CUDA
caching allocator's 512-byte rounding.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
from clustertwin.policies.pipedream.ops import Schedule
from clustertwin.runtime.launch import launch
from clustertwin.runtime.pipedream.distributed import StageExecutor, barrier, init_rank
from clustertwin.runtime.pipedream.workload import Workload


def allocations(prof: torch.profiler.profile) -> list[tuple[int, int]]:
    """(time ns, signed bytes) of every allocator event of ``prof``, in time order."""
    out: list[tuple[int, int]] = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())  # type: ignore[union-attr]
    while stack:
        node = stack.pop()
        if node.tag == torch._C._profiler._EventType.Allocation:
            out.append((node.start_time_ns, node.extra_fields.alloc_size))
        stack.extend(node.children)
    out.sort()
    return out


def _rank(rank: int, schedules: list[Schedule], workload: Workload, lr: float, tmp: str) -> None:
    member = init_rank("gloo")
    device = member.device
    executor = StageExecutor(rank, member.world, device, workload, lr)
    peaks = []
    for schedule in schedules:
        barrier(device)
        activity = [torch.profiler.ProfilerActivity.CPU]
        with torch.profiler.profile(activities=activity, profile_memory=True) as prof:
            executor.run(schedule, fresh=True)
            executor.modules, executor.weights, executor.layout = {}, {}, None
        total = peak = 0
        for _, nbytes in allocations(prof):
            total += nbytes
            peak = max(peak, total)
        peaks.append(float(peak))
    torch.save(peaks, Path(tmp, f"peaks{rank}.pt"))
    barrier(device)
    dist.destroy_process_group()


def allocated_peaks(schedules: list[Schedule], workload: Workload, lr: float = 0.01) -> list[list[float]]:
    """Per schedule, per rank: the peak bytes allocated during one fresh run on CPU (gloo)."""
    world = len(schedules[0].workers)
    with tempfile.TemporaryDirectory(prefix="pipedream-mem-") as tmp:
        launch(_rank, world, (schedules, workload, lr, tmp))
        per_rank = [torch.load(Path(tmp, f"peaks{r}.pt")) for r in range(world)]
    return [[per_rank[r][i] for r in range(world)] for i in range(len(schedules))]
