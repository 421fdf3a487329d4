"""Gavel for real: the shared round scheduler driving real training jobs on wall-clock rounds.

The decisions are the very ``policies.gavel.GavelScheduler`` the simulator drives; this module only keeps
wall-clock time, starts one agent per server (``runtime.agent``), publishes each round's placements through
the control plane, and turns what the agents report into the same event tables the simulator writes.

What a round credits is what the job's checkpoint holds: a job that fails or whose agent dies has made no
progress past its last checkpoint, so a killed job is rescheduled from there in a later round and no
finished step is counted twice or lost. Measured throughputs feed the policy, smoothed (as Gavel does).

Every round restarts each job's process (checkpoint load and save included); lease renewal that keeps a
process alive across rounds is not implemented yet, so the simulator of a real run charges the measured
overhead every round (``mechanism.overhead_model: every_round``). The scheduler learns each worker type's
real overhead as it goes and shortens leases by it, so that rounds keep their length.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from policies.gavel.cluster import ClusterLayout
from policies.gavel.scheduler import GavelScheduler, SchedulerConfig
from policies.registry import make_policy
from runtime.agent import die_with_parent
from runtime.control import ControlPlane
from scenarios.errors import InputError
from scenarios.gavel_workload import GavelJob, cluster_layout, gavel_jobs, jobs_table, load_table, trace_jobs
from scenarios.results import GAVEL_TABLES, RunResult
from scenarios.schema import Scenario

THROUGHPUT_SMOOTHING = 0.5  # EMA weight of a new measurement (Gavel's artifact uses 0.5)
AGENT_START_S = 120.0


class Agent:
    def __init__(self, name: str, worker_type: int, server: int, args: list[str]) -> None:
        self.name, self.worker_type, self.server, self.args = name, worker_type, server, args
        self.process: subprocess.Popen | None = None

    def start(self, control: ControlPlane) -> None:
        command = [sys.executable, "-m", "runtime.agent", "--control", f"{control.host}:{control.port}"]
        self.process = subprocess.Popen(
            [*command, "--agent", self.name, *self.args], preexec_fn=die_with_parent
        )


class RealGavel:
    def __init__(
        self, scenario: Scenario, workdir: Path, progress=None, snapshot_dir: Path | None = None
    ) -> None:
        """``snapshot_dir``: where the event tables so far are rewritten after every round, so that a run
        killed part-way keeps what it finished (the final, complete folder is written by the caller)."""
        if scenario.real is None:
            raise InputError(f"{scenario.source}: field real", "the real backend needs a `real:` section")
        self.scenario, self.workdir, self.progress = scenario, workdir, progress
        self.snapshot_dir = snapshot_dir
        table = load_table(scenario)
        self.layout: ClusterLayout = cluster_layout(scenario, table)
        jobs, origin = trace_jobs(scenario, table)
        self.jobs: list[GavelJob] = gavel_jobs(scenario, table, self.layout, jobs, origin)
        self._check_fits(origin)
        policy = make_policy(scenario.policy.name, **scenario.policy.params)
        if getattr(policy, "space_sharing", False):
            raise InputError(
                f"{scenario.source}: field policy", "space sharing is not supported for real yet"
            )
        m = scenario.mechanism
        self.scheduler = GavelScheduler(
            self.layout, policy, np.random.default_rng(scenario.seed),
            SchedulerConfig(m.round_s, m.min_reset_interval_s),
        )  # fmt: skip
        self.agents = self._agents()
        self.round_rows: list[tuple] = []
        self.event_rows: list[tuple] = []
        self.completion: dict[int, float] = {}
        self.first_start: dict[int, float] = {}
        self.known_step: dict[int, int] = {j.spec.job_id: 0 for j in self.jobs}
        # What a round really loses per worker type (start-up, load, save), learned from the leases that
        # ran their full time, so that a lease plus its overhead fills the round as the simulator assumes.
        self.overhead: dict[str, float] = {t: scenario.overhead_s(t) for t in self.layout.worker_types}

    # --- set-up -------------------------------------------------------------------------------------

    def _check_fits(self, origin: str) -> None:
        """A job runs inside one server for real (no cross-agent rendezvous yet)."""
        for job in self.jobs:
            fits = [
                job.spec.throughputs[j] > 0 and job.spec.scale_factor <= self.layout.gpus_per_server[j]
                for j in range(len(self.layout.worker_types))
            ]
            if not any(fits):
                raise InputError(
                    f"{origin} (job {job.spec.job_id})",
                    f"needs {job.spec.scale_factor} GPUs on one server; servers hold "
                    f"{dict(zip(self.layout.worker_types, self.layout.gpus_per_server, strict=True))}",
                )

    def _agents(self) -> list[Agent]:
        agents = []
        real = self.scenario.real
        assert real is not None
        for j, name in enumerate(self.layout.worker_types):
            worker = real.workers[name]
            k = self.layout.gpus_per_server[j]
            for server in range(-(-self.layout.gpus[j] // k)):
                args = ["--device", worker.device, "--slowdown", str(worker.slowdown)]
                args += ["--threads", str(real.threads_per_cpu_worker)]
                if worker.device == "cuda":
                    assert worker.cuda_devices is not None
                    ids = worker.cuda_devices[server * k : (server + 1) * k]
                    args += ["--cuda-devices", ",".join(str(i) for i in ids)]
                agents.append(Agent(f"{name}-{server}", j, server, args))
        return agents

    # --- the round loop -----------------------------------------------------------------------------

    def run(self) -> RunResult:
        started = time.perf_counter()
        (self.workdir / "checkpoints").mkdir(parents=True, exist_ok=True)
        (self.workdir / "reports").mkdir(parents=True, exist_ok=True)
        self.control = ControlPlane("127.0.0.1", 0, serve=True)
        for agent in self.agents:
            agent.start(self.control)
        try:
            self._wait_ready(self.agents, 0)
            self.t0 = time.monotonic()
            self._loop()
        finally:
            self._stop_agents()
        return RunResult(
            tables=self._tables(), info={"wall_s": time.perf_counter() - started, "backend": "real"}
        )

    def now(self) -> float:
        return time.monotonic() - self.t0

    def _loop(self) -> None:
        sched = self.scheduler
        pending = sorted(self.jobs, key=lambda j: (j.spec.arrival_s, j.spec.job_id))
        scale = self.scenario.real.time_scale if self.scenario.real else 1.0
        round_index = 0
        while len(self.completion) < len(self.jobs):
            while pending and pending[0].spec.arrival_s / scale <= self.now():
                job = pending.pop(0)
                sched.add_job(replace(job.spec, arrival_s=job.spec.arrival_s / scale))
                self.event_rows.append((self.now(), "admit", job.spec.job_id, job.spec.job_type))
            if sched.reset_due(self.now()):
                sched.reset(self.now())
                self.event_rows.append((self.now(), "reset", -1, f"{len(sched.jobs)} jobs"))
            plan = sched.next_round() if sched.jobs else None
            if plan is None or not len(plan):
                wake = [p.spec.arrival_s / scale for p in pending[:1]]
                if sched.next_reset_s() is not None:
                    wake.append(sched.next_reset_s())
                time.sleep(max(min(wake, default=self.now() + 1.0) - self.now(), 0.01))
                continue
            self._run_round(round_index, plan)
            round_index += 1
            if self.snapshot_dir is not None:
                self._snapshot()
            if self.progress is not None:
                self.progress(len(self.completion) / len(self.jobs), f"round {round_index}")

    def _run_round(self, r: int, plan) -> None:
        m = self.scenario.mechanism
        real = self.scenario.real
        assert real is not None
        by_id = {j.spec.job_id: j for j in self.jobs}
        per_agent: dict[str, list[dict]] = {a.name: [] for a in self.agents}
        entries = []
        for i, (key, j, gpus) in enumerate(zip(plan.job_ids, plan.worker_types, plan.gpus, strict=True)):
            job_id = key[0]
            k = self.layout.gpus_per_server[int(j)]
            server = gpus[0] // k
            agent = next(a for a in self.agents if a.worker_type == int(j) and a.server == server)
            spec = by_id[job_id].spec
            per_agent[agent.name].append({
                "job_id": job_id, "job_type": spec.job_type, "slots": [g - server * k for g in gpus],
                "max_steps": int(spec.total_steps) - self.known_step[job_id],
                "max_seconds": max(m.round_s - self.overhead[self.layout.worker_types[j]], 1.0),
                "total_steps": int(spec.total_steps), "seed": self.scenario.seed,
                "checkpoint": str(self.workdir / "checkpoints" / f"job{job_id}.pt"),
                "report": str(self.workdir / "reports" / f"job{job_id}.json"),
            })  # fmt: skip
            entries.append((i, job_id, int(j), len(gpus), bool(plan.consolidated[i])))
        start = self.now()
        for agent in self.agents:
            self.control.put(
                f"plan/{r}/{agent.name}",
                {"jobs": per_agent[agent.name], "deadline_s": m.round_s + real.grace_s},
            )
        deadline = time.monotonic() + m.round_s + real.grace_s + 10.0
        keys = {f"done/{r}/{a.name}": a for a in self.agents}
        done = self.control.wait_for(list(keys), deadline)
        outcomes = {}
        for key, agent in keys.items():
            if key not in done:
                self.event_rows.append((self.now(), "agent_lost", -1, agent.name))
                self._restart(agent, r + 1)
                continue
            for outcome in done[key]:
                outcomes[outcome["job_id"]] = outcome
        end = self.now()
        seconds = np.zeros(len(plan))
        steps: dict[int, float] = {}
        finished: list[tuple[float, int]] = []
        for i, job_id, j, num_gpus, consolidated in entries:
            outcome = outcomes.get(job_id)
            report = outcome["report"] if outcome else None
            made = 0
            job_end = end
            if report is None:
                detail = "no report" if outcome is None else f"exit {outcome['exit']}"
                self.event_rows.append((end, "job_failed", job_id, detail))
            else:
                made = int(report["end_step"]) - self.known_step[job_id]
                self.known_step[job_id] = int(report["end_step"])
                job_end = start + float(outcome["elapsed_s"])
                if report["seconds"] > 0 and report["end_step"] > report["start_step"]:
                    self.scheduler.observe_throughput(job_id, j, report["throughput"], THROUGHPUT_SMOOTHING)
                if report["end_step"] < by_id[job_id].spec.total_steps:  # the lease ran its full time
                    lost = float(outcome["elapsed_s"]) - float(report["seconds"])
                    name = self.layout.worker_types[j]
                    self.overhead[name] += THROUGHPUT_SMOOTHING * (lost - self.overhead[name])
            self.first_start.setdefault(job_id, start)
            seconds[i] = job_end - start
            steps[job_id] = float(made)
            name = self.layout.worker_types[j]
            self.round_rows.append(
                (r, start, job_end, job_id, name, num_gpus, consolidated, False, float(made), -1)
            )
            if self.known_step[job_id] >= by_id[job_id].spec.total_steps:
                finished.append((job_end, job_id))
        self.scheduler.record_round(plan, seconds, steps, end - start)
        for t, job_id in sorted(finished):
            self.completion[job_id] = t
            self.scheduler.remove_job(job_id)
            self.event_rows.append((t, "complete", job_id, ""))

    # --- agents -------------------------------------------------------------------------------------

    def _wait_ready(self, agents: list[Agent], first_round: int) -> None:
        keys = [f"ready/{a.name}" for a in agents]
        found = self.control.wait_for(keys, time.monotonic() + AGENT_START_S)
        if len(found) < len(keys):
            missing = [a.name for a in agents if f"ready/{a.name}" not in found]
            raise RuntimeError(f"worker agents did not start: {', '.join(missing)}")
        for agent in agents:
            self.control.put(f"start/{agent.name}", first_round)

    def _restart(self, agent: Agent, first_round: int) -> None:
        """A lost agent (a dead node) comes back for the next round, as a replaced machine would."""
        if agent.process is not None and agent.process.poll() is None:
            agent.process.kill()
            agent.process.wait()
        self.control.store.delete_key(f"ready/{agent.name}")
        self.control.store.delete_key(f"start/{agent.name}")
        agent.start(self.control)
        self._wait_ready([agent], first_round)

    def _stop_agents(self) -> None:
        for agent in self.agents:
            if agent.process is None:
                continue
            for r in range(10_000):
                if not self.control.has(f"plan/{r}/{agent.name}"):
                    self.control.put(f"plan/{r}/{agent.name}", {"stop": True})
                    break
        for agent in self.agents:
            if agent.process is None:
                continue
            try:
                agent.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(agent.process.pid, signal.SIGKILL)
                agent.process.wait()

    # --- tables -------------------------------------------------------------------------------------

    def _snapshot(self) -> None:
        assert self.snapshot_dir is not None
        self.snapshot_dir.mkdir(parents=True, exist_ok=True)
        for name, table in self._tables().items():
            tmp = self.snapshot_dir / f".{name}.parquet.tmp"
            table.to_parquet(tmp, index=False)
            os.replace(tmp, self.snapshot_dir / f"{name}.parquet")

    def _tables(self) -> dict[str, pd.DataFrame]:
        scale = self.scenario.real.time_scale if self.scenario.real else 1.0
        jobs = jobs_table(self.jobs, self.first_start, self.completion, self.known_step, scale)
        rounds = pd.DataFrame(self.round_rows, columns=list(GAVEL_TABLES["rounds"]))
        events = pd.DataFrame(self.event_rows, columns=list(GAVEL_TABLES["events"]))
        rounds, events = rounds.astype(GAVEL_TABLES["rounds"]), events.astype(GAVEL_TABLES["events"])
        return {"jobs": jobs, "rounds": rounds, "events": events}


def run(
    scenario: Scenario, progress=None, workdir: Path | None = None, snapshot_dir: Path | None = None
) -> RunResult:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="clustertwin-real-") as tmp:
        return RealGavel(scenario, workdir or Path(tmp), progress, snapshot_dir).run()
