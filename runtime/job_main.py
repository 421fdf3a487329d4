"""One lease of one job, as a process: ``python -m runtime.job_main ...`` (torchrun-compatible).

The worker agent starts this for every job it runs in a round (through torchrun when the job has several
ranks, with ``CUDA_VISIBLE_DEVICES`` naming its GPUs). Under torchrun the ranks join a process group
(gloo on CPU, NCCL on GPUs); the job trains one lease (``runtime.lease``) and rank 0 writes a JSON report
that the agent forwards to the scheduler.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict
from pathlib import Path

import torch
import torch.distributed as dist

from runtime.lease import Lease, run_lease
from runtime.workloads import workload_for


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train one lease of a job and report it.")
    parser.add_argument(
        "--job-type", required=True, help="a Gavel job type, e.g. 'ResNet-18 (batch size 32)'"
    )
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--report", type=Path, required=True)
    parser.add_argument("--max-steps", type=int, required=True)
    parser.add_argument("--max-seconds", type=float, required=True)
    parser.add_argument("--total-steps", type=int, required=True)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--slowdown", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if args.device == "cuda" else torch.device("cpu")
    if world > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    try:
        report = run_lease(
            workload_for(args.job_type),
            args.checkpoint,
            Lease(args.max_steps, args.max_seconds),
            args.total_steps,
            seed=args.seed,
            device=device,
            slowdown=args.slowdown,
        )
        if (dist.get_rank() if world > 1 else 0) == 0:
            tmp = args.report.with_name(f".{args.report.name}.tmp")
            tmp.write_text(json.dumps({**asdict(report), "throughput": report.throughput}))
            os.replace(tmp, args.report)
    finally:
        if world > 1:
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
