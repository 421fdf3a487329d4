"""Job-level SimPy executor for Gavel ([Narayanan], §5.5 and §5.7 "simulator").

Simulated time advances a whole round (or, for the ideal mechanism, to the next event) at a time; a job's
progress inside a round is computed in closed form from its throughput on its placement, never by ticking.
All decisions are the shared ``policies.gavel.GavelScheduler``'s: this module only makes time pass, moves
steps, and writes the event tables.

Event semantics follow the artifact: arrivals are admitted at round boundaries; a job that
finishes mid-round leaves its GPUs idle until the round ends; a round ends at its length or when every job
in it has finished, whichever is first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import simpy
from clustertwin.policies.gavel.cluster import ClusterLayout
from clustertwin.policies.gavel.scheduler import (
    ONLINE_SMOOTHING,
    GavelScheduler,
    JobSpec,
    RoundPlan,
    SchedulerConfig,
)
from clustertwin.policies.registry import AllocationPolicy
from clustertwin.scenarios.gavel_workload import GavelJob, jobs_table
from clustertwin.sim.gavel.progress import lone_slots_round, round_progress

if TYPE_CHECKING:
    from clustertwin.scenarios.gavel_fleet import MarketHook
    from clustertwin.sim.gavel.host import HostModel

Progress = Callable[[float, str], None]

TIME_EPSILON_S = 1e-6


@dataclass(frozen=True)
class MechanismConfig:
    round_s: float = 360.0
    ideal: bool = False
    preemption_overhead_s: tuple[float, ...] = ()  # per worker type; empty: none
    overhead_on_first_start: bool = False  # Gavel's simulator charges only resumptions
    min_reset_interval_s: float = 1920.0
    stop_when_window_done: bool = True


Colocation = Callable[[JobSpec, JobSpec], np.ndarray | None]


class GavelSimulation:
    def __init__(
        self,
        layout: ClusterLayout,
        jobs: list[GavelJob],
        policy: AllocationPolicy,
        mechanism: MechanismConfig,
        seed: int,
        colocation: Colocation | None = None,
        prices: np.ndarray | None = None,
        progress: Progress | None = None,
        entity_weights: dict[int, float] | None = None,
        policy_colocation: Colocation | None = None,
        market: MarketHook | None = None,
        policy_throughputs: dict[int, np.ndarray] | None = None,
        scheduler: GavelScheduler | None = None,
        host: HostModel | None = None,
        learn_pairs: bool = False,
    ) -> None:
        """``colocation`` moves shared jobs; ``policy_colocation`` (default: the same) is what the policy
        believes about pairs, e.g. estimates from profiling (§5.3.3). ``market`` (``scenarios.gavel_fleet``)
        makes the cluster a cloud fleet whose workers come and go with spot prices ([Narayanan] §6).
        ``policy_throughputs`` (job id → throughput row) is what the policy starts from when it differs
        from the jobs' true throughputs; it then learns each job's rates from its rounds as the real
        backend does, while jobs move at the true ones. ``scheduler``: one built from a scenario
        (``scenarios.gavel_scheduler.build_scheduler``, as the real runtime builds its own), in place of
        the one the other arguments describe. ``host`` (``sim.gavel.host``): the machine whose cores
        the slots of some types share; jobs on it run slower together. ``learn_pairs``: the policy plans
        pairs from estimates (§5.3.3), so a pair's rates measured in a shared round replace them as they
        do for real (Gavel's simulator sets a pair's estimate to its true rate once it has run)."""
        self.layout = layout
        self.jobs = sorted(jobs, key=lambda j: (j.spec.arrival_s, j.spec.job_id))
        self.by_id = {j.spec.job_id: j for j in jobs}
        self.mechanism = mechanism
        self.scheduler = scheduler or GavelScheduler(
            layout,
            policy,
            np.random.default_rng(seed),
            SchedulerConfig(mechanism.round_s, mechanism.min_reset_interval_s),
            colocation=policy_colocation or colocation,
            prices=prices,
            entity_weights=entity_weights,
        )
        self.colocation = colocation
        self.host = host
        self.market = market
        self.policy_throughputs = policy_throughputs
        self.learn_pairs = learn_pairs or policy_throughputs is not None
        # Rounds of lone one-GPU jobs on a dedicated machine room take one compiled pass (`_run_lone_round`).
        self._lone_rounds = host is None and market is None and not self.learn_pairs
        self.progress = progress
        self.env = simpy.Environment()
        self.arrived: simpy.Store = simpy.Store(self.env)
        self.first_start: dict[int, float] = {}
        self.completion: dict[int, float] = {}
        size = max(self.by_id) + 1 if self.by_id else 0
        self.has_run = np.zeros(size, dtype=bool)
        self.remaining = np.zeros(size)
        self.rate_consolidated = np.zeros((size, len(layout.worker_types)))
        self.rate_spread = np.zeros((size, len(layout.worker_types)))
        for j in jobs:
            self.remaining[j.spec.job_id] = j.spec.total_steps
            self.rate_consolidated[j.spec.job_id] = j.spec.throughputs
            self.rate_spread[j.spec.job_id] = j.unconsolidated
        self._overhead_per_type = np.zeros(len(layout.worker_types))
        self._overhead_per_type[: len(mechanism.preemption_overhead_s)] = mechanism.preemption_overhead_s
        self.window_left = sum(j.in_window for j in jobs)
        self.window_total = max(self.window_left, 1)
        # The per-job-per-round table as the rounds gave it: per round a row count and one array (or one
        # value for every row) per column, assembled once (`_rounds_frame`).
        self._round_chunks: list[tuple[int, tuple[np.ndarray | float, ...]]] = []
        self._kept_rows = 0
        self.rounds_file: Path | None = None
        self._rounds_writer: pq.ParquetWriter | None = None
        self.job_rounds = 0  # Σ over rounds of the jobs active in the round (a run's cost scales with it)
        self.max_active = 0
        self.event_rows: list[tuple] = []
        self.num_rounds = 0
        self.num_arrived = 0
        self.stalled = False

    # --- processes ----------------------------------------------------------------------------------

    def arrivals(self):
        for job in self.jobs:
            delay = job.spec.arrival_s - self.env.now
            if delay > 0:
                yield self.env.timeout(delay)
            self.arrived.put(job)  # an unbounded store takes it at once: same-time arrivals land together
            self.num_arrived += 1

    def rounds(self):
        sched = self.scheduler
        while not self._finished():
            if self._arrival_due():
                # A job that arrives at the very instant a round starts is there when it is planned (its
                # arrival is <= the round's start), whichever of the two timeouts SimPy fires first: a
                # zero timeout lets the arrival process put it before we admit.
                yield self.env.timeout(0)
            self._admit()
            if self.market is not None:
                self.market.sync(self.scheduler, self.event_rows, self.env.now)
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
            plan = sched.next_round()
            if not len(plan):
                yield from self._wait_for_reset_or_arrival()
                continue
            if self._lone_rounds and plan.first_gpus is not None:
                yield from self._run_lone_round(plan)
            else:
                yield from self._run_round(plan)

    # --- one round ----------------------------------------------------------------------------------

    def _run_lone_round(self, plan: RoundPlan):
        """`_run_round` for a plan of single jobs on one GPU each (``plan.first_gpus``), on a cluster with no
        host model or market, whose policy plans with the true throughputs: the most common round of a
        single-GPU trace, in one compiled call (`progress.lone_slots_round`)."""
        start = float(self.env.now)
        jobs = np.ascontiguousarray(plan.members[:, 0])  # one layout, so one compiled version
        steps, finishes, end, seconds, first, latest = lone_slots_round(
            jobs,
            plan.worker_types,
            plan.consolidated,
            plan.renewed,
            self.rate_consolidated,
            self.rate_spread,
            self._overhead_per_type,
            self.mechanism.overhead_on_first_start,
            self.has_run,
            self.remaining,
            start,
            self.mechanism.round_s,
        )
        yield self.env.timeout(latest - start)
        for m in jobs[first].tolist():
            self.first_start[m] = start
        self._count_active()
        self._keep_rows(
            (
                self.num_rounds,
                start,
                end,
                jobs,
                plan.worker_types,
                1,
                plan.consolidated,
                plan.renewed,
                steps,
                -1,
            )
        )
        self.scheduler.record_round(plan, seconds, (jobs, steps), latest - start)
        self.num_rounds += 1
        self._complete_all(end[finishes], jobs[finishes])

    def _count_active(self) -> None:
        active = len(self.scheduler.jobs)
        self.job_rounds += active
        self.max_active = max(self.max_active, active)

    def _complete_all(self, times: np.ndarray, jobs: np.ndarray) -> None:
        """The jobs that finished in a round, in order of their finish."""
        for t, m in sorted(zip(times.tolist(), jobs.tolist(), strict=True)):
            self._complete(m, t)

    def _run_round(self, plan: RoundPlan):
        start = self.env.now
        length = self.mechanism.round_s
        combo, jobs, shared = self._slots(plan)
        alone = len(jobs) == len(plan)  # one slot per combination: slot i is combination i

        def per_slot(values: np.ndarray) -> np.ndarray:
            return values if alone else values[combo]

        types = per_slot(plan.worker_types)
        rate = self._slot_rates(plan, combo, jobs, types)
        if alone:
            ran_before = self.has_run[jobs]
        else:
            ran_before = np.zeros(len(plan), dtype=bool)
            np.logical_or.at(ran_before, combo, self.has_run[jobs])
        charged = ~plan.renewed & (ran_before | self.mechanism.overhead_on_first_start)
        overhead = np.where(charged, self._overhead_per_type[plan.worker_types], 0.0)
        if self.host is not None:
            # Jobs on a shared host train, and restart, at the speed its cores allow them together.
            gpus = np.array([len(g) for g in plan.gpus], dtype=float)[combo]
            speed = self.host.speed(types, gpus)
            rate = np.where(self.host.on_host[types], rate * speed, rate)
            overhead = np.where(self.host.on_host[plan.worker_types], overhead / speed, overhead)
        overhead = np.minimum(overhead, length)
        slot_overhead = overhead if alone else overhead[combo]
        left = self.remaining[jobs]
        steps, finishes, finish_t = round_progress(rate, left, slot_overhead, start, length)
        preempted = None
        if self.market is not None:
            # A worker terminated mid-round takes its jobs' progress since their last checkpoint (the
            # round's start) with it, unless they finished first; the slot ends at the termination.
            cut = self.market.cut_times(plan, start, length)[combo]
            preempted = cut < np.where(finishes, finish_t, start + length)
            if preempted.any():
                lost = np.minimum(rate * np.maximum(cut - start - slot_overhead, 0.0), left)
                for i in np.flatnonzero(preempted).tolist():
                    c = int(combo[i])
                    self.market.record_preemption(
                        float(cut[i]),
                        int(jobs[i]),
                        self.market.workers_of(plan, c),
                        float(lost[i]),
                        len(plan.gpus[c]) * float(cut[i] - start) / len(plan.job_ids[c]),
                    )
                    self.event_rows.append((float(cut[i]), "preempt", int(jobs[i]), "evicted"))
                finishes = finishes & ~preempted
                steps = np.where(preempted, 0.0, steps)
                finish_t = np.where(preempted, cut, finish_t)
        if alone:
            combo_end = np.minimum(finish_t, start + length)
        else:
            combo_end = np.full(len(plan), -np.inf)
            np.maximum.at(combo_end, combo, finish_t)
            combo_end = np.minimum(combo_end, start + length)
        latest = float(combo_end.max())
        yield self.env.timeout(latest - start)

        for m in jobs[~self.has_run[jobs]].tolist():
            self.first_start[m] = start
        self.has_run[jobs] = True
        self.remaining[jobs] -= steps  # a finishing slot's steps are what it had left: 0 remains
        self._count_active()
        self._keep_rows(
            (
                self.num_rounds,
                start,
                np.where(finishes if preempted is None else finishes | preempted, finish_t, latest),
                jobs,
                types,
                per_slot(plan.num_gpus),
                per_slot(plan.consolidated),
                per_slot(plan.renewed),
                steps,
                shared,
            )
        )
        seconds = combo_end - start - overhead
        if preempted is not None and preempted.any():
            # A preempted combination received nothing it keeps: no credit towards its share.
            seconds[combo[preempted]] = 0.0
        self.scheduler.record_round(plan, seconds, (jobs, steps), latest - start)
        if self.policy_throughputs is not None:
            # Each lease's steps/s as the real backend measures it (alone on its workers, trained, not
            # evicted) feeds the policy's estimate of that job on that type.
            measured = (shared < 0) & (steps > 0)
            if preempted is not None:
                measured &= ~preempted
            for m, j, r in zip(
                jobs[measured].tolist(), types[measured].tolist(), rate[measured].tolist(), strict=True
            ):
                self.scheduler.observe_throughput(m, j, r, ONLINE_SMOOTHING)
        if self.learn_pairs:
            # A shared lease's pair of rates (both trained, neither evicted) feeds the pair's estimate.
            for c, key in enumerate(plan.job_ids):
                slots = np.flatnonzero(combo == c)
                evicted = preempted is not None and preempted[slots].any()
                if len(key) == 2 and (steps[slots] > 0).all() and not evicted:
                    pair = (float(rate[slots[0]]), float(rate[slots[1]]))
                    self.scheduler.observe_pair(key, int(plan.worker_types[c]), pair, ONLINE_SMOOTHING)
        self.num_rounds += 1
        self._complete_all(finish_t[finishes], jobs[finishes])

    @staticmethod
    def _slots(plan: RoundPlan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One slot per job in the plan: its combination, the job, and its partner (-1 when alone)."""
        members = plan.members
        shared = members[:, 1] >= 0
        if not shared.any():
            return np.arange(len(plan)), members[:, 0], np.full(len(plan), -1, dtype=np.int64)
        # A pair gives two slots in a row, its first member's then its second's.
        combo = np.repeat(np.arange(len(plan)), np.where(shared, 2, 1))
        first = np.ones(len(combo), dtype=bool)
        first[1:] = combo[1:] != combo[:-1]
        jobs = np.where(first, members[combo, 0], members[combo, 1])
        shared_with = np.where(
            members[combo, 1] < 0, -1, np.where(first, members[combo, 1], members[combo, 0])
        )
        return combo, jobs, shared_with

    def _slot_rates(
        self, plan: RoundPlan, combo: np.ndarray, jobs: np.ndarray, types: np.ndarray
    ) -> np.ndarray:
        """Each slot's throughput on its placement: consolidated or spread, alone or shared."""
        alone = len(jobs) == len(plan)  # one slot per combination: no gather, no pairs
        consolidated = plan.consolidated if alone else plan.consolidated[combo]
        rate = np.where(consolidated, self.rate_consolidated[jobs, types], self.rate_spread[jobs, types])
        if alone:
            return rate
        for c, key in enumerate(plan.job_ids):
            if len(key) == 2:
                assert self.colocation is not None
                pair = self.colocation(self.by_id[key[0]].spec, self.by_id[key[1]].spec)
                slots = np.flatnonzero(combo == c)
                j = int(plan.worker_types[c])
                rate[slots] = (0.0, 0.0) if pair is None else pair[j]
        return rate

    # --- the ideal mechanism: exact time fractions, no rounds ----------------------------------------

    def _ideal_step(self):
        """Advance to the next arrival, completion or allowed reset with every job at rate τ_m(X)."""
        sched = self.scheduler
        rates = sched.rates()
        now = self.env.now
        horizon = [t for t in (sched.next_reset_s(),) if t is not None and t > now]
        if self.num_arrived < len(self.jobs):
            # An arrival due now but not yet put by the arrival process gives dt = 0: a zero timeout
            # lets that process run first.
            horizon.append(max(self.jobs[self.num_arrived].spec.arrival_s, now))
        finish = {m: now + self.remaining[m] / rate for m, rate in rates.items() if rate > 0}
        horizon.extend(finish.values())
        if not horizon:
            job = yield self.arrived.get()
            self._add(job)
            return
        yield self.env.timeout(min(horizon) - now)
        dt = self.env.now - now
        self._record_interval(now, dt, rates)
        for m, rate in rates.items():
            if rate <= 0:
                continue
            self.first_start.setdefault(m, now)
            # Time, not steps, decides completion: near the end a job's remaining steps can fall below
            # what a float can resolve of the absolute clock.
            if finish[m] <= self.env.now + TIME_EPSILON_S:
                self.scheduler.record_progress(m, self.remaining[m])
                self.remaining[m] = 0.0
                self._complete(m, self.env.now)
            else:
                steps = rate * dt
                self.remaining[m] -= steps
                self.scheduler.record_progress(m, steps)

    def _record_interval(self, start: float, dt: float, rates: dict[int, float]) -> None:
        """Ideal-mode rows: job m held sf_m GPUs of type j for X[m,j]·dt of the interval."""
        if dt <= 0 or not rates:
            return
        fractions = self.scheduler.time_fractions()
        jobs = np.array([m for m in rates if m in fractions], dtype=np.int64)
        if not len(jobs):
            return
        x = np.array([fractions[m] for m in jobs.tolist()])
        m_idx, types = np.nonzero(x > 1e-12)
        jobs, share = jobs[m_idx], x[m_idx, types]
        sf = np.array([self.by_id[m].spec.scale_factor for m in jobs.tolist()], dtype=np.int64)
        rate = np.array([rates[m] for m in jobs.tolist()])
        spec_rate = self.rate_consolidated[jobs, types]
        self._keep_rows(
            (
                -1,
                start,
                start + share * dt,
                jobs,
                types,
                sf,
                True,
                True,
                np.where(rate > 0, spec_rate * share * dt, 0.0),
                -1,
            )
        )

    # --- helpers ------------------------------------------------------------------------------------

    def _wait_for_reset_or_arrival(self):
        """Nothing is runnable: jobs wait for the next allowed reset (or an arrival, whichever is first)."""
        now = self.env.now
        wake = self.scheduler.next_reset_s()
        if self.market is not None:
            # Workers may come back (or prices move) before any reset or arrival.
            wakes = [t for t in (wake, self.market.next_change_s(now)) if t is not None and t > now]
            if self.num_arrived < len(self.jobs):
                wakes.append(max(self.jobs[self.num_arrived].spec.arrival_s, now))
            if wake is not None and wake <= now:
                return
            if wakes:
                yield self.env.timeout(min(wakes) - now)
            elif self.num_arrived < len(self.jobs) or self.arrived.items:
                job = yield self.arrived.get()
                self._add(job)
            else:
                # Every job has arrived, none can run, and the market never changes again (the trace's
                # last price strands the fleet): the run ends with those jobs unfinished.
                self.event_rows.append((now, "stalled", -1, f"{len(self.scheduler.jobs)} jobs cannot run"))
                self.stalled = True
            return
        if wake is not None and wake > now:
            yield self.env.timeout(wake - now)
        elif wake is None:
            job = yield self.arrived.get()
            self._add(job)

    def _arrival_due(self) -> bool:
        return (
            self.num_arrived < len(self.jobs) and self.jobs[self.num_arrived].spec.arrival_s <= self.env.now
        )

    def _admit(self) -> None:
        while self.arrived.items:
            self._add(self.arrived.items.pop(0))

    def _add(self, job: GavelJob) -> None:
        self.scheduler.add_job(self._believed(job.spec))
        self.event_rows.append((self.env.now, "admit", job.spec.job_id, job.spec.job_type))

    def _believed(self, spec: JobSpec) -> JobSpec:
        if self.policy_throughputs is None:
            return spec
        return replace(spec, throughputs=self.policy_throughputs[spec.job_id])

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
        if self.stalled:
            return True
        if self.mechanism.stop_when_window_done and self.window_left == 0:
            return True
        return len(self.completion) == len(self.jobs)

    # --- run and tables -----------------------------------------------------------------------------

    def run(self) -> dict[str, pd.DataFrame]:
        self.env.process(self.arrivals())
        done = self.env.process(self.rounds())
        self.env.run(until=done)
        return self.tables()

    def stream_rounds(self, path: Path) -> None:
        """Write the per-job-per-round table to the Parquet file ``path`` in chunks as the run goes,
        instead of keeping it (``tables()`` then returns it empty): a long run's memory then does not
        grow with it. Call before :meth:`run`."""
        if self.market is not None:
            raise ValueError("a market's round costs need the rounds table in memory: it cannot stream")
        self.rounds_file = path

    def _keep_rows(self, values: tuple[np.ndarray | float, ...]) -> None:
        """Append rows to the per-job-per-round table: one array (or one value for every row) per column."""
        rows = next(len(v) for v in values if isinstance(v, np.ndarray))
        self._round_chunks.append((rows, values))
        self._kept_rows += rows
        if self.rounds_file is not None and self._kept_rows >= STREAM_CHUNK_ROWS:
            self._flush_rounds()

    def _flush_rounds(self) -> None:
        """Append the rows kept so far to ``rounds_file`` and drop them."""
        assert self.rounds_file is not None
        table = pa.Table.from_pandas(self._rounds_frame(), preserve_index=False)
        if self._rounds_writer is None:
            self._rounds_writer = pq.ParquetWriter(self.rounds_file, table.schema)
        self._rounds_writer.write_table(table)
        self._round_chunks = []
        self._kept_rows = 0

    def _rounds_frame(self) -> pd.DataFrame:
        counts = np.array([rows for rows, _ in self._round_chunks], dtype=np.int64)
        columns = {}
        for c, (name, dtype) in enumerate(_ROUND_COLUMNS):
            parts = [values[c] for _, values in self._round_chunks]
            if not parts:
                columns[name] = np.zeros(0, dtype=dtype)
            elif any(isinstance(v, np.ndarray) for v in parts):
                columns[name] = np.concatenate(
                    [
                        v if isinstance(v, np.ndarray) else np.full(n, v)
                        for v, n in zip(parts, counts, strict=True)
                    ]
                ).astype(dtype, copy=False)
            else:
                columns[name] = np.repeat(np.array(parts, dtype=dtype), counts)
        rounds = pd.DataFrame(columns, copy=False)  # fresh arrays: no need to copy them into one block
        rounds["worker_type"] = np.array(self.layout.worker_types, dtype=object)[
            rounds["worker_type"].to_numpy()
        ]
        return rounds

    def tables(self) -> dict[str, pd.DataFrame]:
        ids = [j.spec.job_id for j in self.jobs]
        made = np.array([j.spec.total_steps for j in self.jobs]) - self.remaining[ids]
        steps = dict(zip(ids, made.tolist(), strict=True))
        jobs = jobs_table(self.jobs, self.first_start, self.completion, steps)
        if self.rounds_file is not None:
            self._flush_rounds()
            assert self._rounds_writer is not None
            self._rounds_writer.close()
            self._rounds_writer = None
        rounds = self._rounds_frame()
        events = pd.DataFrame(self.event_rows, columns=["time_s", "kind", "job_id", "detail"])
        events = events.astype({"time_s": "float64", "kind": str, "job_id": "int64", "detail": str})
        tables = {"jobs": jobs, "rounds": rounds, "events": events}
        if self.market is not None:
            # Rounds name the Gavel type (v100), with a flag for the spot half of a split type, and what
            # the GPUs held cost (pay-per-use; the fleet's bill is the billing table).
            rounds["cost_usd"] = self.market.held_cost(rounds)
            rounds["worker_type"], rounds["spot"] = self.market.base_types(rounds["worker_type"])
            tables.update(self.market.tables(float(self.env.now)))
        return tables


# Rows of the per-job-per-round table kept in memory before a streamed run writes them out.
STREAM_CHUNK_ROWS = 1_000_000


_ROUND_COLUMNS = (
    ("round", np.int64),
    ("start_s", float),
    ("end_s", float),
    ("job_id", np.int64),
    ("worker_type", np.int64),
    ("num_gpus", np.int64),
    ("consolidated", bool),
    ("renewed", bool),
    ("steps", float),
    ("shared_with", np.int64),
)
