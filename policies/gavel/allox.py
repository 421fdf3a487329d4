"""AlloX: minimise average job completion time on heterogeneous workers ([Narayanan] §5.7).

AlloX (EuroSys'20) schedules single-GPU jobs. Placing job i k-th from last on worker w delays k jobs
(itself included) by its processing time, so the total completion time of a placement is
``Σ k·(s_i / T[i, type(w)]) + waiting_i``, with ``s_i`` the remaining steps and ``waiting_i`` the time since
arrival. Minimising it is an assignment problem between jobs and (worker, position) slots, solved by the
Hungarian method; on each worker the job with the largest k runs first. The waiting term is the same in
every slot of a row, so it never changes the matching; it is kept because it is part of the objective.

From the Gavel artifact's baseline:

* the policy is non-preemptive: a job that held a whole worker in the previous allocation keeps it
  (``inp.previous``; the artifact keeps this in the policy object). If a type has shrunk below its kept
  jobs, the latest arrivals lose their place and rejoin the queue;
* only the jobs waiting longest are matched, ``max(⌊alpha·m⌋, free workers)`` of the m waiting ones
  (``alpha`` = 1.0 in the artifact's final version, 0.3 in an earlier one), which bounds how long a job
  can be passed over;
* the allocation is 0/1: the first job on each free worker gets that worker's type for the whole period;
  later positions are recomputed at the next allocation.

A job that can run on no free worker is left out of the matching, and slots on workers a job cannot use
are forbidden (the artifact prices them at ``s/1e-10``, which could still put such a job first on an
otherwise empty worker).
"""

from __future__ import annotations

import numpy as np
from clustertwin.policies.gavel.problem import Allocation, AllocationInput
from clustertwin.policies.registry import register
from scipy.optimize import linear_sum_assignment


@register("allox")
class AlloXPolicy:
    """Min-average-JCT matching of waiting single-GPU jobs to free workers; running jobs keep theirs."""

    name = "allox"

    def __init__(self, alpha: float = 1.0) -> None:
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
        self.alpha = alpha

    def allocate(self, inp: AllocationInput, rng: np.random.Generator) -> Allocation:
        inp.require("remaining_steps", "arrival_times")
        assert inp.remaining_steps is not None and inp.arrival_times is not None
        wide = np.asarray(inp.job_ids)[np.asarray(inp.scale_factors) != 1]
        if wide.size:
            raise ValueError(f"allox schedules single-GPU jobs only; jobs {wide.tolist()} need more GPUs")

        fractions = np.zeros((inp.n, inp.k))
        kept = self._kept_types(inp)
        running = kept >= 0
        fractions[np.flatnonzero(running), kept[running]] = 1.0
        free = np.asarray(inp.num_workers, dtype=int) - np.bincount(kept[running], minlength=inp.k)

        waiting = inp.now - np.asarray(inp.arrival_times, dtype=float)
        queue = np.flatnonzero(~running)
        queue = queue[np.lexsort((queue, -waiting[queue]))]  # longest wait first, ties by row
        worker_type = np.repeat(np.arange(inp.k), free)
        queue = queue[(inp.throughputs[queue][:, worker_type] > 0).any(axis=1)]
        considered = queue[: max(int(self.alpha * queue.size), worker_type.size)]
        if considered.size == 0 or worker_type.size == 0:
            return Allocation(inp.job_ids, inp.worker_types, fractions)

        tput = inp.throughputs[considered][:, worker_type]  # (m, workers)
        steps = np.asarray(inp.remaining_steps, dtype=float)[considered]
        time = np.divide(steps[:, None], tput, out=np.zeros_like(tput), where=tput > 0)
        m, workers = time.shape
        position = np.arange(1, m + 1)
        # Every considered job has a usable free worker with m positions on it, so a matching that avoids
        # the infinite (cannot-run) cells always exists.
        cost = np.where(tput > 0, time, np.inf)[:, None, :] * position[None, :, None]
        cost = (cost + waiting[considered][:, None, None]).reshape(m, m * workers)
        rows, cols = linear_sum_assignment(cost)

        worker, slot = cols % workers, cols // workers
        order = np.lexsort((-slot, worker))  # per worker, the largest multiplier (runs first) leads
        _, first = np.unique(worker[order], return_index=True)
        lead = order[first]
        fractions[considered[rows[lead]], worker_type[worker[lead]]] = 1.0
        return Allocation(inp.job_ids, inp.worker_types, fractions)

    @staticmethod
    def _kept_types(inp: AllocationInput) -> np.ndarray:
        """Per job, the type of the whole worker it held last time (-1 if none), trimmed to capacity."""
        kept = np.full(inp.n, -1)
        previous = inp.previous
        if previous is None:
            return kept
        row = {int(job): i for i, job in enumerate(previous.job_ids)}
        prev = np.array([row.get(int(job), -1) for job in inp.job_ids])
        have = np.flatnonzero(prev >= 0)
        if have.size == 0:
            return kept
        held = previous.fractions[prev[have]]
        whole = held.max(axis=1) >= 1.0 - 1e-9
        kept[have[whole]] = held[whole].argmax(axis=1)
        arrival = np.asarray(inp.arrival_times, dtype=float)
        for j in range(inp.k):
            on_j = np.flatnonzero(kept == j)
            excess = on_j[np.lexsort((on_j, arrival[on_j]))][int(inp.num_workers[j]) :]
            kept[excess] = -1
        return kept
