"""Does a job's step get slower as it trains? Subnormal momentum and the CPU's cost of it.

    python3 experiments/subnormal_rate.py [--job-type T] [--steps 6000] [--every 500] [--keep-subnormals]

Trains one job on the CPU (one thread, as a ``cpu`` worker does) from scratch and prints, every
``--every`` steps, the throughput of those steps and how many SGD momentum elements are subnormal.
By default the process flushes subnormals to zero as every training process does
(``runtime.gavel.training_env.flush_subnormals``); ``--keep-subnormals`` leaves them, to measure what the
flush is for. Run both side by side on one machine (each on its own core) and compare.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch
from clustertwin.runtime.gavel.lease import Lease, Trainer
from clustertwin.runtime.gavel.training_env import flush_subnormals
from clustertwin.runtime.workloads import workload_for


def subnormal_momentum(trainer: Trainer) -> int:
    tiny = torch.finfo(torch.float32).tiny
    count = 0
    for state in trainer.state.optimizer.state.values():
        buffer = state["momentum_buffer"].abs()
        count += int(((buffer > 0) & (buffer < tiny)).sum())
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job-type", default="Recommendation (batch size 512)")
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--every", type=int, default=500)
    parser.add_argument("--keep-subnormals", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if not args.keep_subnormals:
        flush_subnormals()
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(workload_for(args.job_type), Path(tmp) / "never-saved.pt", args.steps)
        mode = "kept" if args.keep_subnormals else "flushed"
        while not trainer.finished:
            report = trainer.train(Lease(args.every, float("inf")))
            row = {"subnormals": mode, "step": trainer.step, "steps_per_s": round(report.throughput, 1),
                   "subnormal_momentum": subnormal_momentum(trainer)}  # fmt: skip
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
