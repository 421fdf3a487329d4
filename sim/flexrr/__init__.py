"""FlexRR simulation ([Harlap], ch. 3): ``run(scenario) -> RunResult``.

Tables (column contract in ``scenarios.flexrr_results``): ``iterations``, ``commits``, ``messages``.
``info`` holds: ``mode``, ``slack``, ``workers``, ``iterations``, ``makespan_s``, ``ideal_s`` (the
Ideal bound of §3.4.1 computed from the same straggler realisation), ``total_items``, ``wasted_items``,
``events`` and ``wall_s``; with a parameter server (``ps.model_bytes`` > 0, ``sim.flexrr.ps``) also
``ps_shards``, ``ps_nic_bytes`` (bytes that crossed NICs), ``ps_mean_push_s`` (a worker's completion
to its update's last slice landing) and ``ps_mean_pull_s`` (a worker asking for the fresh slices to
the last one arriving; includes waiting for the shards to apply).

``simulate(scenario)`` returns the engine's log too (gate openings, the PS's applied iterations and
reads, and with ``record_messages`` every worker's stretches of processing, ``log.busy``), for tests that
check the SSP bound against the shards and for timelines (docs/algorithms/flexrr.md's idle breakdown).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
from clustertwin.policies.flexrr.groups import machine_of
from clustertwin.scenarios.flexrr_results import frame
from clustertwin.scenarios.flexrr_schema import FlexRRScenario
from clustertwin.scenarios.flexrr_setup import (
    LATENCY_STREAM,
    items_per_worker,
    machines,
    profiles,
    run_tables,
)
from clustertwin.scenarios.results import RunResult
from clustertwin.sim.flexrr.engine import Engine, EngineConfig, EngineLog
from clustertwin.sim.flexrr.ps import PSConfig, ShardedPS


def ps_config(scenario: FlexRRScenario) -> PSConfig | None:
    """The sharded PS of the scenario's ``ps`` section (§3.2), or None when ``model_bytes`` is 0: then
    no PS traffic is modelled and the gate is the fixed ``ps_sync_s`` delay it always was."""
    p = scenario.ps
    if p.model_bytes == 0:
        return None
    return PSConfig(
        model_bytes=p.model_bytes,
        shards=scenario.cluster.machines if p.shards is None else p.shards,
        nic_bytes_per_s=p.nic_gbps * 1e9 / 8,  # Gbit/s -> bytes/s
        latency_s=scenario.latency_s if p.latency_s is None else p.latency_s,
    )


def run(scenario: FlexRRScenario, progress: Callable[[float, str], None] | None = None) -> RunResult:
    """Simulate one FlexRR scenario and return its event tables."""
    return simulate(scenario, progress)[0]


def simulate(
    scenario: FlexRRScenario, progress: Callable[[float, str], None] | None = None
) -> tuple[RunResult, EngineLog]:
    """Simulate one FlexRR scenario; return its event tables and the engine's raw log."""
    wall0 = time.perf_counter()
    items = items_per_worker(scenario)
    profs = profiles(scenario)
    workers = machines(scenario, items)
    c = scenario.cluster
    pcfg = ps_config(scenario)
    ps = (
        None
        if pcfg is None
        else ShardedPS(pcfg, [machine_of(w, c.machines) for w in range(c.workers)], c.machines)
    )
    engine = Engine(
        workers,
        profs,
        scenario.items_per_worker,
        EngineConfig(
            slack=scenario.effective_slack,
            iterations=scenario.iterations,
            latency_s=scenario.latency_s,
            latency_jitter_s=scenario.latency_jitter_s,
            ps_sync_s=scenario.ps_sync_s,
            record_messages=scenario.record_messages,
        ),
        np.random.default_rng(np.random.SeedSequence([scenario.seed, LATENCY_STREAM])),
        progress,
        ps,
    )
    log = engine.run()

    commits = frame(log.commits, "commits")
    iterations, info = run_tables(scenario, items, log.iterations, commits)
    messages = frame(log.messages, "messages")
    info.update(
        wasted_items=int(sum(n for _, n, _ in log.wasted)),
        events=log.events,
        wall_s=time.perf_counter() - wall0,
    )
    if ps is not None:
        pushes, pulls = ps.log.pushes, ps.log.pulls
        info.update(
            ps_shards=ps.config.shards,
            ps_nic_bytes=ps.net.bytes_sent,
            ps_mean_push_s=float(np.mean([b - a for _, _, a, b in pushes])) if pushes else 0.0,
            ps_mean_pull_s=float(np.mean([b - a for _, _, a, b in pulls])) if pulls else 0.0,
        )
        log.ps = ps.log
    tables = {"iterations": iterations, "commits": commits, "messages": messages}
    return RunResult(tables=tables, info=info), log


__all__ = ["ps_config", "run", "simulate"]
