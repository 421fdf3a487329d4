"""The worker agent: one per server, it starts the jobs the scheduler places on its devices each round.

``python -m runtime.agent --control HOST:PORT --agent ID --device cpu|cuda --slots K ...``

Each round it reads its plan, starts one job process per placed job (``runtime.job_main``; under torchrun
when the job has several ranks, with ``CUDA_VISIBLE_DEVICES`` naming its GPUs on a cuda server), waits for
them until the round's deadline plus a grace period, kills stragglers, and posts what happened. Job
processes die with their agent (Linux parent-death signal), so a killed agent leaves no orphan that could
write a checkpoint behind the scheduler's back.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from runtime.control import POLL_S, ControlPlane


def die_with_parent() -> None:
    """In a child, before exec: receive SIGKILL when the parent dies (PR_SET_PDEATHSIG)."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)


def job_command(job: dict[str, Any], device: str, slowdown: float) -> list[str]:
    args = [
        "--job-type", job["job_type"], "--checkpoint", job["checkpoint"], "--report", job["report"],
        "--max-steps", str(job["max_steps"]), "--max-seconds", str(job["max_seconds"]),
        "--total-steps", str(job["total_steps"]), "--device", device, "--slowdown", str(slowdown),
        "--seed", str(job["seed"]),
    ]  # fmt: skip
    ranks = len(job["slots"])
    if ranks == 1:
        return [sys.executable, "-m", "runtime.job_main", *args]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks)]
    return [*launcher, "-m", "runtime.job_main", *args]


def run_round(plan: dict[str, Any], opts: argparse.Namespace) -> list[dict[str, Any]]:
    """Start every job of the plan, wait for them (or kill them at the deadline), return their outcomes."""
    started = time.monotonic()
    running = []
    for job in plan["jobs"]:
        env = {**os.environ, "OMP_NUM_THREADS": str(opts.threads)}
        if opts.device == "cuda":
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(opts.cuda_devices[s]) for s in job["slots"])
        Path(job["report"]).unlink(missing_ok=True)
        process = subprocess.Popen(
            job_command(job, opts.device, opts.slowdown), env=env, preexec_fn=die_with_parent,
            stdout=subprocess.DEVNULL, stderr=open(job["report"] + ".log", "w"),  # noqa: SIM115
        )  # fmt: skip
        running.append((job, process))
    deadline = started + plan["deadline_s"]
    outcomes = []
    for job, process in running:
        try:
            code = process.wait(timeout=max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
        report_path = Path(job["report"])
        report = json.loads(report_path.read_text()) if code == 0 and report_path.is_file() else None
        outcomes.append({
            "job_id": job["job_id"], "exit": code, "elapsed_s": time.monotonic() - started, "report": report,
        })  # fmt: skip
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Run the jobs a Gavel round scheduler places on this server."
    )
    parser.add_argument("--control", required=True, help="HOST:PORT of the scheduler's store")
    parser.add_argument("--agent", required=True)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--cuda-devices", type=lambda s: [int(x) for x in s.split(",")], default=[])
    parser.add_argument("--slowdown", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=1)
    opts = parser.parse_args(argv)
    host, port = opts.control.rsplit(":", 1)
    control = ControlPlane(host, int(port), serve=False)
    control.put(f"ready/{opts.agent}", os.getpid())
    while not control.has(f"start/{opts.agent}"):
        time.sleep(POLL_S)
    round_index = control.get(f"start/{opts.agent}")
    while True:
        key = f"plan/{round_index}/{opts.agent}"
        while not control.has(key):
            time.sleep(POLL_S)
        plan = control.get(key)
        if plan.get("stop"):
            return 0
        control.put(f"done/{round_index}/{opts.agent}", run_round(plan, opts))
        round_index += 1


if __name__ == "__main__":
    raise SystemExit(main())
