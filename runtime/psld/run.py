"""``clustertwin run --backend real`` for ``kind: psld``: a PSLD scenario on the gloo parameter server.

``run_real(scenario)`` turns the scenario into a ``runtime.psld.ps.Job`` and runs it as local processes
(ranks 0..S-1 PSs, S..S+W-1 workers), then returns the tables of ``scenarios.psld_results.PSLD_TABLES``.

What maps onto the runtime:

* **Model**: the scenario model's real tensors (``traces.psld_models``), each held as ceil(bytes / 8)
  float64 elements, so every block moves the model's fp32 byte count (rounded up to 8 bytes). Blocks and
  initial owners come from the same ``policies.psld.baselines`` calls, random streams and seed as the
  simulator (``psld``, ``psld_noexplore``, ``strawman``: blocks of ``block_mb``, round-robin; ``mxnet``,
  ``tensorflow``, ``byteps``: their layouts, never reassigned).
* **Scheduler**: adaptive policies run the runtime's closed loop (``Job.report_every``): every
  ``psld.report_every`` iterations rank 0 gathers the workers' live block timings and
  ``policies.psld.PSLDScheduler`` (the simulator's scheduler, same ``SchedulerConfig``) decides; its
  random stream is the simulator's (seed, 2).
* **Stragglers**: a ``bandwidth`` straggler caps its PS's token bucket at ``value`` Gbit/s of pushed
  bytes; a ``cpu`` straggler sleeps in the same bucket at the simulator's summing rate for ``value``
  cores (``value x costs.sum_gbytes_per_core_s`` GB/s). Both hold for the whole run.
* **Length**: the job's iteration count is fixed before it starts (every rank loops over it), so a
  1-iteration probe of the same job (same layout, same throttles) runs first in the same process group
  and rank 0 sets ``iterations = ceil(duration_s / probe iteration time)``, at least two reporting
  periods plus one iteration (so a decision is followed by measured iterations). The probe's iteration
  also pays the process group's first-touch costs, so the count errs low. The probe is not in the
  tables; ``info["probe_iteration_s"]`` records it.
* **Timing samples**: ``ps.run_worker`` times each block to its own pull (see there why); the PREPARE
  barrier's arrival and release times (``ps.Marks``) give the iterations' boundaries.

Refused with an ``InputError`` naming the field: ``cluster.standby`` (no standby-PS activation, so no
scale-out), ``removals`` (no DEL_SERVER), ``regimes`` and stragglers that start after 0 or end (the
throttle is fixed per run), two stragglers on one PS (one bucket per PS), more workers than twice the
CPU cores (FlexRR's rule; the PSs mostly wait on sockets or sleep in their bucket and are not counted
there) and more processes in all than four times the cores. Link speeds, ``server_cores``, ``colocate``,
``costs`` and the model's compute times are simulator parameters: the real run has loopback TCP, this
host's cores and the runtime's closed-form toy gradient instead of the model's forward/backward.

Not measured, hence NaN or -1 in the tables: ``reassignments.added`` is -1 (no scale-out), and
``reassignments.suspended_s`` is the PREPARE barrier only (the last rank's arrival to the last rank's
release): in vanilla mode the state migration that follows it overlaps the next pushes and is left out.
``iterations.start_s`` / ``end_s`` are the first worker's release from / the last worker's arrival at
the PREPARE barrier that opens / closes each iteration, on the host's monotonic clock (shared by all
processes), from the main job's start.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from policies.psld.baselines import byteps_layout, mxnet_layout, round_robin_owners, tensorflow_layout
from policies.psld.blocks import Block, Tensor, split_blocks
from policies.psld.migration import migrations
from policies.psld.profiling import Sample
from scenarios.errors import InputError
from scenarios.psld_results import frame
from scenarios.psld_schema import ADAPTIVE, PSLDScenario
from scenarios.psld_setup import scheduler_config
from scenarios.results import RunResult
from traces.psld_models import psld_model

LAYOUT_STREAM, POLICY_STREAM = 1, 2  # the simulator's random streams (sim/psld/__init__.py)
PROBE_ITERATIONS = 1
MAX_ITERATIONS = 100_000
GBIT = 1e9 / 8  # bytes per second in one Gbit/s


# -- scenario -> Job ------------------------------------------------------------------------------
def check_real(scenario: PSLDScenario, cores: int | None = None) -> None:
    """Raise ``InputError`` (naming the field) for what the real runtime cannot run."""
    src = scenario.source
    c = scenario.cluster
    cores = cores or os.cpu_count() or 1
    procs = c.servers + c.standby + c.workers
    if c.workers > 2 * cores or procs > 4 * cores:
        raise InputError(
            f"{src}: field cluster",
            f"a real PSLD run starts one process per worker and per PS: {c.workers} workers and {procs}"
            f" processes on {cores} cores (at most {2 * cores} workers and {4 * cores} processes) would"
            " measure the machine, not the algorithm; lower cluster.workers or cluster.servers",
        )
    if c.standby:
        raise InputError(
            f"{src}: field cluster.standby",
            "the real runtime cannot activate standby PSs (no scale-out); set cluster.standby: 0",
        )
    if scenario.removals:
        raise InputError(f"{src}: field removals", "the real runtime has no DEL_SERVER; remove the removals")
    if scenario.regimes is not None:
        raise InputError(
            f"{src}: field regimes",
            "the real runtime's throttles are fixed for a whole run; regime switching cannot run for real",
        )
    seen: set[int] = set()
    for i, s in enumerate(scenario.stragglers):
        if s.start_s > 0:
            raise InputError(
                f"{src}: field stragglers[{i}].start_s",
                "a real straggler is throttled from the start (start_s: 0); a later step change cannot run",
            )
        if s.end_s is not None:
            raise InputError(
                f"{src}: field stragglers[{i}].end_s",
                "a real straggler stays throttled for the whole run (end_s: null); recovery cannot run",
            )
        if s.server in seen:
            raise InputError(
                f"{src}: field stragglers[{i}].server",
                f"PS {s.server} has two stragglers; the real runtime has one throttle per PS",
            )
        seen.add(s.server)
    if scenario.block_bytes < 8:
        raise InputError(f"{src}: field block_mb", "a real block holds at least one 8-byte element")


def throttles(scenario: PSLDScenario) -> dict[int, float]:
    """PS -> token-bucket rate in bytes/s for the scenario's stragglers."""
    out = {}
    for s in scenario.stragglers:
        if s.what == "bandwidth":
            out[s.server] = s.value * GBIT
        else:
            out[s.server] = s.value * scenario.costs.sum_gbytes_per_core_s * 1e9
    return out


def build_job(scenario: PSLDScenario, iterations: int = PROBE_ITERATIONS):
    """The runtime ``Job`` of a scenario (without closed loop if the policy is not adaptive)."""
    from runtime.psld.ps import Job

    check_real(scenario)
    model = psld_model(scenario.model, scenario.batch_size, scenario.compute_scale)
    # layouts are computed in 8-byte units so every block is a whole number of float64 elements
    units = [Tensor(t.name, math.ceil(t.nbytes / 8), t.layer) for t in model.tensors]
    unit_block = scenario.block_bytes // 8
    servers = list(range(scenario.cluster.servers))
    rng = np.random.default_rng(np.random.SeedSequence([scenario.seed, LAYOUT_STREAM]))
    if scenario.policy == "mxnet":
        blocks, owners = mxnet_layout(units, servers, unit_block, rng, scenario.mxnet_small)
    elif scenario.policy == "tensorflow":
        blocks, owners = tensorflow_layout(units, servers)
    elif scenario.policy == "byteps":
        blocks, owners = byteps_layout(units, servers, unit_block)
    else:
        blocks = split_blocks(units, unit_block)
        owners = round_robin_owners(len(blocks), servers)
    starts = np.concatenate([[0], np.cumsum([t.nbytes for t in units])]) * 8
    flat = tuple(Block(b.id, b.tensor, int(starts[b.tensor]) + 8 * b.offset, 8 * b.nbytes) for b in blocks)
    adaptive = scenario.policy in ADAPTIVE
    return Job(
        servers=scenario.cluster.servers,
        workers=scenario.cluster.workers,
        numel=int(sum(t.nbytes for t in units)),
        blocks=flat,
        owners=tuple(owners),
        iterations=iterations,
        mode=scenario.mode,
        plans={},
        throttle=throttles(scenario) or None,
        report_every=scenario.psld.report_every if adaptive else 0,
        scheduler=scheduler_config(scenario) if adaptive else None,
        seed=(scenario.seed, POLICY_STREAM),
    )


# -- processes ------------------------------------------------------------------------------------
def _main(rank: int, world: int, port: int, main, duration_s: float, queue: Any) -> None:
    import torch
    import torch.distributed as dist

    from runtime.psld import ps

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    marks: ps.Marks = []
    probe = replace(main, iterations=PROBE_ITERATIONS, report_every=0, scheduler=None)
    try:
        # probe: the same job for a few iterations, to turn duration_s into an iteration count
        if rank < probe.servers:
            ps.run_server(rank, probe, marks)
        else:
            ps.run_worker(rank, probe, marks)
        dist.barrier()  # the probe ends when every rank is through (rank 0 may be the fast PS)
        done = time.monotonic()
        box: list[Any] = [None]
        if rank == 0:
            edges = [m[1] for m in marks] + [done]
            per = float(np.median(np.diff(edges)))
            floor = 2 * main.report_every + 1 if main.report_every else 2
            iters = int(min(MAX_ITERATIONS, max(floor, math.ceil(duration_s / max(per, 1e-6)))))
            box = [(iters, per)]
        dist.broadcast_object_list(box, src=0)
        iters, per = box[0]
        job = replace(main, iterations=iters)
        marks.clear()
        dist.barrier()
        origin = time.monotonic()
        if rank < job.servers:
            held, control = ps.run_server(rank, job, marks)
            records = control.records if control is not None else []
            payload = (sorted(held), records)
        else:
            params, samples = ps.run_worker(rank, job, marks)
            payload = (params.numpy().tobytes(), [(s.server, s.nbytes, s.seconds) for s in samples])
        end = time.monotonic()
        queue.put((rank, origin, marks, end, payload, iters, per))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _launch(job, duration_s: float, progress) -> dict[int, tuple]:
    from runtime.psld.launch import spawn_group

    world = job.servers + job.workers
    items = spawn_group(_main, world, (job, duration_s), world, 300 + 20 * duration_s, progress)
    return {rank: tuple(rest) for rank, *rest in items}


# -- tables ---------------------------------------------------------------------------------------
def _tables(scenario: PSLDScenario, job, out: dict[int, tuple]) -> tuple[dict, dict]:
    S, W = job.servers, job.workers
    origin = out[0][0]
    iters = out[0][4]
    sizes = np.asarray([b.nbytes for b in job.blocks], dtype=float)
    arrive = np.full((S + W, iters + 1), np.nan)
    release = np.full((S + W, iters), np.nan)
    for rank, (_, marks, end, *_rest) in out.items():
        for k, a, r in marks:
            arrive[rank, k], release[rank, k] = a - origin, r - origin
        arrive[rank, iters] = end - origin
    records = out[0][3][1]
    changes_at = {rec[0]: rec for rec in records if rec[2].action != "none"}
    owners = list(job.owners)
    version = 0
    it_rows, re_rows, rep_rows = [], [], []
    load_rows = _loads(0, 0.0, owners, sizes, S)
    for k in range(iters):
        if k in changes_at:
            _, _, d, _ = changes_at[k]
            moves = migrations(owners, d.owners)
            barrier = float(np.max(arrive[:, k]))
            resumed = float(np.max(release[:, k]))
            re_rows.append(
                (
                    barrier,
                    k,
                    d.action,
                    d.variation,
                    " ".join(map(str, d.superior)),
                    len(moves),
                    float(sum(sizes[b] for b, _, _ in moves)),
                    d.added,
                    d.predicted_before_s,
                    d.predicted_after_s,
                    resumed - barrier,
                )
            )
            owners = list(d.owners)
            version += 1
            load_rows += _loads(version, resumed, owners, sizes, S)
        start = float(np.min(release[S:, k]))
        end = float(np.max(arrive[S:, k + 1]))
        it_rows.append((k, start, end, version, len(set(owners))))
    for k, t, d, profile in records:
        for r, (alpha, beta, pred) in profile.items():
            rep_rows.append(
                (k // job.report_every - 1, t - origin, r, alpha, beta, pred, r in d.superior, d.variation)
            )
    ch_rows = [(0.0, s.server, s.what, float(s.value)) for s in scenario.stragglers]
    tables = {
        "iterations": frame(it_rows, "iterations"),
        "reassignments": frame(re_rows, "reassignments"),
        "loads": frame(load_rows, "loads"),
        "reports": frame(rep_rows, "reports"),
        "changes": frame(ch_rows, "changes"),
    }
    samples = [x for w in range(W) for x in out[S + w][3][1]]
    extra = {"iterations_run": iters, "probe_iteration_s": float(out[0][5]), "samples": len(samples)}
    return tables, extra


def _loads(version: int, t: float, owners, sizes: np.ndarray, servers: int) -> list[tuple]:
    rows = []
    for r in range(servers):
        mine = [b for b, o in enumerate(owners) if o == r]
        rows.append((version, t, r, float(sizes[mine].sum()), len(mine)))
    return rows


def run_real(
    scenario: PSLDScenario,
    workdir: Path | None = None,
    progress: Callable[[float, str], None] | None = None,
) -> RunResult:
    """Run ``scenario`` on the real gloo PS and return the simulator's tables.

    ``workdir`` is unused (everything travels through a queue); it is accepted for symmetry with the
    other kinds. ``info`` has the simulator's keys (but ``events``: nothing is simulated) plus
    ``backend``, ``iterations_run``, ``probe_iteration_s``, ``samples`` and ``final_params_sha256`` (of
    every worker's final parameters, which the run checks are identical across workers). The result also
    carries ``job`` (the Job as run), ``samples`` (every block timing) and ``final_params`` (bytes).
    """
    import hashlib

    wall0 = time.perf_counter()
    job = build_job(scenario)
    out = _launch(job, scenario.duration_s, progress)
    S, W = job.servers, job.workers
    finals = {out[S + w][3][0] for w in range(W)}
    if len(finals) != 1:
        raise RuntimeError("the workers ended with different parameters: the PS lost an update")
    tables, extra = _tables(scenario, job, out)
    model = psld_model(scenario.model, scenario.batch_size, scenario.compute_scale)
    info: dict[str, Any] = {
        "backend": "real",
        "policy": scenario.policy,
        "mode": scenario.mode,
        "model": scenario.model,
        "workers": W,
        "servers": S,
        "blocks": len(job.blocks),
        "model_bytes": float(sum(b.nbytes for b in job.blocks)),
        "batch_size": model.batch_size,
        "warmup_s": scenario.warmup_s,
        "duration_s": scenario.duration_s,
        **extra,
        "final_params_sha256": hashlib.sha256(next(iter(finals))).hexdigest(),
        "wall_s": time.perf_counter() - wall0,
    }
    result = RunResult(tables=tables, info=info)
    result.final_params = next(iter(finals))  # type: ignore[attr-defined]
    result.job = replace(job, iterations=extra["iterations_run"])  # type: ignore[attr-defined]
    result.samples = [  # type: ignore[attr-defined]
        Sample(w, int(r), nbytes, seconds) for w in range(W) for r, nbytes, seconds in out[S + w][3][1]
    ]
    return result


__all__ = ["build_job", "check_real", "run_real", "throttles"]
