"""Gavel's scheduler as a transport-agnostic state machine ([Narayanan], §5.3.2 and §5.5).

The executor (the SimPy simulator or the wall-clock runtime) tells it what happened — a job arrived, a
round ran for so long and made so many steps, a job finished — and asks it what to do: whether to
recompute the allocation, and which combinations run where in the next round. It never reads a clock:
``now`` is always passed in.

Bookkeeping follows the artifact: allocation resets are triggered by arrivals and completions and
rate-limited to one per ``min_reset_interval_s``; at a reset each combination's deficit accumulates
``X·elapsed − received`` and its received time restarts at half a round on every type, as does a newly
added job's.

A budget (``makespan_budget``, [Narayanan] §6.4.3) is the run's total: each reset plans with what is left
of it, the budget less what the rounds so far held at the prices in effect (pay-per-use, Gavel's
``Σ price × GPU-time``).

Space sharing plans with the colocation oracle's pair throughputs until a pair is measured: a shared
round's measured rates (``observe_pair``) are blended into what the policy plans that pair with, as single
jobs' are (§5.3.3: throughputs are measured online as jobs run).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from clustertwin.policies.compiled import compiled
from clustertwin.policies.gavel.cluster import ClusterLayout
from clustertwin.policies.gavel.combos import ComboTable
from clustertwin.policies.gavel.isolated import isolated_fractions
from clustertwin.policies.gavel.mechanism import (
    load_compiled,
    place_round,
    plan_single_gpu_round,
    priorities,
    select_round,
)
from clustertwin.policies.gavel.problem import Allocation, AllocationInput, PairCandidates
from clustertwin.policies.registry import AllocationPolicy

# Job ids below this are mapped to their slots by an array (larger ones by a dict only).
_MAX_DENSE_ID = 1 << 24

# The weight of a new measurement in a job's smoothed throughput (§5.3.3; Gavel's artifact uses 0.5).
ONLINE_SMOOTHING = 0.5


@dataclass(frozen=True)
class JobSpec:
    """What the scheduler knows of a job when it arrives."""

    job_id: int
    job_type: str
    scale_factor: int
    total_steps: float
    arrival_s: float
    throughputs: np.ndarray  # (k,) steps/s per worker type, consolidated placement; 0 = cannot run
    weight: float = 1.0
    slo_deadline_s: float = float("inf")
    entity: int | None = None


@dataclass(frozen=True)
class Assignment:
    """One combination placed for one round."""

    job_ids: tuple[int, ...]  # one job, or two sharing the GPUs
    worker_type: int
    gpus: tuple[int, ...]
    consolidated: bool
    renewed: bool


@dataclass(frozen=True)
class RoundPlan:
    """The next round's assignments as aligned arrays (one entry per combination that runs).

    ``job_ids`` and ``gpus`` are lists of tuples, built from the arrays when first read where the
    scheduler did not need them itself (a round of one-GPU combinations gives ``first_gpus``)."""

    rows: np.ndarray  # (a,) the combinations' rows in the scheduler's table, for `record_round`
    worker_types: np.ndarray  # (a,) type index
    consolidated: np.ndarray  # (a,) bool
    renewed: np.ndarray  # (a,) bool: lease extended, no checkpoint
    members: np.ndarray  # (a, 2) the job ids of each combination, -1 for no partner
    first_gpus: np.ndarray | None = None  # (a,) when every combination holds one GPU: that GPU
    placed_gpus: list[tuple[int, ...]] | None = None  # the GPUs of each, where `first_gpus` is None

    def __len__(self) -> int:
        return len(self.rows)

    @functools.cached_property
    def job_ids(self) -> list[tuple[int, ...]]:
        """The jobs of each combination: one, or two sharing the GPUs."""
        return [(a,) if b < 0 else (a, b) for a, b in self.members.tolist()]

    @functools.cached_property
    def gpus(self) -> list[tuple[int, ...]]:
        """The GPUs each combination holds (of its worker type)."""
        if self.placed_gpus is not None:
            return self.placed_gpus
        assert self.first_gpus is not None
        return list(zip(self.first_gpus.tolist()))

    @functools.cached_property
    def num_gpus(self) -> np.ndarray:
        """(a,) GPUs each combination holds (computed once: the executor and the scheduler both read it)."""
        if self.first_gpus is not None:
            return np.ones(len(self.rows), dtype=np.int64)
        return np.fromiter(map(len, self.gpus), np.int64, len(self.gpus))

    def assignments(self) -> list[Assignment]:
        return [
            Assignment(jobs, int(j), gpus, bool(c), bool(r))
            for jobs, j, gpus, c, r in zip(
                self.job_ids, self.worker_types, self.gpus, self.consolidated, self.renewed, strict=True
            )
        ]


@dataclass(frozen=True)
class SchedulerConfig:
    round_s: float = 360.0
    min_reset_interval_s: float = 1920.0
    max_pairs: int = 256  # space sharing: candidate pairs kept per reset, best first


# A colocation oracle: the two jobs' throughputs per type when they share a GPU, or None if they can't.
Colocation = Callable[[JobSpec, JobSpec], np.ndarray | None]


@dataclass
class _JobState:
    spec: JobSpec
    slot: int  # the job's entry in the scheduler's per-job arrays (`_JobArrays`)


class _JobArrays:
    """Per-job numbers as arrays indexed by slot (one slot per job ever added, in order of arrival), so
    that a round's progress and a reset's inputs are array operations, not a loop over jobs."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.n = 0
        self.throughputs = np.zeros((16, k))
        self.job_ids = np.zeros(16, dtype=np.int64)
        self.numbers = {
            name: np.zeros(16)
            for name in (
                "scale_factor",
                "weight",
                "total_steps",
                "arrival_s",
                "slo_deadline_s",
                "steps_done",
                "iso_elapsed",
                "steps_at_reset",
            )
        }

    def add(self, spec: JobSpec) -> int:
        slot = self.n
        if slot == len(self.throughputs):
            grow = len(self.throughputs)
            self.throughputs = np.vstack([self.throughputs, np.zeros((grow, self.k))])
            self.numbers = {name: np.concatenate([v, np.zeros(grow)]) for name, v in self.numbers.items()}
            self.job_ids = np.concatenate([self.job_ids, np.zeros(grow, dtype=np.int64)])
        self.throughputs[slot] = spec.throughputs
        self.job_ids[slot] = spec.job_id
        for name in ("scale_factor", "weight", "total_steps", "arrival_s", "slo_deadline_s"):
            self.numbers[name][slot] = getattr(spec, name)
        self.n = slot + 1
        return slot

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self.__dict__["numbers"][name]
        except KeyError:
            raise AttributeError(name) from None


@compiled
def _add_steps(slot_by_id: np.ndarray, steps_done: np.ndarray, ids: np.ndarray, made: np.ndarray) -> bool:
    """``steps_done[slot of ids[i]] += made[i]`` when every id is mapped to an active slot by
    ``slot_by_id``; False, with nothing written, when one is not (the caller then looks it up by dict)."""
    for i in range(ids.size):
        if ids[i] < 0 or ids[i] >= slot_by_id.size or slot_by_id[ids[i]] < 0:
            return False
    for i in range(ids.size):
        steps_done[slot_by_id[ids[i]]] += made[i]
    return True


def _load_compiled() -> None:
    """Load the compiled loops a round goes through (`mechanism.load_compiled`), with the bookkeeping's."""
    load_compiled()
    zero = np.zeros(1, dtype=np.int64)
    _add_steps(zero, np.zeros(1), zero, np.zeros(1))
    table = ComboTable(1, 1.0)
    table.add((0,), 1, np.ones(1))
    table.record_round(zero, zero, None, np.ones(1, bool), np.zeros(1), 0.0, zero)


class GavelScheduler:
    def __init__(
        self,
        layout: ClusterLayout,
        policy: AllocationPolicy,
        rng: np.random.Generator,
        config: SchedulerConfig | None = None,
        colocation: Colocation | None = None,
        prices: np.ndarray | None = None,
        entity_weights: dict[int, float] | None = None,
        budget: float | None = None,
    ) -> None:
        self.layout = layout
        # The cluster at full size: a job must fit it, not only the workers up at the moment (on a cloud
        # fleet they come and go, :meth:`resize`).
        self.full_layout = layout
        self.policy = policy
        self.rng = rng
        self.config = config or SchedulerConfig()
        self.colocation = colocation
        self.prices = prices
        self.entity_weights = entity_weights or {}
        self.budget = budget
        self.spent_usd = 0.0  # under a budget: what the rounds so far held, at the prices in effect
        self.measured_pairs: dict[tuple[int, int], np.ndarray] = {}  # (a, b) -> (k, 2) steps/s
        self.aware = bool(getattr(policy, "aware", True))
        # t^iso is accumulated at every reset only for a policy that reads it (FTF).
        self._reads_iso = "iso_elapsed" in getattr(policy, "needs", ())
        self.space_sharing = bool(getattr(policy, "space_sharing", False)) and colocation is not None
        self.jobs: dict[int, _JobState] = {}
        self._arrays = _JobArrays(len(layout.worker_types))
        self._slot_of: dict[int, int] = {}
        # Job id → slot as an array too, for a round's jobs at once; ids beyond _MAX_DENSE_ID use the dict.
        self._slot_by_id = np.full(16, -1, dtype=np.int64)
        self._alive = np.zeros(16, dtype=bool)  # per slot: the job is active
        self._with_entity = 0
        self.combos = ComboTable(len(layout.worker_types), self.config.round_s)
        self._type_order = np.arange(len(layout.worker_types), dtype=np.int64)  # aware: fastest first
        self.allocation: Allocation | None = None
        self.last_input: AllocationInput | None = None
        self.last_reset_s: float | None = None
        self.prices_changed_s: float | None = None  # when prices last changed (cluster_reset_due)
        self.num_resets = 0
        self._dirty = False
        _load_compiled()  # before any round, so that a real run's first round does not wait for it

    # --- events from the executor -------------------------------------------------------------------

    def resize(self, gpus: tuple[int, ...], gpu_maps: Sequence[dict[int, int]]) -> None:
        """The cluster changed under the scheduler (spot evictions and returns): ``gpus`` per worker type
        now, and per type the old → new index of every GPU that is still there. Leases on GPUs that are
        gone are dropped; the caller decides when to :meth:`reset` for the new counts."""
        if len(gpus) != len(self.layout.worker_types) or len(gpu_maps) != len(gpus):
            raise ValueError(f"resize needs one GPU count and one map per worker type, got {gpus}")
        self.layout = replace(self.layout, gpus=tuple(gpus))
        self.combos.renumber(gpu_maps)

    def set_prices(self, prices: np.ndarray, now: float) -> bool:
        """Prices ($/GPU-hour per worker type) now; cost policies see them at the next reset, which a
        change asks for (:meth:`cluster_reset_due`). Returns whether they changed (the first prices the
        scheduler learns are not a change)."""
        changed = self.prices is not None and not np.array_equal(prices, self.prices)
        if changed:
            self.prices_changed_s = now
        self.prices = prices
        return changed

    def add_job(self, spec: JobSpec) -> None:
        if spec.job_id in self.jobs:
            raise ValueError(f"job {spec.job_id} added twice")
        if spec.scale_factor > max(self.full_layout.gpus):
            raise ValueError(
                f"job {spec.job_id} needs {spec.scale_factor} GPUs but no worker type has that many"
            )
        slot = self._arrays.add(spec)
        self.jobs[spec.job_id] = _JobState(spec, slot)
        self._slot_of[spec.job_id] = slot
        if 0 <= spec.job_id < _MAX_DENSE_ID:
            if spec.job_id >= len(self._slot_by_id):
                grown = np.full(max(2 * len(self._slot_by_id), spec.job_id + 1), -1, dtype=np.int64)
                grown[: len(self._slot_by_id)] = self._slot_by_id
                self._slot_by_id = grown
            self._slot_by_id[spec.job_id] = slot
        if slot >= len(self._alive):
            self._alive = np.concatenate([self._alive, np.zeros(len(self._alive), dtype=bool)])
        self._alive[slot] = True
        self._with_entity += spec.entity is not None
        self.combos.add((spec.job_id,), spec.scale_factor, np.zeros(self.layout_k))
        self._dirty = True

    def lease_lost(self, job_id: int) -> None:
        """The job's process no longer holds its workers (it died, or its machine did): its next
        placement starts it afresh, so it is never a renewed lease (§5.5), whatever GPUs it gets."""
        self.combos.forget_placement(job_id)

    def remove_job(self, job_id: int) -> None:
        state = self.jobs.pop(job_id)
        del self._slot_of[job_id]
        if 0 <= job_id < _MAX_DENSE_ID:
            self._slot_by_id[job_id] = -1
        self._alive[state.slot] = False
        self._with_entity -= state.spec.entity is not None
        self.combos.drop_job(job_id)
        self.measured_pairs = {k: v for k, v in self.measured_pairs.items() if job_id not in k}
        self._dirty = True

    def record_round(
        self,
        plan: RoundPlan,
        seconds: np.ndarray,
        steps: Mapping[int, float] | tuple[np.ndarray, np.ndarray],
        duration_s: float,
    ) -> None:
        """Account a finished round: entry i of the plan ran ``seconds[i]``; ``steps[job]`` steps were made
        (a mapping, or a pair of arrays: job ids and their steps, each job once).

        Call before removing the jobs that finished in the round.
        """
        if isinstance(steps, tuple):
            ids, made = steps
            ids = np.asarray(ids, dtype=np.int64)
            made = np.asarray(made, dtype=float)
            if not _add_steps(self._slot_by_id, self._arrays.steps_done, ids, made):
                # An id past the array's range (or not active: KeyError) is looked up by dict.
                slots = np.fromiter(map(self._slot_of.__getitem__, ids.tolist()), np.int64, len(ids))
                self._arrays.steps_done[slots] += made
        else:
            for job_id, n in steps.items():
                self._arrays.steps_done[self._slot_of[job_id]] += n
        if self.prices is not None and self.budget is not None:
            gpus = plan.num_gpus.astype(float)
            held = np.asarray(self.prices, dtype=float)[np.asarray(plan.worker_types, dtype=np.int64)]
            self.spent_usd += float(np.sum(held * gpus * np.asarray(seconds, dtype=float)) / 3600.0)
        self.combos.record_round(
            plan.rows,
            plan.worker_types,
            plan.gpus if plan.first_gpus is None else None,
            plan.consolidated,
            np.asarray(seconds, dtype=float),
            duration_s,
            plan.first_gpus,
        )

    def observe_throughput(self, job_id: int, worker_type: int, measured: float, smoothing: float) -> None:
        """A measured throughput (steps/s) of a job on a type, blended into what the policy plans with:
        ``new = smoothing·measured + (1 − smoothing)·old`` (§5.3.3: single-job throughputs are measured
        online as jobs run). It takes effect at the next allocation reset."""
        state = self.jobs.get(job_id)
        if state is None:
            return
        row = np.array(state.spec.throughputs, dtype=float)
        row[worker_type] = smoothing * measured + (1.0 - smoothing) * row[worker_type]
        state.spec = replace(state.spec, throughputs=row)
        self._arrays.throughputs[state.slot] = row

    def observe_pair(
        self, jobs: tuple[int, int], worker_type: int, measured: tuple[float, float], smoothing: float
    ) -> None:
        """Two jobs' measured throughputs (steps/s) while they shared GPUs of a type, blended into the
        pair throughputs the policy plans with (as :meth:`observe_throughput` does for one job); it
        takes effect at the next allocation reset."""
        a, b = jobs
        if a not in self.jobs or b not in self.jobs or self.colocation is None:
            return
        key, values = ((a, b), measured) if a < b else ((b, a), measured[::-1])
        row = self.measured_pairs.get(key)
        if row is None:
            believed = self.colocation(self.jobs[key[0]].spec, self.jobs[key[1]].spec)
            row = np.zeros((self.layout_k, 2)) if believed is None else np.array(believed, dtype=float)
        row = row.copy()
        old = row[worker_type]
        row[worker_type] = np.where(old > 0, smoothing * np.asarray(values) + (1.0 - smoothing) * old, values)
        self.measured_pairs[key] = row

    def record_progress(self, job_id: int, steps: float) -> None:
        """Progress outside rounds (the ideal mechanism)."""
        self._arrays.steps_done[self._slot_of[job_id]] += steps

    # --- decisions ----------------------------------------------------------------------------------

    @property
    def layout_k(self) -> int:
        return len(self.layout.worker_types)

    def reset_due(self, now: float) -> bool:
        """Jobs came or went since the last reset, and the rate limit allows one now."""
        return self._dirty and bool(self.jobs) and self._reset_allowed(now)

    def cluster_reset_due(self, now: float, resized: bool) -> bool:
        """Whether a change of the cluster calls for a reset now: at once when workers came or went
        (``resized``: X was computed for GPUs that are gone, or leaves new ones idle), and after a price
        change (:meth:`set_prices`) once the rate limit allows, so that cost policies plan at the new
        prices ([Narayanan] §6)."""
        if not self.jobs:
            return False
        if resized:
            return True
        pending = self.prices_changed_s is not None and (
            self.last_reset_s is None or self.last_reset_s < self.prices_changed_s
        )
        return pending and self._reset_allowed(now)

    def _reset_allowed(self, now: float) -> bool:
        return self.last_reset_s is None or now - self.last_reset_s >= self.config.min_reset_interval_s - 1e-9

    def next_reset_s(self) -> float | None:
        """When a pending reset becomes allowed (None when nothing is pending)."""
        if not self._dirty or not self.jobs:
            return None
        return 0.0 if self.last_reset_s is None else self.last_reset_s + self.config.min_reset_interval_s

    def reset(self, now: float) -> Allocation:
        """Recompute the allocation X for the active jobs (§5.3.1) and restart the priority bookkeeping."""
        inp = self._allocation_input(now)
        if self._reads_iso:
            self._accumulate_iso(inp)
        allocation = self.policy.allocate(inp, self.rng)
        keys: list[tuple[int, ...]] = [(m,) for m in inp.job_ids.tolist()]
        members = [np.column_stack([inp.job_ids, np.full(inp.n, -1)])]
        scale_factors, rows = [inp.scale_factors], [allocation.fractions]
        if allocation.pair_fractions is not None and allocation.pair_members is not None:
            for (a, b), x in zip(allocation.pair_members.tolist(), allocation.pair_fractions, strict=True):
                if x.sum() > 1e-9:
                    keys.append((a, b))
                    members.append(np.array([[a, b]]))
                    scale_factors.append(np.array([self.jobs[a].spec.scale_factor]))
                    rows.append(x[None, :])
        self.combos.reset(keys, np.concatenate(members), np.concatenate(scale_factors), np.concatenate(rows))
        self.allocation = allocation
        self.last_input = inp
        self.last_reset_s = now
        self.num_resets += 1
        self._dirty = False
        return allocation

    def next_round(self) -> RoundPlan:
        """The combinations that run in the next round, and where (Algorithm 2 plus placement)."""
        ct = self.combos
        if self.aware:
            order = self._type_order
        else:
            order = list(range(self.layout_k))
            self.rng.shuffle(order)
        if not ct.has_pairs and ct.one_gpu_each:
            rows, types, gpu, consolidated, renewed = plan_single_gpu_round(
                ct.allocation,
                ct.received,
                ct.elapsed,
                ct.deficit,
                self.layout,
                order,
                ct.last_type,
                ct.last_gpu,
                ct.last_consolidated,
            )
            return RoundPlan(rows, types, consolidated, renewed, ct.members[rows], first_gpus=gpu)
        rows, types = select_round(
            priorities(ct.allocation, ct.received, ct.elapsed),
            ct.deficit,
            ct.allocation,
            ct.keys,
            ct.scale_factors,
            np.asarray(self.layout.gpus),
            order,
            singles=not ct.has_pairs,
        )
        gpus, consolidated, renewed = place_round(
            self.layout,
            types,
            ct.scale_factors[rows],
            ct.last_type[rows],
            # map over a bound method: the same list as a comprehension, in half the time at ~100 rows
            list(map(ct.last_gpus.__getitem__, rows.tolist())),
            ct.last_consolidated[rows],
        )
        return RoundPlan(rows, types, consolidated, renewed, ct.members[rows], placed_gpus=gpus)

    def rates(self) -> dict[int, float]:
        """Each job's effective throughput τ_m(X) under the current allocation (the ideal mechanism)."""
        if self.allocation is None or self.last_input is None:
            return {}
        tau = self.allocation.effective_throughput(self.last_input)
        return {
            int(j): float(t) for j, t in zip(self.last_input.job_ids, tau, strict=True) if int(j) in self.jobs
        }

    def time_fractions(self) -> dict[int, np.ndarray]:
        """Each active job's row of X (time fraction per type) under the current allocation."""
        if self.allocation is None:
            return {}
        return {
            int(m): row
            for m, row in zip(self.allocation.job_ids, self.allocation.fractions, strict=True)
            if int(m) in self.jobs
        }

    def steps_done(self, job_id: int) -> float:
        return float(self._arrays.steps_done[self._slot_of[job_id]])

    # --- internals ----------------------------------------------------------------------------------

    def _allocation_input(self, now: float) -> AllocationInput:
        # Slots grow with arrival and the job table keeps arrival order: the live slots, ascending, are
        # the jobs in table order.
        slots = np.flatnonzero(self._alive)
        arrays = self._arrays
        entities = specs = None
        if self._with_entity or self.space_sharing:
            specs = [s.spec for s in self.jobs.values()]
        if self._with_entity:
            entities = np.array([-1 if s.entity is None else s.entity for s in specs])
        inp = AllocationInput(
            job_ids=arrays.job_ids[slots],
            worker_types=self.layout.worker_types,
            num_workers=self.layout.num_workers,
            throughputs=arrays.throughputs[slots],
            scale_factors=arrays.scale_factor[slots].astype(np.int64),
            weights=arrays.weight[slots],
            remaining_steps=np.maximum(arrays.total_steps[slots] - arrays.steps_done[slots], 0.0),
            arrival_times=arrays.arrival_s[slots],
            now=now,
            iso_elapsed=arrays.iso_elapsed[slots],
            slo_deadlines=arrays.slo_deadline_s[slots],
            prices=self.prices,
            budget=None if self.budget is None else max(self.budget - self.spent_usd, 0.0),
            entities=entities,
            entity_weights=self.entity_weights,
            pairs=self._pair_candidates(specs) if specs is not None and self.space_sharing else None,
            previous=self.allocation,
        )
        self._input_slots = slots
        return inp

    def _accumulate_iso(self, inp: AllocationInput) -> None:
        """FTF's t^iso: the time the steps made since the last reset would have taken under a 1/n share."""
        tau_iso = (inp.throughputs * isolated_fractions(inp.num_workers, inp.scale_factors)).sum(axis=1)
        slots = self._input_slots
        arrays = self._arrays
        progressed = arrays.steps_done[slots] - arrays.steps_at_reset[slots]
        served = tau_iso > 0
        arrays.iso_elapsed[slots[served]] += progressed[served] / tau_iso[served]
        arrays.steps_at_reset[slots] = arrays.steps_done[slots]

    def _pair_throughputs(self, a: JobSpec, b: JobSpec) -> np.ndarray | None:
        """(k, 2) pair throughputs of ``a`` and ``b`` (in that order): measured, else the oracle's."""
        measured = self.measured_pairs.get((a.job_id, b.job_id))
        if measured is not None:
            return measured
        measured = self.measured_pairs.get((b.job_id, a.job_id))
        if measured is not None:
            return measured[:, ::-1]
        assert self.colocation is not None
        return self.colocation(a, b)

    def _pair_candidates(self, specs: list[JobSpec]) -> PairCandidates | None:
        """Same-scale-factor pairs whose shared throughput beats time-sharing, best first (§5.3.1)."""
        assert self.colocation is not None
        firsts, seconds, pairs = [], [], []
        for a in range(len(specs)):
            for b in range(a + 1, len(specs)):
                if specs[a].scale_factor != specs[b].scale_factor:
                    continue
                pair = self._pair_throughputs(specs[a], specs[b])
                if pair is not None:
                    firsts.append(a)
                    seconds.append(b)
                    pairs.append(pair)
        if not pairs:
            return None
        # Each pair's best normalised combined throughput over the types, all pairs at once (the pairs
        # grow with the square of the queue).
        together = np.array(pairs, dtype=float)
        alone = np.array([spec.throughputs for spec in specs], dtype=float)
        a, b = np.array(firsts, dtype=np.int64), np.array(seconds, dtype=np.int64)
        with np.errstate(divide="ignore", invalid="ignore"):
            norm = np.nan_to_num(together[:, :, 0] / alone[a]) + np.nan_to_num(together[:, :, 1] / alone[b])
        best = norm.max(axis=1)
        beats = np.flatnonzero(best > 1.0)
        if not beats.size:
            return None
        chosen = beats[np.argsort(-best[beats], kind="stable")][: self.config.max_pairs]
        return PairCandidates(members=np.column_stack([a[chosen], b[chosen]]), throughputs=together[chosen])
