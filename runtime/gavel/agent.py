"""The worker agent: one per server, it runs the jobs the scheduler places on its devices each round.

``clustertwin agent --scheduler HOST:PORT --type NAME --devices N|cuda:I,J,...`` on each machine (the
scheduler starts them itself on its own machine when the scenario says ``real.agents: local``). The shared
secret comes from ``CLUSTERTWIN_SECRET`` or ``--secret-file``, never from the command line; without it, or
with a wrong one, the scheduler does not hear the agent (``runtime.gavel.control``).

The agent offers its worker type and devices; the scheduler answers with its name and how its type runs
(device, slowdown, threads), or with why it is not needed. It then reads the job catalog, the commands of
the scenario's jobs: a plan names jobs by id, so the agent starts no command the scenario does not define.

Each round it reads its plan. A newly placed job gets a process: its command in its working directory, with
the lease, checkpoint and control channel in its environment (``runtime.job``); a command that starts with
``python`` runs under the agent's own interpreter, through torchrun when the job has several ranks
(standalone on one server; across servers with torchrun's c10d rendezvous, hosted by the job's first
agent). A job whose lease the scheduler renewed keeps the process it has, which already holds its next
lease. The agent waits for every lease's report until the round's deadline plus a grace period, kills
stragglers, and posts what happened. Processes not renewed were told by the scheduler to save and exit;
the agent reaps them. Job processes die with their agent (Linux parent-death signal), so a killed agent
leaves no orphan that could write a checkpoint behind the scheduler's back.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clustertwin.runtime.cores import parse_slots, pin_child
from clustertwin.runtime.gavel.control import (
    POLL_S,
    SECRET_ENV,
    ControlClient,
    Refused,
    job_token,
    read_secret,
)
from clustertwin.runtime.gavel.training_env import training_env
from clustertwin.runtime.launch import die_with_parent

RETIRE_S = 30.0  # how long a process told to stop may take to save and exit before it is killed
BUILTIN = "clustertwin.runtime.gavel.job_main"


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


def is_python(argv: list[str]) -> bool:
    return bool(argv) and Path(argv[0]).name in ("python", "python3")


def job_command(
    entry: dict[str, Any], ranks: int, device: str, seed: int, rendezvous: list[str] | None = None
) -> list[str]:
    """The command line of a job's process on this server: ``ranks`` local ranks; ``rendezvous`` the
    torchrun options of a job spanning servers."""
    if "builtin" in entry:
        argv = [
            "python",
            "-m",
            BUILTIN,
            "--job-type",
            entry["builtin"],
            "--device",
            device,
            "--seed",
            str(seed),
        ]
    else:
        argv = list(entry["command"])
    if not is_python(argv):
        return argv
    if ranks == 1 and rendezvous is None:
        return [sys.executable, *argv[1:]]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks)]
    launcher += rendezvous if rendezvous is not None else ["--standalone"]
    return [*launcher, *argv[1:]]


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _tail(path: str, limit: int = 300) -> str:
    """The log's last non-empty line: why a job failed, in its own words."""
    try:
        lines = [line for line in Path(path).read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][-limit:] if lines else ""


class Worker:
    """The job processes of one server, kept alive across the rounds their leases are renewed."""

    def __init__(self, settings: dict[str, Any], opts: argparse.Namespace, control: ControlClient) -> None:
        self.settings, self.opts, self.control = settings, opts, control
        self.secret: bytes = opts.secret
        self.catalog: dict[str, dict[str, Any]] = control.get("catalog")
        self.live: dict[str, subprocess.Popen] = {}  # by the process's key prefix

    def _environment(self, job: dict[str, Any], entry: dict[str, Any]) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if k != SECRET_ENV}  # the secret stays with the agent
        env = training_env({**base, **entry.get("env", {})}, threads=self.settings["threads"])
        env.update({
            "CLUSTERTWIN_CONTROL": self.control.address, "CLUSTERTWIN_JOB_KEY": job["key"],
            "CLUSTERTWIN_JOB_TOKEN": job_token(self.secret, job["key"]).decode(),
            "CLUSTERTWIN_CHECKPOINT": job["checkpoint"], "CLUSTERTWIN_TOTAL_STEPS": str(job["total_steps"]),
            "CLUSTERTWIN_LEASE_STEPS": str(job["max_steps"]),
            "CLUSTERTWIN_LEASE_SECONDS": repr(float(job["max_seconds"])),
            "CLUSTERTWIN_SLOWDOWN": repr(float(self.settings["slowdown"])),
            "CLUSTERTWIN_DEVICE": self.settings["device"],
        })  # fmt: skip
        # A CPU worker type has no GPU: a program that takes one when it sees one must not see any.
        slots = job["slots"] if self.settings["device"] == "cuda" else []
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(self.opts.cuda_devices[s]) for s in slots)
        return env

    def _rendezvous(self, job: dict[str, Any], deadline: float) -> list[str] | None:
        """torchrun's options for a job spanning servers; the first of its agents hosts the store."""
        nodes = job.get("nodes", [self.settings["name"]])
        if len(nodes) == 1:
            return None
        key = f"rdzv/{job['key']}"
        host = nodes[0] == self.settings["name"]
        if host:
            self.control.put(key, f"{self.opts.address}:{_free_port(self.opts.address)}")
        endpoint = self.control.wait_for([key], deadline).get(key)
        if endpoint is None:
            raise TimeoutError(f"the first agent of job {job['job_id']} gave no rendezvous endpoint")
        return [
            "--nnodes", str(len(nodes)), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
            "--rdzv-id", job["key"].replace("/", "-"), "--rdzv-conf", f"is_host={'1' if host else '0'}",
            "--local-addr", self.opts.address, "--max-restarts", "0",
        ]  # fmt: skip

    def _start(self, job: dict[str, Any], deadline: float) -> subprocess.Popen:
        entry = self.catalog.get(str(job["job_id"]))
        if entry is None:  # only the scheduler writes plans; still, nothing outside the catalog runs
            raise PermissionError(f"job {job['job_id']} is not in the scenario's catalog")
        opts = self.opts
        cores = None if opts.cores is None else frozenset().union(*(opts.cores[s] for s in job["slots"]))
        command = job_command(
            entry, len(job["slots"]), self.settings["device"], job["seed"], self._rendezvous(job, deadline)
        )
        for path in (job["log"], job["checkpoint"]):
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(job["log"], "a") as log:
            return subprocess.Popen(
                command, cwd=entry.get("cwd"), env=self._environment(job, entry),
                preexec_fn=job_preexec(cores), stdout=log, stderr=subprocess.STDOUT,
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

    def stop_all(self) -> None:
        for process in self.live.values():
            process.kill()
            process.wait()
        self.live.clear()

    def run_round(self, plan: dict[str, Any]) -> list[dict[str, Any]]:
        """Start or renew every job of the plan; wait for each lease's report (or the process's end, or the
        deadline, when it is killed); return the outcomes."""
        started = time.monotonic()
        deadline = started + plan["deadline_s"]
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
                try:
                    self.live[job["key"]] = self._start(job, deadline)
                except (OSError, PermissionError, TimeoutError, ValueError) as err:
                    outcomes.append({
                        "job_id": job["job_id"], "exit": None, "elapsed_s": 0.0, "report": None,
                        "error": f"could not start: {err}",
                    })  # fmt: skip
                    continue
            pending[job["key"]] = job
        while pending:
            for key, job in list(pending.items()):
                process = self.live[key]
                report_key = f"{key}/report/{job['lease']}"
                report = self.control.get(report_key) if self.control.has(report_key) else None
                if report is None and process.poll() is None and time.monotonic() < deadline:
                    continue
                killed = report is None and process.poll() is None
                if killed:  # it ran past the deadline without a report
                    process.kill()
                    process.wait()
                if report is None or report["saved"]:  # failed, or finished and exiting by itself
                    self.live.pop(key)
                    try:
                        process.wait(timeout=RETIRE_S)
                    except subprocess.TimeoutExpired:
                        process.kill()
                        process.wait()
                outcome = {
                    "job_id": job["job_id"], "exit": process.poll(), "report": report,
                    "elapsed_s": time.monotonic() - started,
                }  # fmt: skip
                if killed:
                    outcome["killed"] = True
                elif report is None:
                    outcome["error"] = _tail(job["log"])
                outcomes.append(outcome)
                del pending[key]
            time.sleep(POLL_S)
        return outcomes


def parse_devices(text: str) -> tuple[int, list[int]]:
    """``N`` (N CPU worker slots) or ``cuda:0,1`` (those CUDA devices): the slot count and CUDA ids."""
    if text.startswith("cuda:"):
        ids = [int(x) for x in text[5:].split(",") if x.strip()]
        if not ids:
            raise argparse.ArgumentTypeError(f"no CUDA device ids in {text!r}")
        return len(ids), ids
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or cuda:I,J,...; got {text!r}") from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"need at least one device, got {count}")
    return count, []


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scheduler", required=True, metavar="HOST:PORT", help="the scheduler's address")
    parser.add_argument("--type", required=True, help="this server's worker type (a type of cluster.gpus)")
    parser.add_argument(
        "--devices", required=True, type=parse_devices, metavar="N|cuda:I,J",
        help="N CPU worker slots, or the CUDA device ids this server offers",
    )  # fmt: skip
    parser.add_argument(
        "--address", help="this machine's address as other machines reach it (torchrun's rendezvous of"
        " jobs spanning servers; default: 127.0.0.1 for a loopback scheduler, else the host name)",
    )  # fmt: skip
    parser.add_argument(
        "--secret-file", type=Path, help=f"file holding the run's shared secret (default: ${SECRET_ENV})"
    )
    parser.add_argument(
        "--cores", type=parse_slots, default=None,
        help="each slot's CPU cores, slots separated by commas and a slot's cores by + (0+8,1+9);"
        " a job runs on its slots' cores only (real.pin_cores). Default: wherever the OS puts it",
    )  # fmt: skip
    parser.add_argument(
        "--wait", type=float, default=120.0, help="seconds to wait for the scheduler (default: 120)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Run the jobs a Gavel round scheduler places on this server."
    )
    add_arguments(parser)
    return serve(parser.parse_args(argv))


def serve(opts: argparse.Namespace) -> int:
    """Offer this server to the scheduler and run its rounds until it says stop."""
    slots, opts.cuda_devices = opts.devices
    try:
        opts.secret = read_secret(os.environ, opts.secret_file)
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if opts.secret is None:
        print(f"error: no shared secret: set {SECRET_ENV} or give --secret-file", file=sys.stderr)
        return 2
    host = opts.scheduler.rsplit(":", 1)[0]
    if opts.address is None:
        opts.address = "127.0.0.1" if host.startswith("127.") or host == "localhost" else socket.gethostname()
    try:
        control = ControlClient(opts.scheduler, opts.secret, connect_s=opts.wait)
    except ConnectionError as err:  # Refused included
        print(f"error: {err}", file=sys.stderr)
        return 2
    me = uuid.uuid4().hex
    control.put(f"hello/{me}", {"type": opts.type, "slots": slots, "cuda": bool(opts.cuda_devices),
                                "address": opts.address, "pid": os.getpid()})  # fmt: skip
    welcome = control.wait_for([f"welcome/{me}"], time.monotonic() + opts.wait).get(f"welcome/{me}")
    if welcome is None or "error" in welcome:
        why = "the scheduler did not answer" if welcome is None else welcome["error"]
        print(f"error: agent {opts.type} ({slots} devices): {why}", file=sys.stderr)
        return 2
    name = welcome["name"]
    control.put(f"ready/{name}", os.getpid())
    worker = Worker(welcome, opts, control)
    try:
        while not control.has(f"start/{name}"):
            time.sleep(POLL_S)
        round_index = control.get(f"start/{name}")
        while True:
            key = f"plan/{round_index}/{name}"
            while not control.has(key):
                time.sleep(POLL_S)
            plan = control.get(key)
            if plan.get("stop"):
                return 0
            control.put(f"done/{round_index}/{name}", worker.run_round(plan))
            round_index += 1
    except (ConnectionError, Refused) as err:
        print(f"error: agent {name}: {err}; its jobs are stopped", file=sys.stderr)
        return 1
    finally:
        worker.stop_all()


if __name__ == "__main__":
    raise SystemExit(main())
