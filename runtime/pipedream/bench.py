"""One rank's part of the GPU benchmark (``experiments/pipedream_gpu.py``): a p2p link probe, then every
schedule on our runtime and on ``torch.distributed.pipelining``, all inside one spawned process group
so the per-configuration start-up (CUDA, NCCL) is paid once.

A schedule is measured as [Narayanan] §2.5 measures throughput: a warm-up run of ``warmup`` minibatches,
then a timed run of ``steps`` minibatches of ``microbatches`` microbatches each (PipeDream's 1F1B:
``steps · microbatches`` inputs, one update per input), barrier to barrier; the simulator is later run
on exactly the timed run's op lists (``bench_schedule``), so fill and drain count the same in both.
"""

from __future__ import annotations

import gc
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from clustertwin.policies.pipedream.ops import Schedule
from clustertwin.policies.pipedream.schedules import make_schedule, schedule_spec
from clustertwin.runtime.pipedream.distributed import StageExecutor, barrier, init_rank
from clustertwin.runtime.pipedream.probe import probe_link
from clustertwin.runtime.pipedream.torch_pipelining import bench_torch_pipelining
from clustertwin.runtime.pipedream.workload import Workload

from clustertwin.atomic import write_text

INTERLEAVE = 2  # chunks per device of the interleaved schedule


@dataclass(frozen=True)
class BenchSettings:
    """What every rank runs (picklable; the same on every rank)."""

    schedules: tuple[str, ...] = ("gpipe", "flush", "2bw", "1f1b", "interleaved")
    torch_schedules: tuple[str, ...] = ("gpipe", "flush", "interleaved")
    microbatches: int = 12  # a multiple of 2 and 4 (interleaving); GPipe on 2 GPUs stashes ~45 GB
    warmup: int = 2
    steps: int = 5
    lr: float = 1e-4
    keep_ops: str = "1f1b"  # the schedule whose op table is kept ("" for none)
    probe_bytes: tuple[int, int] = (4096, 64 << 20)
    probe_reps: int = 20


def bench_schedule(name: str, devices: int, microbatches: int, batches: int) -> Schedule:
    """The op lists of ``batches`` minibatches of schedule ``name`` on a straight pipeline."""
    return make_schedule(
        name,
        (1,) * devices,
        microbatches,
        batches,
        chunks_per_device=INTERLEAVE if schedule_spec(name).interleaves else 1,
    )


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def _save(result: dict, ops: list, rank: int, out_dir: str) -> None:
    write_text(Path(out_dir, f"rank{rank}.json"), json.dumps(result))
    if ops:
        torch.save(ops, Path(out_dir, f"ops{rank}.pt"))


def rank_main(rank: int, backend: str, workload: Workload, settings: BenchSettings, out_dir: str) -> None:
    """Entry point of one rank (``runtime.launch``); writes ``rank{rank}.json`` (and the kept op rows) to
    ``out_dir``."""
    member = init_rank(backend)
    world, device = member.world, member.device
    executor = StageExecutor(rank, world, device, workload, settings.lr)
    result: dict = {"rank": rank, "world": world, "settings": asdict(settings), "runs": []}
    if world >= 2:
        result["link"] = probe_link(executor, settings.probe_bytes, settings.probe_reps)
    m = settings.microbatches
    ops: list = []
    for name in settings.schedules:
        executor.run(bench_schedule(name, world, m, settings.warmup), fresh=True)
        timed = bench_schedule(name, world, m, settings.steps)
        record = executor.run(timed)
        samples = timed.num_microbatches * int(workload.microbatch(0, torch.device("cpu"))[0].shape[0])
        result["runs"].append(
            {
                "runtime": "ours",
                "schedule": name,
                "wall_s": record.wall_s,
                "samples": float(samples),
                "peak_bytes": record.peak_bytes,
                "busy_s": sum(r[8] - r[7] for r in record.rows),
            }
        )
        if name == settings.keep_ops:
            ops = record.rows
        executor.modules, executor.weights, executor.layout = {}, {}, None
        _free(device)
    # Our results are saved before the baseline runs, so a baseline that fails or hangs (the parent
    # kills the ranks after its time limit) does not take them down with it.
    _save(result, ops, rank, out_dir)
    for name in settings.torch_schedules:
        try:
            run = bench_torch_pipelining(
                name, rank, world, device, workload, m, settings.warmup, settings.steps, settings.lr
            )
        except Exception as err:  # e.g. an API difference in the device's torch: report, go on
            run = {"error": f"{type(err).__name__}: {err}"}
        result["runs"].append({"runtime": "torch", "schedule": name, **run})
        _save(result, [], rank, out_dir)
        _free(device)
    barrier(device)
    dist.destroy_process_group()
