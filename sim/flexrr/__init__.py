"""FlexRR simulation (seed 000, ch. 3): ``run(scenario) -> RunResult``.

Tables (column contract in ``scenarios.flexrr_results``): ``iterations``, ``commits``, ``messages``.
``info`` holds: ``mode``, ``slack``, ``workers``, ``iterations``, ``makespan_s``, ``ideal_s`` (the
Ideal bound of §3.4.1 computed from the same straggler realisation), ``total_items``, ``wasted_items``,
``events`` and ``wall_s``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from scenarios.flexrr_results import frame
from scenarios.flexrr_schema import FlexRRScenario
from scenarios.flexrr_setup import (
    LATENCY_STREAM,
    items_per_worker,
    machines,
    profiles,
    rr_config,
    run_tables,
)
from scenarios.results import RunResult
from sim.flexrr.engine import Engine, EngineConfig


def run(scenario: FlexRRScenario, progress: Callable[[float, str], None] | None = None) -> RunResult:
    """Simulate one FlexRR scenario and return its event tables."""
    wall0 = time.perf_counter()
    items = items_per_worker(scenario)
    profs = profiles(scenario)
    workers = machines(scenario, items)
    engine = Engine(
        workers,
        profs,
        scenario.items_per_worker,
        rr_config(scenario),
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
    return RunResult(tables={"iterations": iterations, "commits": commits, "messages": messages}, info=info)


__all__ = ["run"]
