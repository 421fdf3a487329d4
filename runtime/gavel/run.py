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

Jobs are the scenario's own programs (``runtime.job``) or the bundled stand-ins; agents run on this machine
or on many (``runtime.gavel.fleet``), behind an authenticated control channel (``runtime.gavel.control``).
A job spans servers when the plan places it so (torchrun's c10d rendezvous across its agents). A job whose
process fails ``real.max_tries`` times is given up (``job_abandoned``) and the run goes on without it.
After every round the run's state is journalled beside its tables (``runtime.gavel.journal``): a scheduler
killed part-way continues with ``--resume`` from the last round, every job from its last checkpoint.

The scheduler, with its prices, budget, entity weights, the pair throughputs space sharing plans with and
the market, is built by ``scenarios.gavel_scheduler.setup``, as for the simulator. Two jobs sharing a
device (space sharing, [Narayanan] §5.3.1) run as two processes on the same slots, each under its own
lease; their measured rates feed the pair's estimate (``GavelScheduler.observe_pair``), as the simulator's
do. On a ``market:`` fleet (``scenarios.gavel_fleet``) each instance is one server's agent and the fleet
follows the price trace in wall-clock seconds from the run's start: the scheduler sees only the instances
usable now; at an instance's eviction warning the jobs on it are told to save their checkpoints at once
(their lease is cut short) and are rescheduled elsewhere; at its termination its agent is killed with
whatever still runs there (which resumes from its checkpoint), and it is started again when the trace
gives the instance back. The bill is the fleet's, computed by the simulator's code (``MarketHook.tables``,
``policies.spot.billing``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
from clustertwin.policies.gavel.cluster import ClusterLayout
from clustertwin.policies.gavel.lease_time import LeaseTime
from clustertwin.policies.gavel.scheduler import ONLINE_SMOOTHING, GavelScheduler, JobSpec, RoundPlan
from clustertwin.runtime.gavel.agent import BUILTIN
from clustertwin.runtime.gavel.control import POLL_S, SECRET_ENV, ControlServer, new_secret, read_secret
from clustertwin.runtime.gavel.fleet import Agent, Fleet
from clustertwin.runtime.gavel.journal import Journal
from clustertwin.scenarios.gavel_fleet import MarketHook
from clustertwin.scenarios.gavel_scheduler import setup
from clustertwin.scenarios.gavel_schema import Scenario
from clustertwin.scenarios.gavel_workload import GavelJob, jobs_table, trace_jobs
from clustertwin.scenarios.results import GAVEL_TABLES, RunResult

from clustertwin.atomic import write_parquet
from clustertwin.errors import InputError

# Columns of a rounds row (scenarios.results.GAVEL_TABLES["rounds"]).
ROW_START, ROW_END, ROW_JOB, ROW_GPUS, ROW_STEPS = 1, 2, 3, 5, 8


def refuse_unsupported(scenario: Scenario) -> None:
    """Scenario settings the real backend cannot honour, refused by field rather than ignored."""
    where = scenario.source
    if scenario.real is None:
        raise InputError(f"{where}: field real", "the real backend needs a `real:` section")
    if scenario.mechanism.ideal:
        raise InputError(
            f"{where}: field mechanism.ideal",
            "the ideal mechanism (exact time fractions, no rounds) exists only in simulation; real jobs run"
            " in rounds (mechanism.ideal: false)",
        )
    if scenario.market is not None and scenario.real.time_scale != 1.0:
        raise InputError(
            f"{where}: field real.time_scale",
            "a market's prices are replayed in wall-clock seconds, as the simulation replays them; a time"
            " scale would compress the arrivals but not the fleet (use 1.0, or a shorter price trace)",
        )
    if scenario.market is not None and scenario.real.agents != "local":
        raise InputError(
            f"{where}: field real.agents",
            "a market fleet's instances come and go with the price trace, which the scheduler can do only to"
            " agents it starts itself (real.agents: local)",
        )


@dataclass
class _Live:
    """A job process that holds its workers between rounds, waiting for its next lease."""

    agents: tuple[str, ...]  # its servers' agents (several for a job spanning servers)
    slots: tuple[tuple[int, ...], ...]  # its slots on each of them
    key: str  # its key prefix in the control plane
    lease: int  # the index of its current lease
    stopping: bool = False  # already told to save and exit
    evicted: bool = False  # its market instance was warned or terminated under it


class RealGavel:
    def __init__(
        self,
        scenario: Scenario,
        workdir: Path,
        progress=None,
        snapshot_dir: Path | None = None,
        *,
        resume: bool = False,
    ) -> None:
        """``snapshot_dir``: where the event tables so far (and the journal) are rewritten after every
        round, so that a run killed part-way keeps what it finished (the final, complete folder is written
        by the caller); ``resume``: continue from the journal there."""
        # Absolute: jobs run in their own working directories, agents perhaps on other machines.
        self.scenario, self.workdir, self.progress = scenario, workdir.absolute(), progress
        self.snapshot_dir = snapshot_dir
        self.journal = Journal(snapshot_dir) if snapshot_dir is not None else None
        if resume and (self.journal is None or not self.journal.exists()):
            where = snapshot_dir if snapshot_dir is not None else "the run"
            raise InputError(f"{where}", "--resume: no journal of an earlier run of this scenario there")
        self.resume = resume
        refuse_unsupported(scenario)
        made = setup(scenario)  # the simulator's construction: prices, budget, weights, pairs, market
        # Agents serve the cluster's servers (Gavel types); the scheduler plans over ``self.layout``, a
        # market's split layout (spot instances apart) or the same.
        self.base_layout: ClusterLayout = made.base_layout
        self.layout: ClusterLayout = made.layout
        self.market: MarketHook | None = made.market
        self.jobs: list[GavelJob] = made.jobs
        self.believed = made.believed
        self.catalog = self._catalog(made.origin, trace_jobs(scenario, made.table)[0])
        self.scheduler: GavelScheduler = made.scheduler
        m = scenario.mechanism
        self.round_rows: list[tuple] = []
        self.event_rows: list[tuple] = []
        self.completion: dict[int, float] = {}
        self.first_start: dict[int, float] = {}
        self.known_step: dict[int, int] = {j.spec.job_id: 0 for j in self.jobs}  # credited so far
        self.saved_step: dict[int, int] = {j.spec.job_id: 0 for j in self.jobs}  # in its checkpoint
        self.live: dict[int, _Live] = {}  # jobs whose process holds their workers between rounds
        self.lost_agents: set[str] = set()
        self.down: set[str] = set()  # agents whose market instance is terminated (until it comes back)
        self.warned: set[tuple[int, int]] = set()  # (instance, lease) whose warning was acted on
        self.ended: set[tuple[int, int]] = set()  # (instance, lease) whose termination was acted on
        self.end_s = 0.0  # the run's end (its fleet is billed up to it)
        self.tries: dict[int, int] = {}  # failed leases by job
        self._last_failure: dict[int, str] = {}
        self.failed: dict[int, str] = {}  # jobs given up, and why
        self.rounds_done = 0
        self.admitted: set[int] = set()
        # What a round really loses per worker type, started afresh (process start-up, checkpoint load and
        # save) or renewed: leases are sized by it, so that a lease plus its overhead fills the round.
        overheads = dict(zip(self.layout.worker_types, made.overheads, strict=True))  # per scheduler type
        self.lease_time = LeaseTime(m.round_s, overheads, ONLINE_SMOOTHING)

    # --- set-up -------------------------------------------------------------------------------------

    def _planned(self, job: GavelJob, scale: float) -> JobSpec:
        """The job as the scheduler plans it: at the scaled arrival time, with the throughputs it believes
        (``mechanism.planned_throughputs``) where the scenario gives them."""
        spec = job.spec
        if self.believed is not None:
            spec = replace(spec, throughputs=self.believed[spec.job_id])
        return replace(spec, arrival_s=spec.arrival_s / scale)

    def _catalog(self, origin: str, trace: list) -> dict[str, dict]:
        """What an agent may run, by job id: the bundled stand-in of the job's type, or the job's own
        command (its words, working directory and environment). Agents start nothing else."""
        real = self.scenario.real
        assert real is not None
        catalog: dict[str, dict] = {}
        for job_id, job in enumerate(trace):
            words = shlex.split(job.command) if job.command.strip() else []
            if real.commands == "builtin" or not words or BUILTIN in words:
                catalog[str(job_id)] = {"builtin": job.job_type}
                continue
            if job.scale_factor > 1 and words[0] not in ("python", "python3"):
                raise InputError(
                    f"{origin} (job {job_id})",
                    f"a job of {job.scale_factor} ranks runs under torchrun, so its command must start with"
                    f" python or python3; got {words[0]!r}",
                )
            if job.num_steps_arg:
                words += [job.num_steps_arg, str(job.total_steps)]
            cwd = job.working_directory or None
            if cwd is not None and origin == self.scenario.workload.trace:
                cwd = str(Path(origin).parent / cwd)  # a trace's folders are relative to the trace
            catalog[str(job_id)] = {"command": words, "cwd": cwd, "env": dict(job.env)}
        return catalog

    # --- the round loop -----------------------------------------------------------------------------

    def _secret(self) -> bytes:
        real = self.scenario.real
        assert real is not None
        if real.agents == "local":
            return new_secret()  # the run's own: only the agents it starts learn it
        try:
            secret = read_secret(os.environ, real.secret_file)
        except (OSError, ValueError) as err:
            raise InputError(f"{self.scenario.source}: field real.secret_file", str(err)) from None
        if secret is None:
            raise InputError(
                f"{self.scenario.source}: field real.agents",
                f"remote agents need a shared secret: set {SECRET_ENV} or real.secret_file",
            )
        return secret

    def run(self) -> RunResult:
        started = time.perf_counter()
        if not self.resume:  # a fresh run's jobs start from step 0, whatever an earlier run left here
            shutil.rmtree(self.workdir / "checkpoints", ignore_errors=True)
        (self.workdir / "checkpoints").mkdir(parents=True, exist_ok=True)
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        real = self.scenario.real
        assert real is not None
        host, port = real.listen.rsplit(":", 1)
        secret = self._secret()
        try:
            self.control = ControlServer(host, int(port), secret)
        except OSError as err:
            raise InputError(f"{self.scenario.source}: field real.listen", f"cannot listen: {err}") from None
        self.control.put("catalog", self.catalog)
        self.fleet = Fleet(self.scenario, self.base_layout, self.control, secret)
        self.agents = self.fleet.agents
        self.agent_of_worker = self._fleet_agents()
        if self.resume:
            self._restore()
        try:
            self.fleet.start(self.rounds_done)
            self.t0 = time.monotonic() - self.resumed_at
            self._loop()
            self.end_s = self.now()
        finally:
            self.fleet.stop(self.rounds_done)
            self.control.close()
        # Seconds of a round not spent training ([Narayanan] Table 5.4), by worker type and lease kind.
        lost = {
            f"{name}/{'renewed' if renew else 'started'}": float(np.mean(seen))
            for (name, renew), seen in sorted(self.lease_time.seen.items())
        }
        info = {"wall_s": time.perf_counter() - started, "backend": "real", "round_overhead_s": lost}
        if self.failed:
            info["failed_jobs"] = {str(job_id): why for job_id, why in sorted(self.failed.items())}
        return RunResult(tables=self._tables(), info=info)

    resumed_at = 0.0  # the run's clock when the journal it resumes from was written

    def now(self) -> float:
        return time.monotonic() - self.t0

    def _loop(self) -> None:
        sched = self.scheduler
        pending = sorted(self.jobs, key=lambda j: (j.spec.arrival_s, j.spec.job_id))
        scale = self.scenario.real.time_scale if self.scenario.real else 1.0
        admitted = self.admitted
        pending = [j for j in pending if j.spec.job_id not in admitted]
        for job in sorted(self.jobs, key=lambda j: j.spec.job_id):  # resumed: back with their saved steps
            job_id = job.spec.job_id
            if job_id in admitted and job_id not in self.completion and job_id not in self.failed:
                sched.add_job(self._planned(job, scale))
                sched.record_progress(job_id, float(self.saved_step[job_id]))
        while len(self.completion) + len(self.failed) < len(self.jobs):
            while pending and pending[0].spec.arrival_s / scale <= self.now():
                job = pending.pop(0)
                sched.add_job(self._planned(job, scale))
                admitted.add(job.spec.job_id)
                self.event_rows.append((self.now(), "admit", job.spec.job_id, job.spec.job_type))
            if self.market is not None:
                self._market_tick()
                self._settle_down()
                self.market.sync(sched, self.event_rows, self.now())
                self._revive()
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
                    # Look again soon: a warning or a termination may concern a job waiting between leases.
                    wake += [self.now() + 1.0] if change is None else [min(change, self.now() + 1.0)]
                time.sleep(max(min(wake, default=self.now() + 1.0) - self.now(), 0.01))
                continue
            self._run_round(self.rounds_done, plan)
            self.rounds_done += 1
            if self.snapshot_dir is not None:
                self._snapshot()
            if self.progress is not None:
                self.progress(*self._progress(self.rounds_done))

    def _progress(self, rounds: int) -> tuple[float, str]:
        """The fraction of all jobs' steps trained, and a line a person can follow while jobs run for
        minutes: rounds, steps, jobs finished."""
        total = sum(int(j.spec.total_steps) for j in self.jobs)
        done = sum(min(self.known_step[j.spec.job_id], int(j.spec.total_steps)) for j in self.jobs)
        text = f"round {rounds}, {done}/{total} steps, {len(self.completion)}/{len(self.jobs)} jobs done"
        if self.failed:
            text += f", {len(self.failed)} failed"
        return (done / total if total else 1.0), text

    def _run_round(self, r: int, plan: RoundPlan) -> None:
        m = self.scenario.mechanism
        real = self.scenario.real
        assert real is not None
        by_id = {j.spec.job_id: j for j in self.jobs}
        placed = self._placements(plan)
        self._stop_unrenewed({job_id for _, job_id, _, _, _, renew in placed if renew}, r)

        agents = [a for a in self.agents if a.name not in self.down]
        per_agent: dict[str, list[dict]] = {a.name: [] for a in agents}
        for _, job_id, j, _, servers, renew in placed:
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
                names = tuple(agent.name for agent, _ in servers)
                slots = tuple(tuple(s) for _, s in servers)
                self.live[job_id] = _Live(names, slots, f"job/{job_id}/{r}", 0)
            for agent, slots in servers:
                per_agent[agent.name].append({
                    **lease, "job_id": job_id, "job_type": spec.job_type, "slots": slots,
                    "nodes": list(self.live[job_id].agents),
                    "key": self.live[job_id].key, "lease": self.live[job_id].lease, "renew": renew,
                    "total_steps": int(spec.total_steps), "seed": self.scenario.seed,
                    "checkpoint": str(self.workdir / "checkpoints" / f"job{job_id}.pt"),
                    "log": str(self.workdir / "logs" / f"job{job_id}-{agent.name}.log"),
                })  # fmt: skip
        leases = {job_id: self.live[job_id].lease for _, job_id, _, _, _, _ in placed}
        start = self.now()
        for agent in agents:
            self.control.put(
                f"plan/{r}/{agent.name}",
                {"jobs": per_agent[agent.name], "deadline_s": m.round_s + real.grace_s},
            )
        deadline = time.monotonic() + m.round_s + real.grace_s + 10.0
        keys = {f"done/{r}/{a.name}": a for a in agents}
        done = self._wait_round(keys, deadline)
        parts: dict[int, list[dict]] = {}
        for key, agent in keys.items():
            if key not in done:
                if agent.name in self.down:  # its instance was terminated under the round
                    continue
                self.event_rows.append((self.now(), "agent_lost", -1, agent.name))
                self.lost_agents.add(agent.name)
                self.fleet.replace(agent, r + 1)
                continue
            for outcome in done[key]:
                parts.setdefault(outcome["job_id"], []).append(outcome)
        outcomes = {job_id: _merged(mine) for job_id, mine in parts.items()}
        end = self.now()
        seconds = np.zeros(len(plan))
        steps: dict[int, float] = {}
        rates: dict[int, float] = {}
        finished: list[tuple[float, int]] = []
        lost: list[int] = []
        full = False  # some lease ran its full time (its job did not finish in this round)
        for i, job_id, j, gpus, servers, renew in placed:
            outcome = outcomes.get(job_id)
            if outcome is not None and len(parts[job_id]) < len(servers):
                outcome = {**outcome, "report": None}  # part of a spanning job was on a lost agent
            evicted = any(a.name in self.down for a, _ in servers)
            if outcome is None and evicted:
                outcome = self._report_of(job_id, leases[job_id], end - start)
            report = outcome["report"] if outcome else None
            made = 0
            job_end = end
            name = self.layout.worker_types[j]
            if report is None and evicted:  # it died with its instance: _settle_down keeps its checkpoint
                self.event_rows.append((end, "preempt", job_id, "evicted"))
            elif report is None:
                lost.append(job_id)
                detail = "no report (its agent was lost)" if outcome is None else _failure(outcome)
                self.event_rows.append((end, "job_failed", job_id, detail))
                crashed = outcome is not None and not outcome.get("killed")
                if crashed and not any(a.name in self.lost_agents for a, _ in servers):
                    self._count_failure(job_id, detail)  # a slow start killed at the deadline is no crash
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
            seconds[i] = max(seconds[i], job_end - start)  # a shared combination: its longer lease
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
            while self.now() < start + m.round_s:
                self._market_tick()
                time.sleep(min(max(start + m.round_s - self.now(), 0.0), POLL_S * 4))
            end = max(end, self.now())
        self.scheduler.record_round(plan, seconds, steps, end - start)
        for job_id in lost:
            self._roll_back(job_id)
        for job_id in [j for j, live in self.live.items() if set(live.agents) & self.lost_agents]:
            self._roll_back(job_id)
        self.lost_agents.clear()
        self._settle_down()
        for t, job_id in sorted(finished):
            self.completion[job_id] = t
            self.scheduler.remove_job(job_id)
            self.event_rows.append((t, "complete", job_id, ""))
        real = self.scenario.real
        for job_id, tries in sorted(self.tries.items()):
            if tries >= real.max_tries and job_id not in self.failed and job_id not in self.completion:
                self.failed[job_id] = self._last_failure[job_id]
                self.live.pop(job_id, None)
                self.scheduler.remove_job(job_id)
                self.event_rows.append((
                    self.now(), "job_abandoned", job_id,
                    f"failed {tries} times (real.max_tries); last: {self._last_failure[job_id]}",
                ))  # fmt: skip

    def _wait_round(self, keys: dict[str, Agent], deadline: float) -> dict[str, list]:
        """Each agent's outcomes of the round, until every agent has reported, or its instance was
        terminated (a market fleet's eviction, acted on meanwhile), or its connection closed, or the
        deadline."""
        found: dict[str, list] = {}
        gone: set[str] = set()  # agents whose connection closed (killed or crashed): lost at once
        while True:
            self._market_tick()
            for key, agent in keys.items():
                if key in found:
                    continue
                # asked before looking: an agent's last write lands before its connection closes
                closed = self.control.has(f"gone/{agent.name}")
                if self.control.has(key):
                    found[key] = self.control.get(key)
                elif closed:
                    gone.add(key)
            heard = found.keys() | gone
            waiting = [k for k, a in keys.items() if k not in heard and a.name not in self.down]
            if not waiting or time.monotonic() >= deadline:
                return found
            time.sleep(POLL_S)

    def _observe(self, plan: RoundPlan, rates: dict[int, float]) -> None:
        """Measured rates feed the policy: a job alone on its workers its own throughput, a pair sharing
        them (both measured) the pair's, through the same two calls as the simulator's."""
        for key, j in zip(plan.job_ids, plan.worker_types.tolist(), strict=True):
            if len(key) == 1 and key[0] in rates:
                self.scheduler.observe_throughput(key[0], j, rates[key[0]], ONLINE_SMOOTHING)
            elif len(key) == 2 and all(m in rates for m in key):
                pair = (rates[key[0]], rates[key[1]])
                self.scheduler.observe_pair((key[0], key[1]), j, pair, ONLINE_SMOOTHING)

    def _count_failure(self, job_id: int, detail: str) -> None:
        self.tries[job_id] = self.tries.get(job_id, 0) + 1
        self._last_failure[job_id] = detail

    def _placements(
        self, plan: RoundPlan
    ) -> list[tuple[int, int, int, tuple[int, ...], list[tuple[Agent, list[int]]], bool]]:
        """Each lease of the plan: (plan index, job, worker type, GPUs, its servers' agents with the slots
        it has on each, renewed); the two jobs of a shared combination get one lease each, on the same
        slots. A lease is renewed exactly when the scheduler's plan says so; its processes are then the
        ones already on those slots, since every process that died was reported to the scheduler
        (:meth:`_roll_back`)."""
        placed = []
        for i, (key, j, gpus) in enumerate(zip(plan.job_ids, plan.worker_types, plan.gpus, strict=True)):
            k = self.layout.gpus_per_server[int(j)]
            by_server: dict[int, list[int]] = {}
            for g in gpus:
                by_server.setdefault(int(g) // k, []).append(int(g) % k)
            servers = [(self._server_agent(int(j), server), slots) for server, slots in by_server.items()]
            renew = bool(plan.renewed[i])
            where = (tuple(a.name for a, _ in servers), tuple(tuple(s) for _, s in servers))
            for job_id in key:
                live = self.live.get(job_id)
                if renew and (live is None or (live.agents, live.slots) != where):
                    raise RuntimeError(
                        f"round plan renews job {job_id}'s lease on {gpus}, where it has no process"
                    )
                placed.append((i, job_id, int(j), tuple(gpus), servers, renew))
        return placed

    def _stop_unrenewed(self, renewed: set[int], r: int) -> None:
        """Tell every live process whose lease is not renewed to save and exit, and wait for the saves:
        a job's checkpoint must be on disk before any process (here or on another server) loads it."""
        real = self.scenario.real
        assert real is not None
        stopping = {job_id: live for job_id, live in self.live.items() if job_id not in renewed}
        for live in stopping.values():
            if not live.stopping:
                live.lease += 1
                live.stopping = True
                self.control.put(f"{live.key}/lease/{live.lease}", {"stop": True})
        saved = self.control.wait_for(
            [f"{live.key}/saved" for live in stopping.values()], time.monotonic() + real.grace_s
        )
        for job_id, live in stopping.items():
            if f"{live.key}/saved" in saved:
                self.saved_step[job_id] = int(saved[f"{live.key}/saved"])
                del self.live[job_id]
                if live.evicted:
                    self._preempted(job_id, live, 0, 0.0)
            else:
                detail = "no checkpoint at the lease's end"
                self.event_rows.append((self.now(), "job_failed", job_id, detail))
                self._roll_back(job_id, evicted=live.evicted)

    def _roll_back(self, job_id: int, *, evicted: bool = False) -> None:
        """A job whose process died keeps only what its checkpoint holds: the steps it made since its last
        save (in renewed leases, held in memory) are taken back from the rounds that credited them.
        ``evicted``: it died with its market instance (a ``preemptions`` row says what it lost)."""
        live = self.live.pop(job_id, None)
        self.scheduler.lease_lost(job_id)
        lost = self.known_step[job_id] - self.saved_step[job_id]
        held_s = 0.0
        if lost > 0:
            self.scheduler.record_progress(job_id, -float(lost))
            held_s = self._take_back(job_id, lost, self.now())
        if evicted and live is not None:
            self._preempted(job_id, live, max(lost, 0), held_s)

    def _preempted(self, job_id: int, live: _Live, lost: int, held_s: float) -> None:
        """A ``preemptions`` row: the job left its market instance, losing ``lost`` steps (nothing when it
        saved its checkpoint in the warning) that had held ``held_s`` GPU-seconds."""
        if self.market is not None:
            workers = [w for w, a in self.agent_of_worker.items() if a.name in live.agents]
            self.market.record_preemption(self.now(), job_id, workers, float(lost), held_s)

    def _take_back(self, job_id: int, lost: int, now: float) -> float:
        """Take ``lost`` steps of a job back from the latest rounds that credited them; returns the GPU
        seconds those steps had held."""
        if lost <= 0:
            return 0.0
        self.known_step[job_id] = self.saved_step[job_id]
        left = float(lost)
        held_s = 0.0
        for row in reversed(self.round_rows):
            if row[ROW_JOB] == job_id and left > 0 and row[ROW_STEPS] > 0:
                taken = min(row[ROW_STEPS], left)
                held_s += (row[ROW_END] - row[ROW_START]) * row[ROW_GPUS] * taken / row[ROW_STEPS]
                row[ROW_STEPS] -= taken
                left -= taken
        self.event_rows.append((now, "rolled_back", job_id, f"{lost} steps since its checkpoint"))
        return held_s

    # --- the market ---------------------------------------------------------------------------------

    def _fleet_agents(self) -> dict[int, Agent]:
        """A market fleet's instances, each one server's agent: a type's on-demand instances are its first
        servers, its spot instances the rest (``scenarios.gavel_fleet.build_market`` numbers them so)."""
        if self.market is None:
            return {}
        seen: dict[str, int] = {}
        out = {}
        for w in self.market.workers:
            index = seen.get(w.worker_type, 0)
            seen[w.worker_type] = index + 1
            out[w.worker_id] = next(a for a in self.agents if a.name == f"{w.worker_type}-{index}")
        return out

    def _server_agent(self, worker_type: int, server: int) -> Agent:
        """The agent of server ``server`` of scheduler type ``worker_type`` (on a market fleet: of the
        instance the market's current numbering gives that server)."""
        if self.market is None:
            return self.fleet.agent_for(worker_type, server)
        return self.agent_of_worker[self.market.slots[worker_type][server]]

    def _market_tick(self) -> None:
        """Act on the fleet's warnings and terminations due by now: a warned instance's jobs are told to
        save and exit at once (their lease is cut short); a terminated instance's agent is killed, and its
        jobs with it."""
        if self.market is None:
            return
        now = self.now()
        for w in self.market.workers:
            agent = self.agent_of_worker[w.worker_id]
            for i, lease in enumerate(w.leases):
                if lease.warned_s <= now and (w.worker_id, i) not in self.warned:
                    self.warned.add((w.worker_id, i))
                    self.event_rows.append((now, "warned", -1, agent.name))
                    for job_id, live in self.live.items():
                        if agent.name not in live.agents:
                            continue
                        live.evicted = True
                        if not live.stopping:
                            live.lease += 1
                            live.stopping = True
                            self.control.put(f"{live.key}/lease/{live.lease}", {"stop": True})
                            self.event_rows.append((now, "preempt", job_id, "warned: saving its checkpoint"))
                if lease.ended_s <= now and (w.worker_id, i) not in self.ended:
                    self.ended.add((w.worker_id, i))
                    self.event_rows.append((now, "evicted", -1, agent.name))
                    self.fleet.terminate(agent)
                    self.down.add(agent.name)

    def _report_of(self, job_id: int, lease: int, elapsed_s: float) -> dict | None:
        """The outcome of a job whose agent died with its instance before reporting the round: the
        lease's report, if the job posted it before it died (None: it did not)."""
        key = f"{self.live[job_id].key}/report/{lease}"
        if not self.control.has(key):
            return None
        return {"job_id": job_id, "report": self.control.get(key), "elapsed_s": elapsed_s}

    def _settle_down(self) -> None:
        """Jobs that held a terminated instance's slots keep the checkpoint they saved in its warning (a
        ``preemptions`` row says what they lost: nothing, then); without one they are rolled back to the
        checkpoint before."""
        for job_id, live in list(self.live.items()):
            if not set(live.agents) & self.down:
                continue
            key = f"{live.key}/saved"
            if self.control.has(key):
                self.saved_step[job_id] = int(self.control.get(key))
            self._roll_back(job_id, evicted=True)

    def _revive(self) -> None:
        """Start the agent of every terminated instance that the trace has given back."""
        assert self.market is not None
        usable = {w for ids in self.market.slots for w in ids}
        for w, agent in self.agent_of_worker.items():
            if agent.name in self.down and w in usable:
                self.down.discard(agent.name)
                self.event_rows.append((self.now(), "instance_back", -1, agent.name))
                self.fleet.replace(agent, self.rounds_done)

    # --- tables -------------------------------------------------------------------------------------

    def _snapshot(self) -> None:
        assert self.snapshot_dir is not None and self.journal is not None
        self.snapshot_dir.mkdir(parents=True, exist_ok=True)
        for name, table in self._tables().items():
            write_parquet(self.snapshot_dir / f"{name}.parquet", table)
        self.journal.write({
            "scenario": self.scenario.name, "now": self.now(), "rounds": self.rounds_done,
            "known": self.known_step, "saved": self.saved_step, "completion": self.completion,
            "first_start": self.first_start, "tries": self.tries, "failed": self.failed,
            "last_failure": self._last_failure, "admitted": sorted(self.admitted),
            "round_rows": [list(row) for row in self.round_rows],
            "event_rows": [list(row) for row in self.event_rows],
            "preemptions": self.market.preemptions if self.market is not None else [],
        })  # fmt: skip

    def _restore(self) -> None:
        """Continue from the journal: every job from its checkpoint (``runtime.gavel.journal``)."""
        assert self.journal is not None
        state = self.journal.read()
        if state.get("scenario") != self.scenario.name or set(state["known"]) != set(self.known_step):
            raise InputError(str(self.journal.path), "--resume: the journal is of another scenario")
        self.known_step.update({k: int(v) for k, v in state["known"].items()})
        self.saved_step.update({k: int(v) for k, v in state["saved"].items()})
        self.completion.update(state["completion"])
        self.first_start.update(state["first_start"])
        self.tries.update(state["tries"])
        self.failed.update(state["failed"])
        self._last_failure.update(state["last_failure"])
        self.admitted.update(int(x) for x in state["admitted"])
        self.round_rows = [list(row) for row in state["round_rows"]]
        self.event_rows = [tuple(row) for row in state["event_rows"]]
        self.rounds_done = int(state["rounds"])
        self.resumed_at = float(state["now"])
        if self.market is not None:  # the fleet's state follows from the clock; what it did is journalled
            self.market.preemptions = list(state.get("preemptions", []))
            for w in self.market.workers:
                for i, lease in enumerate(w.leases):
                    if lease.warned_s <= self.resumed_at:
                        self.warned.add((w.worker_id, i))
                    if lease.ended_s <= self.resumed_at:
                        self.ended.add((w.worker_id, i))
        for job_id in sorted(self.known_step):
            self._take_back(job_id, self.known_step[job_id] - self.saved_step[job_id], self.resumed_at)
        self.event_rows.append((self.resumed_at, "resumed", -1, f"from round {self.rounds_done}"))

    def _tables(self) -> dict[str, pd.DataFrame]:
        scale = self.scenario.real.time_scale if self.scenario.real else 1.0
        jobs = jobs_table(self.jobs, self.first_start, self.completion, self.known_step, scale)
        rounds = pd.DataFrame([tuple(row) for row in self.round_rows], columns=list(GAVEL_TABLES["rounds"]))
        events = pd.DataFrame(self.event_rows, columns=list(GAVEL_TABLES["events"]))
        rounds, events = rounds.astype(GAVEL_TABLES["rounds"]), events.astype(GAVEL_TABLES["events"])
        tables = {"jobs": jobs, "rounds": rounds, "events": events}
        if self.market is not None:
            # The simulator's fleet tables (scenarios.gavel_fleet): what the rounds' slots cost, and the
            # fleet's bill up to the run's end.
            rounds["cost_usd"] = self.market.held_cost(rounds)
            rounds["worker_type"], rounds["spot"] = self.market.base_types(rounds["worker_type"])
            tables.update(self.market.tables(self.end_s or self.now()))
        return tables


def _merged(parts: list[dict]) -> dict:
    """One job's outcome from the agents of its servers: failed when any part failed."""
    failed = [part for part in parts if part["report"] is None]
    outcome = failed[0] if failed else parts[0]
    return {**outcome, "elapsed_s": max(float(part["elapsed_s"]) for part in parts)}


def _failure(outcome: dict) -> str:
    """Why a lease ended without a report, in a line: the exit status and the job's last words."""
    if outcome.get("killed"):
        return "killed at the round's deadline without a report"
    text = f"exit {outcome.get('exit')}"
    if outcome.get("error"):
        text += f": {outcome['error']}"
    return text


def run(
    scenario: Scenario,
    progress=None,
    workdir: Path | None = None,
    snapshot_dir: Path | None = None,
    *,
    resume: bool = False,
) -> RunResult:
    """Run ``scenario`` for real. Checkpoints and job logs live in ``workdir`` (default: ``work/`` in
    ``snapshot_dir``, where a resumed run finds them; else a temporary folder)."""
    import tempfile

    if workdir is None and snapshot_dir is not None:
        return RealGavel(scenario, snapshot_dir / "work", progress, snapshot_dir, resume=resume).run()
    with tempfile.TemporaryDirectory(prefix="clustertwin-real-") as tmp:
        return RealGavel(scenario, workdir or Path(tmp), progress, snapshot_dir, resume=resume).run()
