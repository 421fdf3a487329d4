"""A host's CPU cores shared by the worker slots on it (``cluster.host``): slots that share cores run
slower together.

The real backend runs a CPU worker slot as a training process (``real.threads_per_cpu_worker`` threads)
and a slowed type's process sleeps ``slowdown − 1`` times each step's compute (``runtime.gavel.lease``),
so it keeps ``threads / slowdown`` cores busy on average; a GPU slot's process keeps one host thread
busy. A job of ``n`` ranks is ``n`` such processes, and two jobs sharing a slot are two. When the
processes on a host ask for ``D`` cores and it has ``C``, the kernel's fair scheduler gives each runnable
thread ``C / D`` of a core (processor sharing), and since a slowed process sleeps in proportion to its
compute time, every job on the host runs at ``min(1, C / D)`` of its speed alone, start-up (interpreter,
``import torch``, checkpoint load: CPU work) included. Busy cores may also slow each other down (memory
bandwidth, shared caches): ``efficiency`` is what a core delivers with every core busy, relative to one
busy core alone, interpolated linearly in the number of busy cores.

The factor is computed per round from the jobs the round places on the host: a job that finishes early
leaves the others at the round's factor (an under-estimate of their speed for the rest of the round).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from clustertwin.policies.gavel.cluster import ClusterLayout
from clustertwin.scenarios.gavel_schema import Scenario


@dataclass(frozen=True)
class HostModel:
    on_host: np.ndarray  # (k,) bool: the scheduler type's slots live on the host
    demand: np.ndarray  # (k,) cores one busy slot of the type keeps busy
    cores: float
    efficiency: float = 1.0

    def speed(self, types: np.ndarray, gpus: np.ndarray) -> float:
        """The fraction of its speed alone at which every job on the host runs, when jobs of scheduler
        types ``types`` holding ``gpus`` slots each (one entry per job) run at once."""
        types = np.asarray(types, dtype=np.int64)
        wanted = float(np.sum(np.where(self.on_host[types], np.asarray(gpus) * self.demand[types], 0.0)))
        if wanted <= 0:
            return 1.0
        busy = min(wanted, self.cores)
        interference = 1.0 - (1.0 - self.efficiency) * max(busy - 1.0, 0.0) / max(self.cores - 1.0, 1.0)
        return min(1.0, self.cores / wanted) * interference


def host_model(scenario: Scenario, layout: ClusterLayout, base_types: tuple[str, ...]) -> HostModel | None:
    """The scenario's host over the scheduler's types (``base_types``: each one's Gavel type, which a
    market's split layout repeats for its spot half)."""
    host = scenario.cluster.host
    if host is None:
        return None
    real = scenario.real
    demand = []
    for name in base_types:
        if real is None:
            demand.append(1.0)
            continue
        worker = real.workers[name]
        threads = real.threads_per_cpu_worker if worker.device == "cpu" else 1
        demand.append(threads / worker.slowdown)
    on_host = np.array([t in host.types for t in base_types], dtype=bool)
    assert len(base_types) == len(layout.worker_types)
    return HostModel(on_host, np.array(demand), float(host.cores), float(host.efficiency))
