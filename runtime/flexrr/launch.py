"""Launch a FlexRR scenario for real: one process per worker on this host (gloo on CPU).

``run_real(scenario, out_dir)`` spawns the workers, waits, and returns the same tables as the simulator
(``iterations``, ``commits``; ``messages`` is empty: the runtime does not log them) plus the final model.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import torch
import torch.multiprocessing as mp

from scenarios.flexrr_results import frame
from scenarios.flexrr_schema import FlexRRScenario
from scenarios.flexrr_setup import items_per_worker, run_tables
from scenarios.results import RunResult


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_real(scenario: FlexRRScenario, out_dir: Path) -> tuple[RunResult, torch.Tensor]:
    """Train for real; return the event tables and the final model."""
    from runtime.flexrr.worker import worker_main

    out_dir.mkdir(parents=True, exist_ok=True)
    world = scenario.cluster.workers
    port = _free_port()
    mp.start_processes(
        _entry,
        args=(world, scenario.model_dump_json(), str(out_dir), port, worker_main),
        nprocs=world,
        join=True,
        start_method="spawn",
    )
    ranks = [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(world)]
    commits = frame([tuple(c) for r in ranks for c in r["commits"]], "commits")
    iteration_log = [tuple(row) for r in ranks for row in r["iterations"]]
    iterations, info = run_tables(scenario, items_per_worker(scenario), iteration_log, commits)
    info["wasted_items"] = int(sum(r["wasted"] for r in ranks))
    final = torch.tensor(ranks[0]["final"], dtype=torch.float64)
    messages = frame([], "messages")
    return RunResult(
        tables={"iterations": iterations, "commits": commits, "messages": messages}, info=info
    ), final


def _entry(rank: int, world: int, scenario_json: str, out_dir: str, port: int, main) -> None:
    main(rank, world, scenario_json, out_dir, port)


__all__ = ["run_real"]
