"""Launch FlexRR scenarios for real: one process per worker and one per parameter-server shard on this
host (gloo, CPU or CUDA workers), each machine of the scenario on its own loopback address.

``run_real(scenario, out_dir)`` spawns the processes, waits, and returns the same tables as the
simulator (``iterations``, ``commits``, ``messages``) plus the final model (the flat parameter vector).
Its info adds the loss curve (``loss_per_iteration``: the training loss of ``W_0 .. W_T``, evaluated
after the run from the shards' per-iteration updates, so measuring it costs the run nothing) and the
iterations the run needed to reach ``convergence.target_loss`` (``measured_iterations_to_target``).

``run_real_many(scenarios, out_dir, progress)`` runs several scenarios of one cluster size in the same
processes, one after the other (a GPU experiment pays process start, CUDA initialisation and data
generation once); ``progress(fraction, "run i/n finished")`` is called as each one ends.

The loss curve is evaluated on the run's device (``cuda:0`` for a CUDA run): the data sets are generated
where they are used and differ between device types, so only that device reproduces the workers' data.

Real ``messages`` rows are logged by the receiver: ``sent_s`` is the sender's clock at the send,
``arrived_s`` the time the receiver's poll (a message check, or an idle worker's poll) returned it. The
simulator's ``arrived_s`` is when the message reached the mailbox, before the next check; the two agree
for an idle receiver.

The data plane is a sharded parameter server (``runtime/flexrr/ps.py``); the simulator models its
traffic when ``ps.model_bytes`` > 0, which must then be the real model's size (the kind's check refuses
another value, since the simulation would then describe a different model).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path

import torch
from clustertwin.runtime.launch import launch
from clustertwin.scenarios.flexrr_results import frame
from clustertwin.scenarios.flexrr_schema import FlexRRScenario
from clustertwin.scenarios.flexrr_setup import items_per_worker, run_tables
from clustertwin.scenarios.results import RunResult

Progress = Callable[[float, str], None]


def run_real(
    scenario: FlexRRScenario, out_dir: Path, progress: Progress | None = None
) -> tuple[RunResult, torch.Tensor]:
    """Train for real; return the event tables and the final model."""
    return run_real_many([scenario], out_dir, progress)[0]


def run_real_many(
    scenarios: list[FlexRRScenario], out_dir: Path, progress: Progress | None = None
) -> list[tuple[RunResult, torch.Tensor]]:
    """Run ``scenarios`` (same worker count and runtime device) in one set of worker processes;
    ``progress(fraction, text)`` hears of each finished scenario as it ends."""
    from clustertwin.runtime.flexrr.worker import process_main, shards

    if not scenarios:
        return []
    first = scenarios[0]
    layout = (first.cluster, shards(first), first.real.device, first.real.gpus, first.real.emulated_hosts)
    for s in scenarios[1:]:
        if (s.cluster, shards(s), s.real.device, s.real.gpus, s.real.emulated_hosts) != layout:
            raise ValueError(
                "run_real_many needs one cluster, shard count and runtime device for all scenarios"
            )
    workers = first.cluster.workers
    out_dir.mkdir(parents=True, exist_ok=True)
    # a process that dies (killed or crashed) stops the others: RankFailure names it, no result
    roles = [f"FlexRR worker {w}" for w in range(workers)] + [
        f"FlexRR PS shard {j}" for j in range(shards(first))
    ]
    args = ([s.model_dump_json() for s in scenarios], str(out_dir))
    n = len(scenarios)

    def finished(fraction: float, _text: str) -> None:
        if progress is not None:
            progress(fraction, f"run {round(fraction * n)}/{n} finished")

    # worker 0 reports once per finished scenario
    launch(process_main, len(roles), args, roles=roles, expected=n, progress=finished)
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
    info["ps_bytes_pushed"] = int(sum(r["ps_bytes_pushed"] for r in ranks))
    info["ps_bytes_pulled"] = int(sum(r["ps_bytes_pulled"] for r in ranks))
    final = torch.tensor(ranks[0]["final"], dtype=getattr(torch, scenario.real.dtype))
    if scenario.real.record_loss:
        losses = _loss_curve(scenario, run_dir, final)
        info["loss_per_iteration"] = ",".join(f"{x:.6g}" for x in losses)
        target = scenario.convergence.target_loss
        if target is not None:
            reached = next((k for k, x in enumerate(losses) if x <= target), None)
            info["measured_iterations_to_target"] = float("nan") if reached is None else reached
    messages = frame([tuple(m) for r in ranks for m in r["messages"]], "messages")
    messages = messages.sort_values(["sent_s", "src", "dst"], ignore_index=True)
    tables = {"iterations": iterations, "commits": commits, "messages": messages}
    return RunResult(tables=tables, info=info), final


def _loss_curve(scenario: FlexRRScenario, run_dir: Path, final: torch.Tensor) -> list[float]:
    """Training loss of ``W_0 .. W_T`` from the shards' per-iteration update slices. Checks that they add
    up to the final model a worker pulled (the shards applied what the workers read)."""
    from clustertwin.runtime.flexrr.model import Trainer, problem_for
    from clustertwin.runtime.flexrr.worker import shards

    per_shard = [torch.load(run_dir / f"shard{j}.pt") for j in range(shards(scenario))]
    device = torch.device("cuda:0" if scenario.real.device == "cuda" else "cpu")
    trainer = Trainer(problem_for(scenario, sum(items_per_worker(scenario))), device)
    w = trainer.w0.clone()
    losses = [trainer.loss(w)]
    for k in range(scenario.iterations):
        w = w + torch.cat([updates[k] for updates in per_shard]).to(device)
        losses.append(trainer.loss(w))
    w = w.cpu()
    tol = 1e-9 if final.dtype == torch.float64 else 1e-4
    if not torch.allclose(w, final, rtol=tol, atol=tol * 1e-3):
        raise RuntimeError("the shards' updates do not add up to the model the workers read")
    return losses


__all__ = ["run_real", "run_real_many"]
