"""A job's training process: ``python -m clustertwin.runtime.gavel.job_main ...`` (torchrun-compatible).

The worker agent starts this when a job is placed on its devices (through torchrun when the job has several
ranks, with ``CUDA_VISIBLE_DEVICES`` naming its GPUs). Under torchrun the ranks join a process group (gloo
on CPU, NCCL on GPUs). The first lease comes on the command line.

- With ``--report FILE`` the process trains that one lease, saves, writes its report and exits (the
  profiler's mode).
- With ``--control HOST:PORT --key PREFIX`` it holds its workers across rounds (Gavel's lease renewal,
  [Narayanan] §5.5): after each lease rank 0 posts the report at ``PREFIX/report/n`` and every rank waits for
  the scheduler's verdict at ``PREFIX/lease/n+1``: a new lease (train on from memory) or ``stop`` (save
  the checkpoint, post the saved step at ``PREFIX/saved``, exit). A job that reaches its total steps saves
  before it reports and exits by itself.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch
import torch.distributed as dist
from clustertwin.runtime.gavel.control import POLL_S, ControlPlane
from clustertwin.runtime.gavel.lease import Lease, LeaseReport, Trainer
from clustertwin.runtime.gavel.training_env import flush_subnormals
from clustertwin.runtime.workloads import workload_for

from clustertwin.atomic import write_text


def report_json(report: LeaseReport, saved: bool) -> dict:
    return {**asdict(report), "throughput": report.throughput, "saved": saved}


def serve_leases(trainer: Trainer, first: Lease, control: ControlPlane, key: str) -> None:
    """Train lease after lease until the scheduler says stop or the job is done; leave it saved."""
    lease, n = first, 0
    while True:
        report = trainer.train(lease)
        if n == 0:
            report = replace(report, load_s=trainer.load_s)
        if trainer.finished:
            report = replace(report, save_s=trainer.save())
        if trainer.rank == 0:
            control.put(f"{key}/report/{n}", report_json(report, trainer.finished))
        if trainer.finished:
            return
        n += 1
        while not control.has(f"{key}/lease/{n}"):
            time.sleep(POLL_S)
        verdict = control.get(f"{key}/lease/{n}")
        if verdict.get("stop"):
            trainer.save()
            if trainer.rank == 0:
                control.put(f"{key}/saved", trainer.saved_step)
            return
        lease = Lease(int(verdict["max_steps"]), float(verdict["max_seconds"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train a job's leases and report them.")
    parser.add_argument(
        "--job-type", required=True, help="a Gavel job type, e.g. 'ResNet-18 (batch size 32)'"
    )
    parser.add_argument("--checkpoint", type=Path, required=True)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--report", type=Path, help="one lease, its report written to this file")
    where.add_argument("--control", help="HOST:PORT of the scheduler's store: renewable leases")
    parser.add_argument("--key", help="this process's key prefix in the store (with --control)")
    parser.add_argument("--max-steps", type=int, required=True)
    parser.add_argument("--max-seconds", type=float, required=True)
    parser.add_argument("--total-steps", type=int, required=True)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--slowdown", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.control and not args.key:
        parser.error("--control needs --key")

    flush_subnormals()  # before the first operation: a step's cost must not grow as training goes on
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if args.device == "cuda" else torch.device("cpu")
    if world > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    try:
        trainer = Trainer(
            workload_for(args.job_type), args.checkpoint, args.total_steps,
            seed=args.seed, device=device, slowdown=args.slowdown,
        )  # fmt: skip
        first = Lease(args.max_steps, args.max_seconds)
        if args.control:
            host, port = args.control.rsplit(":", 1)
            serve_leases(trainer, first, ControlPlane(host, int(port), serve=False), args.key)
        else:
            report = trainer.train(first)
            report = replace(report, load_s=trainer.load_s, save_s=trainer.save())
            if trainer.rank == 0:
                write_text(args.report, json.dumps(report_json(report, True)))
    finally:
        if world > 1:
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
