"""Launch FlexRR scenarios for real: one process per worker on this host (gloo barriers, CPU or CUDA).

``run_real(scenario, out_dir)`` spawns the workers, waits, and returns the same tables as the simulator
(``iterations``, ``commits``, ``messages``) plus the final model. ``run_real_many(scenarios, out_dir)``
runs several scenarios of one cluster size in the same processes, one after the other (a GPU experiment
pays process start, CUDA initialisation and data generation once).

Real ``messages`` rows are logged by the receiver: ``sent_s`` is the sender's clock at the send,
``arrived_s`` the time the receiver's poll (a message check, or an idle worker's poll) returned it. The
simulator's ``arrived_s`` is when the message reached the mailbox, before the next check; the two agree
for an idle receiver.

The runtime's data plane is the job's TCPStore, not a sharded parameter server, so it has no PS traffic
to shape: a scenario with ``ps.model_bytes`` > 0 (the simulator's sharded-PS model, ``sim/flexrr/ps.py``)
is refused rather than run with a different meaning.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import torch
from clustertwin.runtime.launch import launch
from clustertwin.scenarios.flexrr_results import frame
from clustertwin.scenarios.flexrr_schema import FlexRRScenario
from clustertwin.scenarios.flexrr_setup import items_per_worker, run_tables
from clustertwin.scenarios.results import RunResult

from clustertwin.errors import InputError


def run_real(scenario: FlexRRScenario, out_dir: Path) -> tuple[RunResult, torch.Tensor]:
    """Train for real; return the event tables and the final model."""
    return run_real_many([scenario], out_dir)[0]


def run_real_many(scenarios: list[FlexRRScenario], out_dir: Path) -> list[tuple[RunResult, torch.Tensor]]:
    """Run ``scenarios`` (same worker count and runtime device) in one set of worker processes."""
    from clustertwin.runtime.flexrr.worker import worker_main

    if not scenarios:
        return []
    for s in scenarios:
        if s.ps.model_bytes > 0:
            # refuse rather than ignore: a real run would silently lack the traffic the scenario asks for
            raise InputError(
                f"{s.source}: field ps.model_bytes",
                f"{s.ps.model_bytes} > 0, but the real runtime does not implement the sharded parameter"
                " server's traffic (simulator only); set ps.model_bytes: 0 for --backend real",
            )
    world = scenarios[0].cluster.workers
    first = scenarios[0].real
    for s in scenarios[1:]:
        if s.cluster.workers != world or (s.real.device, s.real.gpus) != (first.device, first.gpus):
            raise ValueError("run_real_many needs one worker count and one runtime device for all scenarios")
    out_dir.mkdir(parents=True, exist_ok=True)
    # a worker that dies (killed or crashed) stops the others: RankFailure names it, no result
    roles = [f"FlexRR worker {w}" for w in range(world)]
    launch(worker_main, world, ([s.model_dump_json() for s in scenarios], str(out_dir)), roles=roles)
    return [_collect(s, out_dir / f"run{i}") for i, s in enumerate(scenarios)]


def _collect(scenario: FlexRRScenario, run_dir: Path) -> tuple[RunResult, torch.Tensor]:
    world = scenario.cluster.workers
    ranks = [json.loads((run_dir / f"rank{r}.json").read_text()) for r in range(world)]
    commits = frame([tuple(c) for r in ranks for c in r["commits"]], "commits")
    iteration_log = [tuple(row) for r in ranks for row in r["iterations"]]
    iterations, info = run_tables(scenario, items_per_worker(scenario), iteration_log, commits)
    info["wasted_items"] = int(sum(r["wasted"] for r in ranks))
    # per-worker measurements a calibration uses (comma-separated: info holds flat values)
    info["compute_s_per_worker"] = ",".join(f"{r['compute_s']:.6f}" for r in ranks)
    info["items_per_worker_processed"] = ",".join(str(r["items_processed"]) for r in ranks)
    info["devices"] = ",".join(r["device"] for r in ranks)
    rtts = [x for r in ranks for x in r["probe_rtt_s"]]
    if rtts:
        info["probe_round_trips"] = len(rtts)
        info["probe_one_way_s"] = statistics.median(rtts) / 2
        info["probe_one_way_mean_s"] = statistics.fmean(rtts) / 2
    final = torch.tensor(ranks[0]["final"], dtype=torch.float64)
    messages = frame([tuple(m) for r in ranks for m in r["messages"]], "messages")
    messages = messages.sort_values(["sent_s", "src", "dst"], ignore_index=True)
    tables = {"iterations": iterations, "commits": commits, "messages": messages}
    return RunResult(tables=tables, info=info), final


__all__ = ["run_real", "run_real_many"]
