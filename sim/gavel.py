"""Job-level SimPy executor for Gavel (seed 001, §5.5 and §5.7 "simulator").

Simulated time advances a whole round (or, for the ideal mechanism, to the next event) at a time; a job's
progress inside a round is computed in closed form from its throughput on its placement, never by ticking.
All decisions are the shared ``policies.gavel.GavelScheduler``'s: this module only makes time pass, moves
steps, and writes the event tables.

Event semantics follow the artifact (notes §6.1.6): arrivals are admitted at round boundaries; a job that
finishes mid-round leaves its GPUs idle until the round ends; a round ends at its length or when every job
in it has finished, whichever is first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import simpy

from policies.gavel.cluster import ClusterLayout
from policies.gavel.scheduler import Assignment, GavelScheduler, JobSpec, SchedulerConfig
from policies.registry import AllocationPolicy

Progress = Callable[[float, str], None]


@dataclass(frozen=True)
class SimJob:
    """A job of the workload with everything the simulator needs to move it."""

    spec: JobSpec
    unconsolidated: np.ndarray  # (k,) steps/s when spread over more servers than needed
    in_window: bool


@dataclass(frozen=True)
class MechanismConfig:
    round_s: float = 360.0
    ideal: bool = False
    preemption_overhead_s: float = 0.0
    min_reset_interval_s: float = 1920.0
    stop_when_window_done: bool = True


Colocation = Callable[[JobSpec, JobSpec], np.ndarray | None]


class GavelSimulation:
    def __init__(
        self,
        layout: ClusterLayout,
        jobs: list[SimJob],
        policy: AllocationPolicy,
        mechanism: MechanismConfig,
        seed: int,
        colocation: Colocation | None = None,
        prices: np.ndarray | None = None,
        progress: Progress | None = None,
    ) -> None:
        self.layout = layout
        self.jobs = sorted(jobs, key=lambda j: (j.spec.arrival_s, j.spec.job_id))
        self.by_id = {j.spec.job_id: j for j in jobs}
        self.mechanism = mechanism
        self.scheduler = GavelScheduler(
            layout,
            policy,
            np.random.default_rng(seed),
            SchedulerConfig(mechanism.round_s, mechanism.min_reset_interval_s),
            colocation=colocation,
            prices=prices,
        )
        self.colocation = colocation
        self.progress = progress
        self.env = simpy.Environment()
        self.arrived: simpy.Store = simpy.Store(self.env)
        self.first_start: dict[int, float] = {}
        self.completion: dict[int, float] = {}
        size = max(self.by_id) + 1 if self.by_id else 0
        self.has_run = np.zeros(size, dtype=bool)
        self.remaining = np.zeros(size)
        for j in jobs:
            self.remaining[j.spec.job_id] = j.spec.total_steps
        self.window_left = sum(j.in_window for j in jobs)
        self.window_total = max(self.window_left, 1)
        self.round_rows: list[tuple] = []
        self.event_rows: list[tuple] = []
        self.num_rounds = 0
        self.num_arrived = 0

    # --- processes ----------------------------------------------------------------------------------

    def arrivals(self):
        for job in self.jobs:
            delay = job.spec.arrival_s - self.env.now
            if delay > 0:
                yield self.env.timeout(delay)
            yield self.arrived.put(job)
            self.num_arrived += 1

    def rounds(self):
        sched = self.scheduler
        while not self._finished():
            self._admit()
            if not sched.jobs:
                job = yield self.arrived.get()
                self._add(job)
                continue
            now = self.env.now
            if sched.reset_due(now):
                sched.reset(now)
                self.event_rows.append((now, "reset", -1, f"{len(sched.jobs)} jobs"))
            if self.mechanism.ideal:
                yield from self._ideal_step()
                continue
            assignments = sched.next_round()
            if not assignments:
                yield from self._wait_for_reset_or_arrival()
                continue
            yield from self._run_round(assignments)

    # --- one round ----------------------------------------------------------------------------------

    def _run_round(self, assignments: list[Assignment]):
        start = self.env.now
        length = self.mechanism.round_s
        remaining = self.remaining
        plans = []
        latest = start
        for a in assignments:
            overhead = 0.0
            if not a.renewed and any(self.has_run[m] for m in a.job_ids):
                overhead = min(self.mechanism.preemption_overhead_s, length)
            run = length - overhead
            steps = []
            finish = []
            for m, rate in zip(a.job_ids, self._rates(a), strict=True):
                left = remaining[m]
                if rate > 0 and rate * run >= left:
                    steps.append(left)
                    finish.append(start + overhead + left / rate)
                else:
                    steps.append(rate * run)
                    finish.append(None)
            end = start + length if None in finish else max(finish)
            latest = max(latest, end)
            plans.append((a, overhead, steps, finish, end))
        yield self.env.timeout(latest - start)

        ran = []
        rows = self.round_rows
        names = self.layout.worker_types
        for a, overhead, steps, finish, end in plans:
            pair = len(a.job_ids) == 2
            for i, m in enumerate(a.job_ids):
                if not self.has_run[m]:
                    self.has_run[m] = True
                    self.first_start[m] = start
                remaining[m] -= steps[i]
                other = a.job_ids[1 - i] if pair else -1
                rows.append((self.num_rounds, start, finish[i] or latest, m, names[a.worker_type], len(a.gpus),
                             a.consolidated, a.renewed, steps[i], other))
            ran.append((a, end - start - overhead, dict(zip(a.job_ids, steps, strict=True))))
        self.scheduler.record_round(ran, latest - start)
        self.num_rounds += 1
        done = [(t, m) for a, _, _, finish, _ in plans for m, t in zip(a.job_ids, finish, strict=True) if t is not None]
        for t, m in sorted(done):
            self._complete(m, t)
    def _rates(self, a: Assignment) -> list[float]:
        if len(a.job_ids) == 2:
            assert self.colocation is not None
            a_spec, b_spec = (self.by_id[m].spec for m in a.job_ids)
            pair = self.colocation(a_spec, b_spec)
            return [0.0, 0.0] if pair is None else [float(pair[a.worker_type, 0]), float(pair[a.worker_type, 1])]
        job = self.by_id[a.job_ids[0]]
        table = job.spec.throughputs if a.consolidated else job.unconsolidated
        return [float(table[a.worker_type])]

    # --- the ideal mechanism: exact time fractions, no rounds ----------------------------------------

    def _ideal_step(self):
        """Advance to the next arrival, completion or allowed reset with every job at rate τ_m(X)."""
        sched = self.scheduler
        rates = sched.rates()
        now = self.env.now
        horizon = [t for t in (sched.next_reset_s(),) if t is not None and t > now]
        if self.num_arrived < len(self.jobs):
            # An arrival due now but not yet put by the arrival process gives dt = 0: a zero timeout lets it run.
            horizon.append(max(self.jobs[self.num_arrived].spec.arrival_s, now))
        for m, rate in rates.items():
            if rate > 0:
                horizon.append(now + self.remaining[m] / rate)
        if not horizon:
            job = yield self.arrived.get()
            self._add(job)
            return
        dt = min(horizon) - now
        yield self.env.timeout(dt)
        for m, rate in rates.items():
            if rate > 0:
                self.first_start.setdefault(m, now)
                left = self.remaining[m]
                steps = min(rate * dt, left)
                self.remaining[m] -= steps
                sched.record_progress(m, steps)
                if rate * dt >= left - 1e-9 * max(left, 1.0):
                    self._complete(m, self.env.now)

    # --- helpers ------------------------------------------------------------------------------------

    def _wait_for_reset_or_arrival(self):
        """Nothing is runnable: jobs wait for the next allowed reset (or an arrival, whichever is first)."""
        now = self.env.now
        wake = self.scheduler.next_reset_s()
        if wake is not None and wake > now:
            yield self.env.timeout(wake - now)
        elif wake is None:
            job = yield self.arrived.get()
            self._add(job)

    def _admit(self) -> None:
        while self.arrived.items:
            self._add(self.arrived.items.pop(0))

    def _add(self, job: SimJob) -> None:
        self.scheduler.add_job(job.spec)
        self.event_rows.append((self.env.now, "admit", job.spec.job_id, job.spec.job_type))

    def _complete(self, job_id: int, t: float) -> None:
        self.completion[job_id] = t
        self.scheduler.remove_job(job_id)
        self.event_rows.append((t, "complete", job_id, ""))
        if self.by_id[job_id].in_window:
            self.window_left -= 1
            if self.progress is not None:
                done = 1 - self.window_left / self.window_total
                self.progress(done, f"{len(self.completion)} jobs done, t={t / 3600:.1f} h")

    def _finished(self) -> bool:
        if self.mechanism.stop_when_window_done and self.window_left == 0:
            return True
        return len(self.completion) == len(self.jobs)

    # --- run and tables -----------------------------------------------------------------------------

    def run(self) -> dict[str, pd.DataFrame]:
        self.env.process(self.arrivals())
        done = self.env.process(self.rounds())
        self.env.run(until=done)
        return self.tables()

    def tables(self) -> dict[str, pd.DataFrame]:
        specs = [job.spec for job in sorted(self.jobs, key=lambda j: j.spec.job_id)]
        ids = np.array([s.job_id for s in specs], dtype=np.int64)
        total = np.array([s.total_steps for s in specs], dtype=float)
        jobs = pd.DataFrame({
            "job_id": ids,
            "job_type": [s.job_type for s in specs],
            "scale_factor": np.array([s.scale_factor for s in specs], dtype=np.int64),
            "weight": np.array([s.weight for s in specs], dtype=float),
            "arrival_s": np.array([s.arrival_s for s in specs], dtype=float),
            "first_start_s": np.array([self.first_start.get(int(m), np.nan) for m in ids]),
            "completion_s": np.array([self.completion.get(int(m), np.nan) for m in ids]),
            "total_steps": total,
            "steps_done": total - self.remaining[ids] if len(ids) else total,
            "slo_deadline_s": np.array([s.slo_deadline_s for s in specs], dtype=float),
            "in_window": np.array([self.by_id[int(m)].in_window for m in ids], dtype=bool),
        })
        columns = list(zip(*self.round_rows, strict=True)) if self.round_rows else [()] * 10
        rounds = pd.DataFrame({
            name: np.array(values, dtype=dtype)
            for (name, dtype), values in zip(_ROUND_COLUMNS, columns, strict=True)
        })
        events = pd.DataFrame(self.event_rows, columns=["time_s", "kind", "job_id", "detail"])
        events = events.astype({"time_s": "float64", "kind": str, "job_id": "int64", "detail": str})
        return {"jobs": jobs, "rounds": rounds, "events": events}


_ROUND_COLUMNS = (
    ("round", np.int64), ("start_s", float), ("end_s", float), ("job_id", np.int64), ("worker_type", object),
    ("num_gpus", np.int64), ("consolidated", bool), ("renewed", bool), ("steps", float), ("shared_with", np.int64),
)
