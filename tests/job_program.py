"""A tiny training program written against the job API, for the runtime's tests: a linear model whose
steps are paced (``--step-s`` of sleep each), so that a busy test machine barely moves its timing."""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from clustertwin.runtime.job import Job


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--step-s", type=float, default=0.02)
    parser.add_argument("--checkpoint")
    parser.add_argument("--tag", help="ignored: lets a test find its own processes by their command line")
    args = parser.parse_args()
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    trained = torch.nn.parallel.DistributedDataParallel(model) if distributed else model
    job = Job(args.steps, {"model": model, "optimizer": optimizer}, checkpoint=args.checkpoint)
    for step in job:
        x = torch.full((2, 4), float(step % 7))
        loss = torch.nn.functional.mse_loss(trained(x), x[:, :1])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        time.sleep(args.step_s)
    print(f"done at step {job.step}", file=sys.stderr)
    if distributed:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
