"""``clustertwin run --backend real`` for ``kind: psld``: a PSLD scenario on the gloo parameter server.

``run_real(scenario)`` turns the scenario into a ``runtime.psld.ps.Job`` and runs it as local processes
(ranks 0..S-1 PSs, S..S+T-1 standby PSs, S+T..S+T+W-1 workers), then returns the tables of
``scenarios.psld_results.PSLD_TABLES``.

What maps onto the runtime:

* **Model**: the scenario model's real tensors (``traces.psld_models``), each held as ceil(bytes / 8) float64
  elements, so every block moves the model's fp32 byte count (rounded up to 8 bytes). Blocks and initial
  owners come from the same placement policy (``scenarios.psld_setup.initial_layout``), random streams and
  seed as the simulator (``psld``, ``psld_noexplore``, ``strawman``: blocks of ``block_mb``, round-robin;
  ``mxnet``, ``tensorflow``, ``byteps``: their layouts, never reassigned).
* **Scheduler**: adaptive policies run the runtime's closed loop (``Job.report_every``): every
  ``psld.report_every`` iterations rank 0 gathers the workers' live block timings and
  ``policies.psld.PSLDScheduler`` (the simulator's scheduler, same ``SchedulerConfig``) decides; its
  random stream is the simulator's (seed, 2).
* **Stragglers**: a ``bandwidth`` straggler caps its PS's emulated NIC at ``value`` Gbit/s in each
  direction (pushes in, pulls and migrations out, concurrently: ``ps.run_server``), as the simulator caps
  that PS's link ([PSLD] §6.1's ``tc`` cap); a ``cpu`` straggler paces the PS's summing at the
  simulator's rate for ``value`` cores (``value x costs.sum_gbytes_per_core_s`` GB/s). Both hold for the
  whole run.
* **Workers** (``real:``): ``device: cuda`` puts worker w's gradient on ``cuda:(w mod #GPUs)``, with
  its parameters copied in and its gradient copied out for gloo each iteration (the PSs stay CPU
  processes); ``gradient: linear`` computes a linear layer's gradient over a minibatch of the model's
  batch size (``ps.linear_gradient``) instead of the closed-form toy.
* **Length**: rank 0 ends the run at the first PREPARE at least ``duration_s`` after it started, and
  after at least two reporting periods plus one iteration (so a decision is followed by measured
  iterations); the stop travels with the PREPARE broadcast, so every rank stops at the same iteration.
  (A count fixed in advance from a probe cannot know that PSLD will make the iterations several times
  shorter after its first decision.) A 1-iteration probe of the same job runs first in the same process
  group to pay the first-touch costs; it is not in the tables, and ``info["probe_iteration_s"]`` records
  it.
* **Timing samples**: the simulator's (push transfer + PS service + pull transfer): ``ps.run_worker``
  times each block's round trip from its first push to the block's PS to the block's own pull, and
  subtracts what that PS reports it held the worker's copy without carrying or serving it (the wait for
  the other workers' pushes, for its CPU, its emulated NIC's queue: ``ps.held_s``, ``ps.shaped``); the
  raw push-to-pull times go to ``result.raw_samples`` for the calibration; the PREPARE
  barrier's arrival and release times (``ps.Marks``) give the iterations' boundaries.
* **Standby PSs** (``cluster.standby``): started with the others, idle (no blocks, but in every
  PREPARE). When the scheduler scales out (the simulator's decision: ``PSLDScheduler`` with the standby
  ids S..S+T-1, activated in order), rank 0's PREPARE carries a map that gives the added PS blocks
  (ADD_SERVER); in vanilla mode the moved blocks' parameters and momentum migrate to it at k* like any
  reassignment's (``ps._migrate``).
* **Failures**: a rank that dies (a PS SIGKILLed mid-run, say) fails the launch within a fraction of a
  second: ``runtime.launch.launch`` stops the other ranks (their gloo ops may be blocked on the dead
  peer) and raises ``RankFailure`` naming the rank ("PS 1 (rank 1) died during the run (killed by
  SIGKILL) ..."); no table is returned and no process outlives the call. There is no recovery: a
  PS's blocks have no second copy. ``CLUSTERTWIN_PSLD_KILL=RANK:K`` (tests) makes PS RANK SIGKILL itself
  after PREPARE K of the main run.

Refused with an ``InputError`` naming the field: ``removals`` (no DEL_SERVER), ``regimes`` and
stragglers that start after 0 or end (the throttle is fixed per run), two stragglers on one PS (one
throttle per PS), more workers than twice the CPU cores (FlexRR's rule; the PSs mostly wait on sockets
or sleep in their throttle and are not counted there), more processes in all (standby PSs included)
than four times the cores, and ``real.device: cuda`` without a GPU. Link speeds, ``server_cores``,
``colocate``, ``costs`` and the model's compute times are simulator parameters: the real run has
loopback TCP, this host's cores and the runtime's gradient instead of the model's forward/backward
(``runtime.psld.calibrate`` measures the simulator's values on a real run).

``reassignments.added`` is the activated standby PS of a scale-out (-1 otherwise), and ``loads`` lists
every PS, standby ones included (0 bytes until activated), as the simulator does.
``reassignments.suspended_s`` is the re-sharding pause, the time the workers are blocked: the PREPARE
barrier (the last rank's arrival to the last rank's release) plus what the slowest PS took from that
release to the RESUME barrier (its vanilla state migration, then the barrier: ``ps.resume``; the
workers start iteration k* only then) (``result.measured["pauses"]`` has both). ``iterations.start_s``
/ ``end_s`` are the first worker's release from / the last worker's arrival at the PREPARE barrier that
opens / closes each iteration (so iteration k* of a reassignment holds the migration), on the host's
monotonic clock (shared by all processes), from the main job's start.
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
from clustertwin.policies.psld.blocks import Block, Tensor
from clustertwin.policies.psld.migration import migrations
from clustertwin.policies.psld.profiling import Sample
from clustertwin.scenarios.psld_results import frame
from clustertwin.scenarios.psld_schema import PSLDScenario
from clustertwin.scenarios.psld_setup import (
    POLICY_STREAM,
    initial_layout,
    scheduler_config,
    straggler_timeline,
)
from clustertwin.scenarios.results import RunResult
from clustertwin.traces.psld_models import psld_model

from clustertwin.errors import InputError

PROBE_ITERATIONS = 1
MAX_ITERATIONS = 100_000
GBIT = 1e9 / 8  # bytes per second in one Gbit/s
# Fault injection for tests: "RANK:K" makes PS RANK SIGKILL itself right after the PREPARE of iteration
# K of every main run (not the probe), so a test can lose a PS mid-run deterministically.
KILL_ENV = "CLUSTERTWIN_PSLD_KILL"


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
    if scenario.real.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise InputError(
                f"{src}: field real.device",
                "real.device: cuda needs a CUDA GPU, and torch sees none here; use real.device: cpu",
            )
    if scenario.block_bytes < 8:
        raise InputError(f"{src}: field block_mb", "a real block holds at least one 8-byte element")
    if scenario.real.model:
        try:
            units, itemsize = real_tensors(scenario)
        except InputError as exc:
            raise InputError(f"{src}: field {exc.where}", exc.message) from exc
        blocks = sum(max(1, math.ceil(t.nbytes * itemsize / scenario.block_bytes)) for t in units)
        if c.servers > blocks:
            raise InputError(
                f"{src}: field cluster.servers",
                f"{scenario.real.model} has {blocks} blocks at block_mb={scenario.block_mb}: a PS would hold"
                " nothing; lower cluster.servers or block_mb",
            )


def throttles(scenario: PSLDScenario) -> dict[int, float]:
    """PS -> throttle rate in bytes/s from the start, for the stragglers of ``start_s: 0`` (NIC cap or
    summing rate)."""
    out = {}
    for s in scenario.stragglers:
        if s.start_s > 0:
            continue
        if s.what == "bandwidth":
            out[s.server] = s.value * GBIT
        else:
            out[s.server] = s.value * scenario.costs.sum_gbytes_per_core_s * 1e9
    return out


def build_job(scenario: PSLDScenario, iterations: int = PROBE_ITERATIONS):
    """The runtime ``Job`` of a scenario (without closed loop if the policy is not adaptive)."""
    from clustertwin.runtime.psld.ps import Job

    check_real(scenario)
    model = psld_model(scenario.model, scenario.batch_size, scenario.compute_scale)
    units, itemsize = real_tensors(scenario)
    unit_block = max(1, scenario.block_bytes // itemsize)
    blocks, owners = initial_layout(scenario, units, unit_block)
    starts = np.concatenate([[0], np.cumsum([t.nbytes for t in units])]) * itemsize
    flat = tuple(
        Block(b.id, b.tensor, int(starts[b.tensor]) + itemsize * b.offset, itemsize * b.nbytes)
        for b in blocks
    )
    adaptive = scenario.placement.adaptive
    return Job(
        servers=scenario.cluster.servers,
        standby=scenario.cluster.standby,
        workers=scenario.cluster.workers,
        numel=int(sum(t.nbytes for t in units)),
        blocks=flat,
        owners=tuple(owners),
        iterations=iterations,
        mode=scenario.mode,
        plans={},
        throttle=_rates(scenario, "bandwidth"),
        report_every=scenario.psld.report_every if adaptive else 0,
        scheduler=scheduler_config(scenario) if adaptive else None,
        seed=(scenario.seed, POLICY_STREAM),
        cpu_throttle=_rates(scenario, "cpu"),
        device=scenario.real.device,
        gradient=scenario.real.gradient,
        batch=model.batch_size,
        lr=scenario.real.lr / scenario.cluster.workers if scenario.real.model else 0.05,
        model=scenario.real.model,
        data=scenario.real.data,
        model_seed=scenario.seed,
        changes=step_changes(scenario),
        removals=tuple((r.time_s, r.server) for r in scenario.removals),
    )


def real_tensors(scenario: PSLDScenario) -> tuple[list[Tensor], int]:
    """The tensors a real run moves, in units of one element, and the element's bytes: the real
    network's parameters (float32) when ``real.model`` is set, else the scenario model's fp32 tensors
    held as ceil(bytes / 8) float64 elements. Layouts are computed in these units, so every block is a
    whole number of elements."""
    if scenario.real.model:
        from clustertwin.runtime.models.trainer import Trainer

        model = psld_model(scenario.model, scenario.batch_size, scenario.compute_scale)
        net = Trainer(scenario.real.model, scenario.real.data, scenario.seed, model.batch_size, 1)
        return [Tensor(name, n, i) for i, (name, n) in enumerate(net.tensors())], 4
    model = psld_model(scenario.model, scenario.batch_size, scenario.compute_scale)
    return [Tensor(t.name, math.ceil(t.nbytes / 8), t.layer) for t in model.tensors], 8


def _rates(scenario: PSLDScenario, what: str) -> dict[int, float] | None:
    rates = throttles(scenario)
    chosen = {s.server: rates[s.server] for s in scenario.stragglers if s.what == what and s.start_s == 0}
    return chosen or None


def step_changes(scenario: PSLDScenario) -> tuple[tuple[float, int, str, float, float | None], ...]:
    """The straggler timeline after the start (``scenarios.psld_setup.straggler_timeline``: the
    simulator's, regime switches included) as the runtime's (time_s, server, what, value, rate): a
    bandwidth value caps the PS's emulated NIC at that many Gbit/s, a cpu value paces its summing at the
    simulator's rate for that many cores, and the cluster's own value (``server_gbps``,
    ``server_cores``: a straggler's end) lifts the cap."""
    c = scenario.cluster
    normal = {"bandwidth": c.server_gbps, "cpu": c.server_cores}
    per = {"bandwidth": GBIT, "cpu": scenario.costs.sum_gbytes_per_core_s * 1e9}
    return tuple(
        (
            ch.time_s,
            ch.server,
            ch.what,
            ch.value,
            None if ch.value == normal[ch.what] else ch.value * per[ch.what],
        )
        for ch in straggler_timeline(scenario)
        if ch.time_s > 0
    )


# -- processes ------------------------------------------------------------------------------------
def _main(rank: int, runs: list[tuple[Any, float]]) -> None:
    """One rank of a launch that runs ``runs`` (job, duration_s) one after another on one process group,
    each as a 1-iteration probe (first touches) and then the job itself."""
    import torch.distributed as dist
    from clustertwin.runtime.launch import join, report

    join()
    try:
        first = runs[0][0]
        if rank >= first.ps_ranks and first.device == "cuda":
            # CUDA context, cuBLAS handle and kernels load on the first gradient (seconds): pay that
            # before the probe, so the timed runs do not pay it
            from clustertwin.runtime.psld import ps

            w = rank - first.ps_ranks
            ps.deterministic_cuda()
            ps.compute_gradient(ps.start_params(first), w, 0, first, ps.worker_device(first, w))
        for index, (main, duration_s) in enumerate(runs):
            report((index, rank, *_run_one(rank, main, duration_s)))
            dist.barrier()
    finally:
        dist.destroy_process_group()


def _run_one(rank: int, main, duration_s: float) -> tuple:
    import torch.distributed as dist
    from clustertwin.runtime.psld import ps

    marks: ps.Marks = []
    probe = replace(main, iterations=PROBE_ITERATIONS, report_every=0, scheduler=None, kill_at=None)
    # probe: one iteration of the same job, which pays the process group's first-touch costs
    if rank < probe.ps_ranks:
        ps.run_server(rank, probe, marks)
    else:
        ps.run_worker(rank, probe, marks)
    dist.barrier()  # the probe ends when every rank is through (rank 0 may be the fast PS)
    per = time.monotonic() - marks[0][1]
    floor = 2 * main.report_every + 1 if main.report_every else 2
    # the run: rank 0 ends it at the first PREPARE after duration_s (at least ``floor`` iterations)
    job = replace(main, iterations=MAX_ITERATIONS, stop_after_s=duration_s, min_iterations=floor)
    marks.clear()
    dist.barrier()
    origin = time.monotonic()
    if rank < job.ps_ranks:
        stats = ps.ServerStats()
        held, control = ps.run_server(rank, job, marks, stats, origin)
        records = (control.records, control.removed) if control is not None else ([], [])
        payload: tuple = (sorted(held), records, stats)
    else:
        compute: list[float] = []
        raw: list = []
        losses: list[float] = []
        params, samples = ps.run_worker(rank, job, marks, compute, raw, losses)
        payload = (
            params.numpy().tobytes(),
            [(s.server, s.nbytes, s.seconds) for s in samples],
            compute,
            [(s.server, s.nbytes, s.seconds) for s in raw],
            losses,
        )
    end = time.monotonic()
    return origin, marks, end, payload, len(marks), per


def _launch(runs: list[tuple[Any, float]], progress) -> list[dict[int, tuple]]:
    from clustertwin.runtime.launch import launch
    from clustertwin.runtime.psld.launch import roles

    first = runs[0][0]
    world = first.ps_ranks + first.workers
    limit = sum(300 + 20 * d for _, d in runs)
    items = launch(
        _main,
        world,
        (runs,),
        roles=roles(first),
        limit_s=limit,
        expected=world * len(runs),
        progress=progress,
    )
    out: list[dict[int, tuple]] = [{} for _ in runs]
    for index, rank, *rest in items:
        out[index][rank] = tuple(rest)
    return out


# -- tables ---------------------------------------------------------------------------------------
def _tables(scenario: PSLDScenario, job, out: dict[int, tuple]) -> tuple[dict, dict]:
    S, W = job.ps_ranks, job.workers  # every PS rank, standby included (server ids = ranks)
    origin = out[0][0]
    iters = out[0][4]
    sizes = np.asarray([b.nbytes for b in job.blocks], dtype=float)
    arrive = np.full((S + W, iters + 1), np.nan)
    release = np.full((S + W, iters), np.nan)
    for rank, (_, marks, end, *_rest) in out.items():
        for k, a, r in marks:
            arrive[rank, k], release[rank, k] = a - origin, r - origin
        arrive[rank, iters] = end - origin
    records, removed = out[0][3][1]
    changes_at = {rec[0]: rec for rec in records if rec[2].action != "none"}
    # after each PREPARE that reassigned: the slowest PS's release -> RESUME (its vanilla migration and
    # the wait for the others'), the part of the pause after the PREPARE barrier
    migration: dict[int, float] = {}
    for r in range(S):
        for k, seconds in out[r][3][2].migration_s:
            migration[k] = max(migration.get(k, 0.0), seconds)
    owners = list(job.owners)
    version = 0
    it_rows, re_rows, rep_rows, pauses = [], [], [], []
    load_rows = _loads(0, 0.0, owners, sizes, S)
    for k in range(iters):
        if k in changes_at:
            _, _, d, _ = changes_at[k]
            moves = migrations(owners, d.owners)
            barrier = float(np.max(arrive[:, k]))
            resumed = float(np.max(release[:, k]))
            moved = migration.get(k, 0.0)
            pauses.append({"k": k, "barrier_s": resumed - barrier, "migration_s": moved})
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
                    resumed - barrier + moved,
                )
            )
            owners = list(d.owners)
            version += 1
            load_rows += _loads(version, resumed, owners, sizes, S)
        start = float(np.min(release[S:, k]))
        end = float(np.max(arrive[S:, k + 1]))
        it_rows.append((k, start, end, version, len(set(owners))))
    for k, t, d, profile in records:
        if d.action == "remove":
            continue
        for r, (alpha, beta, pred) in profile.items():
            rep_rows.append(
                (k // job.report_every - 1, t - origin, r, alpha, beta, pred, r in d.superior, d.variation)
            )
    ch_rows = [(0.0, s.server, s.what, float(s.value)) for s in scenario.stragglers if s.start_s == 0]
    ch_rows += [
        (t - origin, r, what, float(value)) for r in range(S) for t, what, value in out[r][3][2].changes
    ]
    ch_rows += [(t - origin, r, "remove", 1.0 if usable else 0.0) for t, r, usable in removed]
    ch_rows.sort(key=lambda row: row[0])
    tables = {
        "iterations": frame(it_rows, "iterations"),
        "reassignments": frame(re_rows, "reassignments"),
        "loads": frame(load_rows, "loads"),
        "reports": frame(rep_rows, "reports"),
        "changes": frame(ch_rows, "changes"),
    }
    samples = [x for w in range(W) for x in out[S + w][3][1]]
    extra = {"iterations_run": iters, "probe_iteration_s": float(out[0][5]), "samples": len(samples)}
    servers = [out[r][3][2] for r in range(S)]
    measured = {
        "compute_s": [list(out[S + w][3][2]) for w in range(W)],
        "sum_bytes": [st.sum_bytes for st in servers],
        "sum_s": [st.sum_s for st in servers],
        "update_bytes": [st.update_bytes for st in servers],
        "update_s": [st.update_s for st in servers],
        "pauses": pauses,
        "loss": [list(out[S + w][3][4]) for w in range(W)],
    }
    return tables, {**extra, "measured": measured}


def _loss_info(losses: list[list[float]]) -> dict[str, float]:
    """A real model's training loss (mean over workers) over the run's first and last three iterations,
    and its per-iteration series; empty for the stand-ins, which have no loss."""
    n = min((len(x) for x in losses), default=0)
    if n == 0:
        return {}
    per = np.mean([x[:n] for x in losses], axis=0)
    m = min(3, n)
    return {"loss_first": float(per[:m].mean()), "loss_last": float(per[-m:].mean())}


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
    ``backend``, ``device``, ``gradient``, ``iterations_run``, ``probe_iteration_s``, ``samples`` and
    ``final_params_sha256`` (of every worker's final parameters, which the run checks are identical
    across workers). The result also carries ``job`` (the Job as run), ``samples`` (every block timing,
    per worker in iteration-major, block order), ``final_params`` (bytes) and ``measured`` (see
    ``run_real_many``).
    """
    return run_real_many([scenario], progress)[0]


def run_real_many(
    scenarios: list[PSLDScenario], progress: Callable[[float, str], None] | None = None
) -> list[RunResult]:
    """Run several scenarios of the same cluster size one after another in one launch (one process
    start-up, which costs more than a short run on a small host), each as ``run_real`` would.

    ``result.measured`` holds what the runtime measured for a calibration: ``compute_s`` (per worker,
    per iteration: the gradient computation with its host<->device copies), per PS ``sum_bytes`` and
    ``sum_s`` (summing), ``update_bytes``/``update_s`` (vanilla SGD) and ``pauses`` (per reassignment:
    ``k``, the PREPARE ``barrier_s`` and ``migration_s``: the slowest PS's from the PREPARE release to the
    RESUME barrier, its vanilla migration included; the workers are blocked for both).
    """
    import hashlib

    wall0 = time.perf_counter()
    jobs = [build_job(sc) for sc in scenarios]
    kill = os.environ.get(KILL_ENV)
    if kill:  # fault injection: "rank:k" -> that PS SIGKILLs itself after PREPARE k of each main run
        rank, k = (int(x) for x in kill.split(":"))
        jobs = [replace(j, kill_at=(rank, k)) for j in jobs]
    shape = {(j.servers, j.workers, j.device) for j in jobs}
    if len(shape) != 1:
        raise ValueError(f"one launch needs one cluster size and device, got {sorted(shape)}")
    outs = _launch([(job, sc.duration_s) for job, sc in zip(jobs, scenarios, strict=True)], progress)
    wall = time.perf_counter() - wall0
    results = []
    for scenario, job, out in zip(scenarios, jobs, outs, strict=True):
        S, W = job.ps_ranks, job.workers
        finals = {out[S + w][3][0] for w in range(W)}
        if len(finals) != 1:
            raise RuntimeError("the workers ended with different parameters: the PS lost an update")
        tables, extra = _tables(scenario, job, out)
        measured = extra.pop("measured")
        model = psld_model(scenario.model, scenario.batch_size, scenario.compute_scale)
        span = max(v[2] for v in out.values()) - min(v[0] for v in out.values())
        info: dict[str, Any] = {
            "backend": "real",
            "device": job.device,
            "gradient": "model" if job.model else job.gradient,
            "real_model": job.model,
            **_loss_info(measured["loss"]),
            "policy": scenario.policy,
            "mode": scenario.mode,
            "model": scenario.model,
            "workers": W,
            "servers": job.servers,
            "standby": job.standby,
            "blocks": len(job.blocks),
            "model_bytes": float(sum(b.nbytes for b in job.blocks)),
            "batch_size": model.batch_size,
            "warmup_s": scenario.warmup_s,
            "duration_s": scenario.duration_s,
            **extra,
            "final_params_sha256": hashlib.sha256(next(iter(finals))).hexdigest(),
            "run_s": float(span),
            "wall_s": wall if len(scenarios) == 1 else float(span),
        }
        result = RunResult(tables=tables, info=info)
        result.final_params = next(iter(finals))  # type: ignore[attr-defined]
        result.job = replace(job, iterations=extra["iterations_run"])  # type: ignore[attr-defined]
        result.samples = [  # type: ignore[attr-defined]
            Sample(w, int(r), nbytes, seconds) for w in range(W) for r, nbytes, seconds in out[S + w][3][1]
        ]
        # from push issue to the block's own pull, queueing behind the PS's earlier blocks included
        # (what runtime.psld.calibrate regresses on the bytes ahead of each block)
        result.raw_samples = [  # type: ignore[attr-defined]
            Sample(w, int(r), nbytes, seconds) for w in range(W) for r, nbytes, seconds in out[S + w][3][3]
        ]
        result.measured = measured  # type: ignore[attr-defined]
        results.append(result)
    return results


__all__ = ["build_job", "check_real", "run_real", "run_real_many", "throttles"]
