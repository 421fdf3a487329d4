"""The ``torch.distributed.pipelining`` baseline on the same chunk modules as our runtime.

``PipelineStage`` wraps this rank's chunk(s) of the workload; ``ScheduleGPipe``, ``Schedule1F1B``
(which is PipeDream-Flush, [Narayanan] §3.2.2: 1F1B with a flush per minibatch) and
``ScheduleInterleaved1F1B`` (PTD-P, §4.2.2, two chunks per rank) run one minibatch of ``m``
microbatches per ``step``; gradients are averaged over the microbatches (``scale_grads``) and
``torch.optim.SGD`` (no momentum, the same update as our runtime) steps after each minibatch. Timed
like ours: warm-up steps, then synchronize + barrier around the timed window; peak memory is
``torch.cuda.max_memory_allocated`` over the window (on CPU only the weights and gradients are
counted: there is no allocator to ask).
"""

from __future__ import annotations

import time

import torch
from clustertwin.runtime.pipedream.distributed import barrier
from clustertwin.runtime.pipedream.workload import Workload
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

# Our schedule name -> torch's schedule class and chunks per rank.
TORCH_SCHEDULES = {
    "gpipe": (ScheduleGPipe, 1),
    "flush": (Schedule1F1B, 1),
    "interleaved": (ScheduleInterleaved1F1B, 2),
}


def bench_torch_pipelining(
    name: str,
    rank: int,
    world: int,
    device: torch.device,
    workload: Workload,
    microbatches: int,
    warmup_steps: int,
    steps: int,
    lr: float,
) -> dict[str, float]:
    """Train ``warmup_steps + steps`` minibatches with torch's schedule ``name`` (our naming); return
    the timed window's ``wall_s``, ``samples`` and this rank's ``peak_bytes``."""
    cls, v = TORCH_SCHEDULES[name]
    n = world * v
    ids = [rank + j * world for j in range(v)]  # rank r holds stages r, r + world, ... (PTD-P placement)
    modules = [workload.chunk(i, n, device) for i in ids]
    stages = [PipelineStage(mod, i, n, device) for mod, i in zip(modules, ids, strict=True)]
    schedule = cls(stages if v > 1 else stages[0], n_microbatches=microbatches, loss_fn=workload.loss)
    optimizer = torch.optim.SGD([p for mod in modules for p in mod.parameters()], lr=lr)
    data = [workload.microbatch(k, device) for k in range(microbatches)]
    inputs = torch.cat([x for x, _ in data]) if 0 in ids else None
    targets = torch.cat([y for _, y in data]) if n - 1 in ids else None
    batch = int(data[0][0].shape[0]) * microbatches
    del data

    def step() -> None:
        args = (inputs,) if inputs is not None else ()
        if targets is not None:
            schedule.step(*args, target=targets, losses=[])
        else:
            schedule.step(*args)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(warmup_steps):
        step()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    barrier(device)
    began = time.perf_counter()
    for _ in range(steps):
        step()
    barrier(device)
    wall = time.perf_counter() - began
    if device.type == "cuda":
        peak = float(torch.cuda.max_memory_allocated(device))
    else:
        peak = float(2 * sum(p.numel() * p.element_size() for mod in modules for p in mod.parameters()))
    return {"wall_s": wall, "samples": float(batch * steps), "peak_bytes": peak}
