"""Gavel for real: the shared round scheduler driving real training jobs on wall-clock rounds.

The decisions are the very ``policies.gavel.GavelScheduler`` the simulator drives; this module only keeps
wall-clock time, starts one agent per server (``runtime.gavel.agent``), publishes each round's placements via
the control plane, and turns what the agents report into the same event tables the simulator writes.

Leases are renewed as in Gavel ([Narayanan] §5.5), exactly where the round plan says so (the simulator
executes the same renewed set): a renewed job keeps its process, which trains on from memory; every other
live process is told to save its checkpoint and exit before the round's plan goes out, so that no process
loads a checkpoint that is still being written. A process that dies is reported to the scheduler
(``lease_lost``), which then plans the job's next lease as a fresh start. The simulator of such a run
charges the restart overhead to every lease that is not renewed (``mechanism.overhead_model: restart``).
Each worker type's real overhead, started afresh and renewed, is learned and leases are shortened by it
so that rounds keep their length (``policies.gavel.lease_time``).

A round credits the steps each lease reports. A job whose process dies keeps only what its checkpoint holds:
the steps since its last save are taken back from the rounds that credited them (``rolled_back`` events),
and it is rescheduled from there, so no step is counted twice or lost. Measured throughputs feed the
policy, smoothed (as Gavel does).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
from clustertwin.policies.gavel.cluster import ClusterLayout
from clustertwin.policies.gavel.lease_time import LeaseTime
from clustertwin.policies.gavel.scheduler import ONLINE_SMOOTHING, GavelScheduler, RoundPlan, SchedulerConfig
from clustertwin.policies.registry import make_policy
from clustertwin.runtime.cores import format_slots, slot_cores
from clustertwin.runtime.gavel.control import ControlPlane
from clustertwin.runtime.launch import die_with_parent
from clustertwin.scenarios.gavel_schema import Scenario
from clustertwin.scenarios.gavel_workload import (
    GavelJob,
    cluster_layout,
    gavel_jobs,
    jobs_table,
    load_table,
    trace_jobs,
)
from clustertwin.scenarios.results import GAVEL_TABLES, RunResult

from clustertwin.atomic import write_parquet
from clustertwin.errors import InputError

AGENT_START_S = 120.0
ROW_JOB, ROW_STEPS = 3, 8  # columns of a rounds row (scenarios.results.GAVEL_TABLES["rounds"])


@dataclass
class _Live:
    """A job process that holds its workers between rounds, waiting for its next lease."""

    agent: str
    gpus: tuple[int, ...]
    key: str  # its key prefix in the control plane
    lease: int  # the index of its current lease


class Agent:
    def __init__(self, name: str, worker_type: int, server: int, args: list[str]) -> None:
        self.name, self.worker_type, self.server, self.args = name, worker_type, server, args
        self.process: subprocess.Popen | None = None

    def start(self, control: ControlPlane) -> None:
        command = [
            sys.executable,
            "-m",
            "clustertwin.runtime.gavel.agent",
            "--control",
            f"{control.host}:{control.port}",
        ]
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
        self.known_step: dict[int, int] = {j.spec.job_id: 0 for j in self.jobs}  # credited so far
        self.saved_step: dict[int, int] = {j.spec.job_id: 0 for j in self.jobs}  # in its checkpoint
        self.live: dict[int, _Live] = {}  # jobs whose process holds their workers between rounds
        self.lost_agents: set[str] = set()
        # What a round really loses per worker type, started afresh (process start-up, checkpoint load and
        # save) or renewed: leases are sized by it, so that a lease plus its overhead fills the round.
        self.lease_time = LeaseTime(
            m.round_s, {t: scenario.overhead_s(t) for t in self.layout.worker_types}, ONLINE_SMOOTHING
        )

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
        cores = slot_cores(self.scenario) if real.pin_cores else None
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
                if cores is not None:
                    args += ["--cores", format_slots(cores[name][server * k : (server + 1) * k])]
                agents.append(Agent(f"{name}-{server}", j, server, args))
        return agents

    # --- the round loop -----------------------------------------------------------------------------

    def run(self) -> RunResult:
        started = time.perf_counter()
        (self.workdir / "checkpoints").mkdir(parents=True, exist_ok=True)
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        self.control = ControlPlane("127.0.0.1", 0, serve=True)
        for agent in self.agents:
            agent.start(self.control)
        try:
            self._wait_ready(self.agents, 0)
            self.t0 = time.monotonic()
            self._loop()
        finally:
            self._stop_agents()
        # Seconds of a round not spent training ([Narayanan] Table 5.4), by worker type and lease kind.
        lost = {
            f"{name}/{'renewed' if renew else 'started'}": float(np.mean(seen))
            for (name, renew), seen in sorted(self.lease_time.seen.items())
        }
        info = {"wall_s": time.perf_counter() - started, "backend": "real", "round_overhead_s": lost}
        return RunResult(tables=self._tables(), info=info)

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
                self.progress(*self._progress(round_index))

    def _progress(self, rounds: int) -> tuple[float, str]:
        """The fraction of all jobs' steps trained, and a line a person can follow while jobs run for
        minutes: rounds, steps, jobs finished."""
        total = sum(int(j.spec.total_steps) for j in self.jobs)
        done = sum(min(self.known_step[j.spec.job_id], int(j.spec.total_steps)) for j in self.jobs)
        text = f"round {rounds}, {done}/{total} steps, {len(self.completion)}/{len(self.jobs)} jobs done"
        return (done / total if total else 1.0), text

    def _run_round(self, r: int, plan: RoundPlan) -> None:
        m = self.scenario.mechanism
        real = self.scenario.real
        assert real is not None
        by_id = {j.spec.job_id: j for j in self.jobs}
        placed = self._placements(plan)
        self._stop_unrenewed({job_id for _, job_id, _, _, _, renew in placed if renew}, r)

        per_agent: dict[str, list[dict]] = {a.name: [] for a in self.agents}
        for _, job_id, j, gpus, agent, renew in placed:
            spec = by_id[job_id].spec
            lease = {
                "max_steps": int(spec.total_steps) - self.known_step[job_id],
                "max_seconds": self.lease_time.lease_s(self.layout.worker_types[j], renew),
            }
            if renew:  # the process is waiting for its next lease
                live = self.live[job_id]
                live.lease += 1
                self.control.put(f"{live.key}/lease/{live.lease}", lease)
            else:
                self.live[job_id] = _Live(agent.name, gpus, f"job/{job_id}/{r}", 0)
            k = self.layout.gpus_per_server[j]
            per_agent[agent.name].append({
                **lease, "job_id": job_id, "job_type": spec.job_type, "slots": [g % k for g in gpus],
                "key": self.live[job_id].key, "lease": self.live[job_id].lease, "renew": renew,
                "total_steps": int(spec.total_steps), "seed": self.scenario.seed,
                "checkpoint": str(self.workdir / "checkpoints" / f"job{job_id}.pt"),
                "log": str(self.workdir / "logs" / f"job{job_id}.log"),
            })  # fmt: skip
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
        lost: list[int] = []
        full = False  # some lease ran its full time (its job did not finish in this round)
        for i, job_id, j, gpus, _, renew in placed:
            outcome = outcomes.get(job_id)
            report = outcome["report"] if outcome else None
            made = 0
            job_end = end
            name = self.layout.worker_types[j]
            if report is None:
                lost.append(job_id)
                detail = "no report" if outcome is None else f"exit {outcome['exit']}"
                self.event_rows.append((end, "job_failed", job_id, detail))
            else:
                made = int(report["end_step"]) - self.known_step[job_id]
                self.known_step[job_id] = int(report["end_step"])
                if report["saved"]:
                    self.saved_step[job_id] = int(report["end_step"])
                    del self.live[job_id]
                job_end = start + float(outcome["elapsed_s"])
                if report["seconds"] > 0 and report["end_step"] > report["start_step"]:
                    self.scheduler.observe_throughput(job_id, j, report["throughput"], ONLINE_SMOOTHING)
                if report["end_step"] < by_id[job_id].spec.total_steps:  # the lease ran its full time
                    full = True
                    spent = float(outcome["elapsed_s"]) - float(report["seconds"])
                    self.lease_time.observe(name, renew, spent)
            self.first_start.setdefault(job_id, start)
            seconds[i] = job_end - start
            steps[job_id] = float(made)
            consolidated = bool(plan.consolidated[i])
            self.round_rows.append(
                [r, start, job_end, job_id, name, len(gpus), consolidated, renew, float(made), -1]
            )
            if self.known_step[job_id] >= by_id[job_id].spec.total_steps:
                finished.append((job_end, job_id))
        if full:
            # A round in which some lease ran its full time lasts at least round_s, as the simulator's
            # rounds (and Gavel's fixed ones) do: leases are sized by a learned restart overhead, and
            # when it over-states the restart every lease ends early. A round started early admits a
            # job arriving on its nominal boundary one round late (LAS run 6 on the GPU host: rounds
            # 1-3 began 0.6-0.9 s early, and the jobs arriving at 60, 120 and 180 s each waited a round).
            time.sleep(max(start + m.round_s - self.now(), 0.0))
            end = max(end, self.now())
        self.scheduler.record_round(plan, seconds, steps, end - start)
        for job_id in lost:
            self._roll_back(job_id)
        for job_id in [job_id for job_id, live in self.live.items() if live.agent in self.lost_agents]:
            self._roll_back(job_id)
        self.lost_agents.clear()
        for t, job_id in sorted(finished):
            self.completion[job_id] = t
            self.scheduler.remove_job(job_id)
            self.event_rows.append((t, "complete", job_id, ""))

    def _placements(self, plan: RoundPlan) -> list[tuple[int, int, int, tuple[int, ...], Agent, bool]]:
        """Each lease of the plan: (plan index, job, worker type, GPUs, agent, renewed). A lease is renewed
        exactly when the scheduler's plan says so; its process is then the one already on those GPUs,
        since every process that died was reported to the scheduler (:meth:`_roll_back`)."""
        placed = []
        for i, (key, j, gpus) in enumerate(zip(plan.job_ids, plan.worker_types, plan.gpus, strict=True)):
            k = self.layout.gpus_per_server[int(j)]
            agent = next(a for a in self.agents if a.worker_type == int(j) and a.server == gpus[0] // k)
            renew = bool(plan.renewed[i])
            live = self.live.get(key[0])
            if renew and (live is None or (live.agent, live.gpus) != (agent.name, tuple(gpus))):
                raise RuntimeError(
                    f"round plan renews job {key[0]}'s lease on {gpus}, where it has no process"
                )
            placed.append((i, key[0], int(j), tuple(gpus), agent, renew))
        return placed

    def _stop_unrenewed(self, renewed: set[int], r: int) -> None:
        """Tell every live process whose lease is not renewed to save and exit, and wait for the saves:
        a job's checkpoint must be on disk before any process (here or on another server) loads it."""
        real = self.scenario.real
        assert real is not None
        stopping = {job_id: live for job_id, live in self.live.items() if job_id not in renewed}
        for live in stopping.values():
            live.lease += 1
            self.control.put(f"{live.key}/lease/{live.lease}", {"stop": True})
        saved = self.control.wait_for(
            [f"{live.key}/saved" for live in stopping.values()], time.monotonic() + real.grace_s
        )
        for job_id, live in stopping.items():
            if f"{live.key}/saved" in saved:
                self.saved_step[job_id] = int(saved[f"{live.key}/saved"])
                del self.live[job_id]
            else:
                self.event_rows.append((self.now(), "job_failed", job_id, "no checkpoint at the lease's end"))
                self._roll_back(job_id)

    def _roll_back(self, job_id: int) -> None:
        """A job whose process died keeps only what its checkpoint holds: the steps it made since its last
        save (in renewed leases, held in memory) are taken back from the rounds that credited them."""
        self.live.pop(job_id, None)
        self.scheduler.lease_lost(job_id)
        lost = self.known_step[job_id] - self.saved_step[job_id]
        if lost <= 0:
            return
        self.known_step[job_id] = self.saved_step[job_id]
        self.scheduler.record_progress(job_id, -float(lost))
        left = float(lost)
        for row in reversed(self.round_rows):
            if row[ROW_JOB] == job_id and left > 0:
                taken = min(row[ROW_STEPS], left)
                row[ROW_STEPS] -= taken
                left -= taken
        self.event_rows.append((self.now(), "rolled_back", job_id, f"{lost} steps since its checkpoint"))

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
        self.lost_agents.add(agent.name)
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
            write_parquet(self.snapshot_dir / f"{name}.parquet", table)

    def _tables(self) -> dict[str, pd.DataFrame]:
        scale = self.scenario.real.time_scale if self.scenario.real else 1.0
        jobs = jobs_table(self.jobs, self.first_start, self.completion, self.known_step, scale)
        rounds = pd.DataFrame([tuple(row) for row in self.round_rows], columns=list(GAVEL_TABLES["rounds"]))
        events = pd.DataFrame(self.event_rows, columns=list(GAVEL_TABLES["events"]))
        rounds, events = rounds.astype(GAVEL_TABLES["rounds"]), events.astype(GAVEL_TABLES["events"])
        return {"jobs": jobs, "rounds": rounds, "events": events}


def run(
    scenario: Scenario, progress=None, workdir: Path | None = None, snapshot_dir: Path | None = None
) -> RunResult:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="clustertwin-real-") as tmp:
        return RealGavel(scenario, workdir or Path(tmp), progress, snapshot_dir).run()
