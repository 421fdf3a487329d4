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

The scheduler, its prices, budget and entity weights, the pair throughputs space sharing plans with, and
the market are built by ``scenarios.gavel_scheduler.setup``, as for the simulator. Two jobs sharing GPUs
run as two processes on the same slots; their measured rates feed the pair's estimate
(``GavelScheduler.observe_pair``). On a ``market:`` fleet (``scenarios.gavel_fleet``) each instance is one
server's agent: the fleet follows the price trace in wall-clock seconds from the run's start, the scheduler
sees only the instances usable now (a warned one is not: at the next round its jobs save their
checkpoints and go elsewhere), an instance terminated mid-round takes its agent and the jobs on it down
(they resume from their checkpoints), and the bill is the fleet's, computed by the same code as in
simulation.
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
from clustertwin.policies.gavel.scheduler import ONLINE_SMOOTHING, GavelScheduler, RoundPlan
from clustertwin.runtime.cores import format_slots, slot_cores
from clustertwin.runtime.gavel.control import POLL_S, ControlPlane
from clustertwin.runtime.launch import die_with_parent
from clustertwin.scenarios.gavel_scheduler import setup
from clustertwin.scenarios.gavel_schema import Scenario
from clustertwin.scenarios.gavel_workload import GavelJob, jobs_table
from clustertwin.scenarios.results import GAVEL_TABLES, RunResult

from clustertwin.atomic import write_parquet
from clustertwin.errors import InputError

AGENT_START_S = 120.0
ROW_JOB, ROW_STEPS = 3, 8  # columns of a rounds row (scenarios.results.GAVEL_TABLES["rounds"])


def refuse_unsupported(scenario: Scenario) -> None:
    """Scenario settings the real backend cannot honour, refused by field rather than ignored."""
    if scenario.real is None:
        raise InputError(f"{scenario.source}: field real", "the real backend needs a `real:` section")
    if scenario.mechanism.ideal:
        raise InputError(
            f"{scenario.source}: field mechanism.ideal",
            "the ideal mechanism (exact time fractions, no rounds) exists only in simulation; real jobs run"
            " in rounds (mechanism.ideal: false)",
        )
    if scenario.market is not None and scenario.real.time_scale != 1.0:
        raise InputError(
            f"{scenario.source}: field real.time_scale",
            "a market's prices are replayed in wall-clock seconds, as the simulation replays them; a time"
            " scale would compress arrivals but not the fleet (use 1.0, or a shorter price trace)",
        )


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
        self.scenario, self.workdir, self.progress = scenario, workdir, progress
        self.snapshot_dir = snapshot_dir
        refuse_unsupported(scenario)
        made = setup(scenario)
        # Agents serve the cluster's servers (Gavel types); the scheduler plans over ``self.layout``, a
        # market's split layout (spot instances apart) or the same.
        self.base_layout: ClusterLayout = made.base_layout
        self.layout: ClusterLayout = made.layout
        self.jobs: list[GavelJob] = made.jobs
        self.believed = made.believed
        self.market = made.market
        self.scheduler: GavelScheduler = made.scheduler
        self._check_fits(made.origin)
        m = scenario.mechanism
        self.agents = self._agents()
        self.agents_by_name = {a.name: a for a in self.agents}
        self.agent_of_worker = self._fleet_agents()
        self.end_s = 0.0
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
        overheads = dict(zip(self.layout.worker_types, made.overheads, strict=True))  # per scheduler type
        self.lease_time = LeaseTime(m.round_s, overheads, ONLINE_SMOOTHING)

    # --- set-up -------------------------------------------------------------------------------------

    def _check_fits(self, origin: str) -> None:
        """A job runs inside one server for real (no cross-agent rendezvous yet)."""
        for job in self.jobs:
            fits = [
                job.spec.throughputs[j] > 0 and job.spec.scale_factor <= self.layout.gpus_per_server[j]
                for j in range(len(self.layout.worker_types))
            ]
            if not any(fits):
                base = self.base_layout
                raise InputError(
                    f"{origin} (job {job.spec.job_id})",
                    f"needs {job.spec.scale_factor} GPUs on one server; servers hold "
                    f"{dict(zip(base.worker_types, base.gpus_per_server, strict=True))}",
                )

    def _agents(self) -> list[Agent]:
        agents = []
        real = self.scenario.real
        assert real is not None
        cores = slot_cores(self.scenario) if real.pin_cores else None
        base = self.base_layout
        for j, name in enumerate(base.worker_types):
            worker = real.workers[name]
            k = base.gpus_per_server[j]
            for server in range(-(-base.gpus[j] // k)):
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

    def _fleet_agents(self) -> dict[int, Agent]:
        """A market fleet's instances, each one server's agent: a type's on-demand instances are its first
        servers, its spot instances the rest (``scenarios.gavel_fleet.build_market`` numbers them so)."""
        if self.market is None:
            return {}
        by_name = self.agents_by_name
        seen: dict[str, int] = {}
        out = {}
        for w in self.market.workers:
            index = seen.get(w.worker_type, 0)
            seen[w.worker_type] = index + 1
            out[w.worker_id] = by_name[f"{w.worker_type}-{index}"]
        return out

    def _agent_for(self, worker_type: int, gpus: tuple[int, ...]) -> Agent:
        """The agent holding ``gpus`` of scheduler type ``worker_type`` (a placement is on one server)."""
        k = self.layout.gpus_per_server[worker_type]
        if self.market is not None:
            return self.agent_of_worker[self.market.slots[worker_type][gpus[0] // k]]
        return next(a for a in self.agents if a.worker_type == worker_type and a.server == gpus[0] // k)

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
            self.end_s = self.now()
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
                spec = job.spec
                if self.believed is not None:
                    spec = replace(spec, throughputs=self.believed[spec.job_id])
                sched.add_job(replace(spec, arrival_s=spec.arrival_s / scale))
                self.event_rows.append((self.now(), "admit", job.spec.job_id, job.spec.job_type))
            if self.market is not None:
                self.market.sync(sched, self.event_rows, self.now())
            if sched.reset_due(self.now()):
                sched.reset(self.now())
                self.event_rows.append((self.now(), "reset", -1, f"{len(sched.jobs)} jobs"))
            plan = sched.next_round() if sched.jobs else None
            if plan is None or not len(plan):
                wake = [p.spec.arrival_s / scale for p in pending[:1]]
                if sched.next_reset_s() is not None:
                    wake.append(sched.next_reset_s())
                if self.market is not None:
                    change = self.market.next_change_s(self.now())
                    if change is None and not wake and sched.jobs and not self.live:
                        # No job can run and the fleet never changes again (the simulator stops alike).
                        self.event_rows.append(
                            (self.now(), "stalled", -1, f"{len(sched.jobs)} jobs cannot run")
                        )
                        return
                    wake += [] if change is None else [change]
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
        # When the market terminates the instances this round uses: an agent still busy then is killed
        # (and the jobs on it), as a terminated instance's processes are, even in a round that overruns.
        ending = self._terminations(plan, start)
        for agent in self.agents:
            self.control.put(
                f"plan/{r}/{agent.name}",
                {"jobs": per_agent[agent.name], "deadline_s": m.round_s + real.grace_s},
            )
        deadline = time.monotonic() + m.round_s + real.grace_s + 10.0
        keys = {f"done/{r}/{a.name}": a for a in self.agents}
        done, gone = self._wait_round(keys, deadline, ending)
        ending = {name: t for name, t in ending.items() if name in gone}
        outcomes = {}
        for key, agent in keys.items():
            if key not in done:
                kind = "evicted" if agent.name in gone else "agent_lost"
                self.event_rows.append((self.now(), kind, -1, agent.name))
                self._restart(agent, r + 1)
                continue
            for outcome in done[key]:
                outcomes[outcome["job_id"]] = outcome
        end = self.now()
        seconds = np.zeros(len(plan))
        steps: dict[int, float] = {}
        rates: dict[int, float] = {}
        finished: list[tuple[float, int]] = []
        lost: list[int] = []
        full = False  # some lease ran its full time (its job did not finish in this round)
        for i, job_id, j, gpus, agent, renew in placed:
            outcome = outcomes.get(job_id)
            report = outcome["report"] if outcome else None
            made = 0
            job_end = end
            name = self.layout.worker_types[j]
            if report is None:
                lost.append(job_id)
                if agent.name in ending:
                    self.event_rows.append((ending[agent.name], "preempt", job_id, "evicted"))
                else:
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
                    rates[job_id] = float(report["throughput"])
                if report["end_step"] < by_id[job_id].spec.total_steps:  # the lease ran its full time
                    full = True
                    spent = float(outcome["elapsed_s"]) - float(report["seconds"])
                    self.lease_time.observe(name, renew, spent)
            self.first_start.setdefault(job_id, start)
            seconds[i] = max(seconds[i], job_end - start)
            steps[job_id] = float(made)
            consolidated = bool(plan.consolidated[i])
            key = plan.job_ids[i]
            partner = key[1 - key.index(job_id)] if len(key) == 2 else -1
            self.round_rows.append(
                [r, start, job_end, job_id, name, len(gpus), consolidated, renew, float(made), partner]
            )
            if self.known_step[job_id] >= by_id[job_id].spec.total_steps:
                finished.append((job_end, job_id))
        self._observe(plan, rates)
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
            lost_steps = self._roll_back(job_id)
            i, _, _, gpus, agent, _ = next(p for p in placed if p[1] == job_id)
            if self.market is not None and agent.name in ending:
                t = ending[agent.name]
                workers = [w for w, a in self.agent_of_worker.items() if a is agent]
                held = len(gpus) * (t - start) / len(plan.job_ids[i])
                self.market.record_preemption(t, job_id, workers, float(lost_steps), held)
        for job_id in [job_id for job_id, live in self.live.items() if live.agent in self.lost_agents]:
            self._roll_back(job_id)
        self.lost_agents.clear()
        for t, job_id in sorted(finished):
            self.completion[job_id] = t
            self.scheduler.remove_job(job_id)
            self.event_rows.append((t, "complete", job_id, ""))

    def _observe(self, plan: RoundPlan, rates: dict[int, float]) -> None:
        """Measured rates feed the policy: a job alone on its workers its own throughput, a pair sharing
        GPUs (both measured) the pair's (the simulator observes through the same two calls)."""
        for key, j in zip(plan.job_ids, plan.worker_types.tolist(), strict=True):
            if len(key) == 1 and key[0] in rates:
                self.scheduler.observe_throughput(key[0], j, rates[key[0]], ONLINE_SMOOTHING)
            elif len(key) == 2 and all(m in rates for m in key):
                pair = (rates[key[0]], rates[key[1]])
                self.scheduler.observe_pair(key, j, pair, ONLINE_SMOOTHING)

    # --- the market ---------------------------------------------------------------------------------

    def _terminations(self, plan: RoundPlan, start: float) -> dict[str, float]:
        """Agents of the instances this round uses that the market terminates, and when (run seconds)."""
        if self.market is None:
            return {}
        ending: dict[str, float] = {}
        for c in range(len(plan)):
            for w in self.market.workers_of(plan, c):
                lease = self.market.workers[w].lease_at(start)
                if lease is not None and np.isfinite(lease.ended_s):
                    ending[self.agent_of_worker[w].name] = float(lease.ended_s)
        return ending

    def _wait_round(
        self, keys: dict[str, Agent], deadline: float, ending: dict[str, float]
    ) -> tuple[dict[str, list], set[str]]:
        """Each agent's report of the round, until every agent has reported, or been terminated with its
        instance (``ending``: the names of the agents whose instance goes, and when), or the deadline."""
        found: dict[str, list] = {}
        gone: set[str] = set()
        while True:
            for key, agent in keys.items():
                if key in found or agent.name in gone:
                    continue
                if self.control.has(key):
                    found[key] = self.control.get(key)
                elif agent.name in ending and self.now() >= ending[agent.name]:
                    # The instance is gone: its agent dies, and its jobs with it (parent-death signal).
                    if agent.process is not None and agent.process.poll() is None:
                        agent.process.kill()
                    gone.add(agent.name)
            if len(found) + len(gone) == len(keys) or time.monotonic() >= deadline:
                return found, gone
            time.sleep(POLL_S)

    def _placements(self, plan: RoundPlan) -> list[tuple[int, int, int, tuple[int, ...], Agent, bool]]:
        """Each lease of the plan: (plan index, job, worker type, GPUs, agent, renewed); the two jobs of a
        shared combination get one lease each, on the same GPUs. A lease is renewed exactly when the
        scheduler's plan says so; its process is then the one already on those GPUs, since every process
        that died was reported to the scheduler (:meth:`_roll_back`)."""
        placed = []
        for i, (key, j, gpus) in enumerate(zip(plan.job_ids, plan.worker_types, plan.gpus, strict=True)):
            agent = self._agent_for(int(j), tuple(gpus))
            renew = bool(plan.renewed[i])
            for job_id in key:
                live = self.live.get(job_id)
                if renew and (live is None or (live.agent, live.gpus) != (agent.name, tuple(gpus))):
                    raise RuntimeError(
                        f"round plan renews job {job_id}'s lease on {gpus}, where it has no process"
                    )
                placed.append((i, job_id, int(j), tuple(gpus), agent, renew))
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

    def _roll_back(self, job_id: int) -> int:
        """A job whose process died keeps only what its checkpoint holds: the steps it made since its last
        save (in renewed leases, held in memory) are taken back from the rounds that credited them.
        Returns how many."""
        self.live.pop(job_id, None)
        self.scheduler.lease_lost(job_id)
        lost = self.known_step[job_id] - self.saved_step[job_id]
        if lost <= 0:
            return 0
        self.known_step[job_id] = self.saved_step[job_id]
        self.scheduler.record_progress(job_id, -float(lost))
        left = float(lost)
        for row in reversed(self.round_rows):
            if row[ROW_JOB] == job_id and left > 0:
                taken = min(row[ROW_STEPS], left)
                row[ROW_STEPS] -= taken
                left -= taken
        self.event_rows.append((self.now(), "rolled_back", job_id, f"{lost} steps since its checkpoint"))
        return lost

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
        tables = {"jobs": jobs, "rounds": rounds, "events": events}
        if self.market is not None:
            # The same fleet tables as the simulator's (scenarios.gavel_fleet): what the rounds' GPUs
            # cost, and the fleet's bill up to the run's end.
            rounds["cost_usd"] = self.market.held_cost(rounds)
            rounds["worker_type"], rounds["spot"] = self.market.base_types(rounds["worker_type"])
            tables.update(self.market.tables(self.end_s or self.now()))
        return tables


def run(
    scenario: Scenario, progress=None, workdir: Path | None = None, snapshot_dir: Path | None = None
) -> RunResult:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="clustertwin-real-") as tmp:
        return RealGavel(scenario, workdir or Path(tmp), progress, snapshot_dir).run()
