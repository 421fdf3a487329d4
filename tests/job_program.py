"""A tiny training program written against the job API, for the runtime's tests: a linear model whose
steps are paced (``--step-s`` of sleep each), so that a busy test machine barely moves its timing."""

from __future__ import annotations

import argparse
import sys
import time

import torch
from clustertwin.runtime.job import Job


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--step-s", type=float, default=0.02)
    parser.add_argument("--checkpoint")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    job = Job(args.steps, {"model": model, "optimizer": optimizer}, checkpoint=args.checkpoint)
    for step in job:
        x = torch.full((2, 4), float(step % 7))
        loss = torch.nn.functional.mse_loss(model(x), x[:, :1])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        time.sleep(args.step_s)
    print(f"done at step {job.step}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
