"""The worker agent: one per server, it starts the jobs the scheduler places on its devices each round.

``python -m clustertwin.runtime.gavel.agent --control HOST:PORT --agent ID --device cpu|cuda --slots K ...``

Each round it reads its plan. A newly placed job gets a process (``runtime.gavel.job_main``; under torchrun
when the job has several ranks, with ``CUDA_VISIBLE_DEVICES`` naming its GPUs on a cuda server, and with
``--cores`` on its slots' cores only: ``runtime.cores``); a job whose lease the scheduler renewed keeps
the process it has, which already holds its next lease. The agent waits for every lease's report until
the round's deadline plus a grace period, kills stragglers, and posts what happened. Processes not
renewed were told by the scheduler to save and exit; the agent reaps them. Job processes die with their
agent (Linux parent-death signal), so a killed agent leaves no orphan that could write a checkpoint
behind the scheduler's back.

Processes here are not started with ``runtime.launch``: a job is a command line (``torchrun`` for a
multi-rank job, whose own c10d rendezvous and agent start the ranks), it must outlive one call (a renewed
lease keeps its process across rounds) and its end is an outcome to report, not a launch failure (a job
killed at the deadline, a retired one). The parent-death signal is the shared one.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from clustertwin.runtime.cores import parse_slots, pin_child
from clustertwin.runtime.gavel.control import POLL_S, ControlPlane
from clustertwin.runtime.gavel.training_env import training_env
from clustertwin.runtime.launch import die_with_parent

RETIRE_S = 30.0  # how long a process told to stop may take to save and exit before it is killed


def job_preexec(cores: frozenset[int] | None) -> Callable[[], None]:
    """A job process's preexec function: it dies with its agent and, given ``cores``, runs on them only
    (its threads and torchrun's ranks inherit the affinity)."""
    pin = pin_child(cores)
    if pin is None:
        return die_with_parent

    def pinned() -> None:
        die_with_parent()
        pin()

    return pinned


def job_command(job: dict[str, Any], device: str, slowdown: float, control: str) -> list[str]:
    args = [
        "--job-type", job["job_type"], "--checkpoint", job["checkpoint"], "--control", control,
        "--key", job["key"], "--max-steps", str(job["max_steps"]), "--max-seconds", str(job["max_seconds"]),
        "--total-steps", str(job["total_steps"]), "--device", device, "--slowdown", str(slowdown),
        "--seed", str(job["seed"]),
    ]  # fmt: skip
    ranks = len(job["slots"])
    if ranks == 1:
        return [sys.executable, "-m", "clustertwin.runtime.gavel.job_main", *args]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks)]
    return [*launcher, "-m", "clustertwin.runtime.gavel.job_main", *args]


class Worker:
    """The job processes of one server, kept alive across the rounds their leases are renewed."""

    def __init__(self, opts: argparse.Namespace, control: ControlPlane) -> None:
        self.opts, self.control = opts, control
        self.live: dict[str, subprocess.Popen] = {}  # by the process's key prefix

    def _start(self, job: dict[str, Any]) -> subprocess.Popen:
        opts = self.opts
        env = training_env(os.environ, threads=opts.threads)
        if opts.device == "cuda":
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(opts.cuda_devices[s]) for s in job["slots"])
        cores = None if opts.cores is None else frozenset().union(*(opts.cores[s] for s in job["slots"]))
        address = f"{self.control.host}:{self.control.port}"
        return subprocess.Popen(
            job_command(job, opts.device, opts.slowdown, address), env=env, preexec_fn=job_preexec(cores),
            stdout=subprocess.DEVNULL, stderr=open(job["log"], "a"),  # noqa: SIM115
        )  # fmt: skip

    def _retire(self, keep: set[str]) -> None:
        """Processes whose lease was not renewed were told to save and exit; make sure they are gone."""
        for key in [k for k in self.live if k not in keep]:
            process = self.live.pop(key)
            try:
                process.wait(timeout=RETIRE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def run_round(self, plan: dict[str, Any]) -> list[dict[str, Any]]:
        """Start or renew every job of the plan; wait for each lease's report (or the process's end, or the
        deadline, when it is killed); return the outcomes."""
        started = time.monotonic()
        self._retire({job["key"] for job in plan["jobs"] if job["renew"]})
        outcomes: list[dict[str, Any]] = []
        pending: dict[str, dict[str, Any]] = {}
        for job in plan["jobs"]:
            if job["renew"]:
                process = self.live.get(job["key"])
                if process is None or process.poll() is not None:  # died between rounds
                    code = None if process is None else process.returncode
                    outcomes.append({"job_id": job["job_id"], "exit": code, "elapsed_s": 0.0, "report": None})
                    self.live.pop(job["key"], None)
                    continue
            else:
                self.live[job["key"]] = self._start(job)
            pending[job["key"]] = job
        deadline = started + plan["deadline_s"]
        while pending:
            for key, job in list(pending.items()):
                process = self.live[key]
                report_key = f"{key}/report/{job['lease']}"
                report = self.control.get(report_key) if self.control.has(report_key) else None
                if report is None and process.poll() is None and time.monotonic() < deadline:
                    continue
                if report is None:  # it ended without a report, or ran past the deadline
                    process.kill()
                    process.wait()
                if report is None or report["saved"]:  # failed, or finished and exiting by itself
                    self.live.pop(key)
                    try:
                        process.wait(timeout=RETIRE_S)
                    except subprocess.TimeoutExpired:
                        process.kill()
                        process.wait()
                elapsed = time.monotonic() - started
                outcomes.append({
                    "job_id": job["job_id"], "exit": process.poll(), "elapsed_s": elapsed, "report": report,
                })  # fmt: skip
                del pending[key]
            time.sleep(POLL_S)
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
    parser.add_argument(
        "--cores", type=parse_slots, default=None,
        help="each slot's CPU cores, slots separated by commas and a slot's cores by + (0+8,1+9);"
        " a job runs on its slots' cores only (real.pin_cores). Default: wherever the OS puts it",
    )  # fmt: skip
    opts = parser.parse_args(argv)
    host, port = opts.control.rsplit(":", 1)
    control = ControlPlane(host, int(port), serve=False)
    control.put(f"ready/{opts.agent}", os.getpid())
    while not control.has(f"start/{opts.agent}"):
        time.sleep(POLL_S)
    round_index = control.get(f"start/{opts.agent}")
    worker = Worker(opts, control)
    while True:
        key = f"plan/{round_index}/{opts.agent}"
        while not control.has(key):
            time.sleep(POLL_S)
        plan = control.get(key)
        if plan.get("stop"):
            return 0
        control.put(f"done/{round_index}/{opts.agent}", worker.run_round(plan))
        round_index += 1


if __name__ == "__main__":
    raise SystemExit(main())
