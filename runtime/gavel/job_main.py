"""The bundled training jobs: ``python -m clustertwin.runtime.gavel.job_main --job-type TYPE ...``.

Gavel's job families as small stand-ins (``runtime.workloads``), each a training loop written against the
job API (``runtime.job``) like any user's program: a worker agent starts it with its lease, checkpoint and
control channel in the environment (through torchrun when the job has several ranks). The options below
override the environment; with ``--report FILE`` the process trains one lease, saves, writes the lease's
report and exits (the profiler's mode). Data is a pure function of (seed, step, rank), so a job resumed
from a checkpoint at step k sees the batches it would have seen without the interruption.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from pathlib import Path

import torch
import torch.distributed as dist
from clustertwin.runtime.gavel.training_env import flush_subnormals
from clustertwin.runtime.job import Job, Session
from clustertwin.runtime.workloads import workload_for
from torch import nn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train a bundled job under the job API.")
    parser.add_argument(
        "--job-type", required=True, help="a Gavel job type, e.g. 'ResNet-18 (batch size 32)'"
    )
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--report", type=Path, help="one lease, its report written to this file")
    parser.add_argument("--max-steps", type=int)
    parser.add_argument("--max-seconds", type=float)
    parser.add_argument("--total-steps", type=int, default=100)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--slowdown", type=float)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    flush_subnormals()  # before the first operation: a step's cost must not grow as training goes on
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if args.device == "cuda" else torch.device("cpu")
    if world > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    try:
        session = Session.from_env(connect=args.report is None)
        overrides = {
            "checkpoint": args.checkpoint, "report": args.report, "lease_steps": args.max_steps,
            "lease_seconds": args.max_seconds, "slowdown": args.slowdown,
            "total_steps": args.total_steps if args.report is not None else None,
        }  # fmt: skip
        session = replace(session, **{k: v for k, v in overrides.items() if v is not None})
        workload = workload_for(args.job_type)
        torch.manual_seed(args.seed)
        model = workload.model().to(device)
        optimizer = workload.optimizer(model)
        trained: nn.Module = model
        if world > 1:
            ids = [device.index] if device.type == "cuda" else None
            trained = nn.parallel.DistributedDataParallel(model, device_ids=ids)
        job = Job(args.total_steps, {"model": model, "optimizer": optimizer}, session=session)
        rank = job.rank
        for step in job:
            inputs, targets = (t.to(device) for t in workload.batch(args.seed, step, rank))
            optimizer.zero_grad(set_to_none=True)
            workload.loss(trained, (inputs, targets)).backward()
            optimizer.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
    finally:
        if world > 1:
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
