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
import socket
import statistics
from pathlib import Path

import torch
import torch.multiprocessing as mp
from clustertwin.scenarios.flexrr_results import frame
from clustertwin.scenarios.flexrr_schema import FlexRRScenario
from clustertwin.scenarios.flexrr_setup import items_per_worker, run_tables
from clustertwin.scenarios.results import RunResult

from clustertwin.errors import InputError, RunFailure


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    first = scenarios[0].runtime
    for s in scenarios[1:]:
        if s.cluster.workers != world or (s.runtime.device, s.runtime.gpus) != (first.device, first.gpus):
            raise ValueError("run_real_many needs one worker count and one runtime device for all scenarios")
    out_dir.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    try:
        mp.start_processes(
            _entry,
            args=(world, [s.model_dump_json() for s in scenarios], str(out_dir), port, worker_main),
            nprocs=world,
            join=True,
            start_method="spawn",
        )
    except mp.ProcessExitedException as err:  # killed or crashed: torch has stopped the other workers
        how = f"killed by {err.signal_name}" if err.signal_name else f"exit code {err.exit_code}"
        raise RunFailure(
            f"FlexRR worker {err.error_index} died during the run ({how}); the other workers were"
            " stopped and the run is abandoned with no result"
        ) from None
    except mp.ProcessRaisedException as err:  # a Python error inside a worker: keep its traceback text
        raise RunFailure(f"FlexRR worker {err.error_index} failed; the run is abandoned:\n{err}") from None
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


def _entry(rank: int, world: int, scenarios_json: list[str], out_dir: str, port: int, main) -> None:
    main(rank, world, scenarios_json, out_dir, port)


__all__ = ["run_real", "run_real_many"]
