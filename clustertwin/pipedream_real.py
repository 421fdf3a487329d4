"""``clustertwin run SCENARIO --backend real`` for ``kind: pipedream``: profile, plan, run, and simulate
the same run from its own profile.

1. **Profile** the scenario's ``real.model`` (``runtime.pipedream.models``) layer by layer on the run's
   device at the scenario's microbatch size (``runtime.pipedream.profiler.profile_layers``: forward,
   backward, output, held and update costs; [Narayanan] §2.4.1's profiler).
2. **Plan** it with the scenario's planner on the scenario's cluster (``sim.pipedream.runner.build``,
   the simulation's own path) and generate the schedule's per-stage op lists: a schedule is data, and
   the real ranks execute the same lists the simulator does. Each stage of the plan (and of the
   data-parallel baseline) is then timed whole on the same device (``profiler.profile_chunks``: one
   autograd graph over the stage, as a rank runs it; the ``chunks`` table): a stage's forward and
   backward run a few per cent longer than its layers' summed, and the op-level simulation of this run
   takes them from there (the planner keeps the per-layer profile).
3. **Run** one process per device (``runtime.launch``; gloo on CPU, NCCL on ``cuda:rank``): a link probe,
   ``real.warmup_batches`` untimed minibatches, then ``num_batches`` timed ones
   (``runtime.pipedream.real``); with ``real.ddp_baseline`` the same samples again with data
   parallelism (one stage holding the whole model on every device: 1F1B-RR of one stage, [Narayanan]
   §2.4.2, whose update all-reduces every replica's gradient).
4. **Simulate** the timed run's op lists from the run's own measurements: each stage timed whole
   (``chunks``), the probed link and, for replicated stages, the probed gradient
   synchronisation (``runtime.pipedream.probe``: the all-reduce of each replicated chunk's real gradients
   among its replicas, as the runtime runs it, whose bus bandwidth per group size enters the link table,
   ``Network.collective``; ``sim.pipedream.measured``); NCCL's stream-ordered receive (a message leaves
   only once its receiver has reached the op that consumes it) and the slowdown of compute while a
   transfer runs, which every rank measures on its own stages inside the run, all devices busy
   (``probe.probe_compute``, the ``stage_times`` table); the runtime's memory model (SGD without
   momentum, gradient buffer per update): the ``own_sim_*`` metrics, next to the measured ones, and
   beside them ``own_sim_profile_*`` (transfers prefetched, no slowdown), ``own_sim_no_traffic_*`` and
   ``own_sim_in_run_*`` (the stage times of ``stage_times``).

The run's tables follow the simulation's contract (``ops``, ``devices``, ``stages``) plus ``layers``, the
measured profile, ``stage_times``, ``chunks`` and, with ``real.ddp_baseline``, ``ddp_ops`` (the
baseline's op table, ``ops``'s columns): ``clustertwin run SCENARIO --set model.profile=RUN_DIR`` plans
from the layers and simulates with the same measured model (``sim.pipedream.measured.RunMeasurements``,
switched by ``model.measured``), so that the run's own plan gives back ``own_sim_*``, and ``clustertwin
compare`` sets the two runs side by side.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pandas as pd

from clustertwin.errors import InputError
from clustertwin.policies.pipedream.ops import Schedule
from clustertwin.policies.pipedream.partition import StagePlan
from clustertwin.policies.pipedream.schedules import make_schedule, schedule_spec
from clustertwin.scenarios.pipedream_real_section import (
    PIPEDREAM_CHUNKS_TABLE,
    PIPEDREAM_LAYERS_TABLE,
    PIPEDREAM_STAGE_TIMES_TABLE,
)
from clustertwin.scenarios.pipedream_schema import PipeDreamScenario
from clustertwin.scenarios.results import RunResult, contract_frame
from clustertwin.sim.pipedream.executor import simulate
from clustertwin.sim.pipedream.measured import (
    collective_table,
    measured_costs,
    planner_profile,
    probed_network,
    stage_compute,
)
from clustertwin.sim.pipedream.model import Device, MemoryModel
from clustertwin.sim.pipedream.runner import build, ops_table, tables

Progress = Callable[[float, str], None]
GIB = 2.0**30


def check(scenario: PipeDreamScenario, backend: str) -> None:
    """Refuse, by name, what a real run cannot honour (before any work starts)."""
    if backend != "real":
        return
    where = scenario.source
    if scenario.real is None:
        raise InputError(where, "real: --backend real needs a real section (the model to train)")
    refusals = {
        "data_parallel": scenario.data_parallel != 1
        and "the runtime runs one pipeline; replicate stages with schedule 1f1b instead",
        "cluster.speeds": scenario.cluster.speeds is not None
        and "device speeds cannot be emulated on real devices",
        "memory.recompute": scenario.memory.recompute and "the runtime keeps activations (no recomputation)",
        "memory.optimizer_factor": scenario.memory.optimizer_factor != 0
        and "the runtime trains with SGD without momentum: set it to 0",
        "memory.gradient_factor": scenario.memory.gradient_factor != 1
        and "the runtime keeps one gradient buffer per stage: set it to 1",
        "memory.gradient_buffer": scenario.memory.gradient_buffer != "per_update"
        and "the runtime's gradient buffer lives from a backward to the update: set per_update",
        "optimizer_step_ms": scenario.optimizer_step_ms != 0
        and "a real run measures its update (profile's update_s): set it to 0",
        "model.profile": str(scenario.model.profile).endswith(".parquet")
        and "a real run profiles its own model",
        "vertical_sync": scenario.vertical_sync
        and "the runtime keeps only the weight versions its schedule stashes, not the input stage's",
        "model.measured": scenario.model.measured is not None
        and "a real run simulates itself with every variant of its measured model (own_sim_*)",
    }
    for name, why in refusals.items():
        if why:
            raise InputError(where, f"{name}: not supported by --backend real: {why}")
    if scenario.real.device == "cuda":
        import torch

        if torch.cuda.device_count() < scenario.cluster.num_devices:
            raise InputError(
                where,
                f"real.device: cuda needs {scenario.cluster.num_devices} GPUs (cluster), torch sees"
                f" {torch.cuda.device_count()}",
            )


def _profile(scenario: PipeDreamScenario) -> tuple[Any, Any, Callable[[list[tuple[int, int]]], pd.DataFrame]]:
    """(workload source, (layers table, per-layer output shapes and dtypes), chunk timer) measured on the
    run's device; the chunk timer times runs of layers whole, as a stage runs them (the ``chunks``
    table), and holds the profiled model until it is dropped."""
    import torch
    from torch import nn

    from clustertwin.runtime.pipedream.models import ModelSource, loss, trace_shapes
    from clustertwin.runtime.pipedream.profiler import profile_chunks, profile_layers

    real = scenario.real
    assert real is not None
    try:
        source = ModelSource.of(real.model, real.options, scenario.seed, real.input_shape, real.vocab)
        layers = source.layers()
    except (ValueError, TypeError, ImportError, AttributeError) as err:
        raise InputError(scenario.source, f"real.model: {err}") from None
    if len(layers) > scenario.model.max_blocks:
        raise InputError(
            scenario.source,
            f"real.model: {len(layers)} layers; raise model.max_blocks to at least that (a real run plans"
            " every layer)",
        )
    device = torch.device("cuda", 0) if real.device == "cuda" else torch.device("cpu")
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)  # as each rank runs
    try:
        model = nn.Sequential(*layers).to(device)
        x, _ = source.microbatch(0, scenario.microbatch_size, (), 1)
        shapes, dtypes = trace_shapes(list(model), x.to(device))
        classes_shape, classes = shapes[-1][1:-1], shapes[-1][-1]
        x, y = source.microbatch(0, scenario.microbatch_size, classes_shape, classes)
        x, y = x.to(device), y.to(device)
        measured = profile_layers(model, x, real.profile_iterations, 1, real.model, loss=(loss, y))
    finally:
        torch.set_num_threads(threads)

    def time_chunks(cuts: list[tuple[int, int]]) -> pd.DataFrame:
        if device.type == "cpu":
            torch.set_num_threads(1)
        try:  # a chunk's backward timing holds iterations + 1 graphs of it: at most 3 + 1
            timed = profile_chunks(
                model, x, [range(a, b + 1) for a, b in cuts], min(real.profile_iterations, 3), 1, (loss, y)
            )
        finally:
            torch.set_num_threads(threads)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return contract_frame(PIPEDREAM_CHUNKS_TABLE, timed)

    rows = [
        {
            "layer": i,
            "description": lay.description,
            "forward_s": lay.forward_s,
            "backward_s": lay.backward_s,
            "output_bytes": lay.activation_bytes,
            "parameter_bytes": lay.parameter_bytes,
            "held_bytes": held,
            "update_s": update,
            "accumulate_s": add,
        }
        for i, (lay, held, update, add) in enumerate(
            zip(
                measured.profile.layers,
                measured.held_bytes,
                measured.update_s,
                measured.accumulate_s,
                strict=True,
            )
        )
    ]
    return source, (contract_frame(PIPEDREAM_LAYERS_TABLE, rows), shapes, dtypes), time_chunks


def _workload(source: Any, scenario: PipeDreamScenario, stages: tuple[StagePlan, ...], traced: tuple) -> Any:
    from clustertwin.runtime.pipedream.models import SequentialWorkload

    _, shapes, dtypes = traced
    cuts = tuple((s.first, s.last) for s in stages)
    return SequentialWorkload(source, scenario.microbatch_size, cuts, shapes, dtypes, scenario.seed)


def _schedules(
    scenario: PipeDreamScenario, replicas: tuple[int, ...], name: str
) -> tuple[Schedule | None, Schedule]:
    spec = schedule_spec(name)
    microbatches = spec.inputs(scenario.microbatches, replicas)
    args = (scenario.chunks_per_device, tuple(scenario.in_flight) if scenario.in_flight else None)
    warmup_batches = scenario.real.warmup_batches if scenario.real else 0
    warmup = make_schedule(name, replicas, microbatches, warmup_batches, *args) if warmup_batches else None
    return warmup, make_schedule(name, replicas, microbatches, scenario.num_batches, *args)


def _live_counts(schedule: Schedule, wi: int) -> tuple[int, int]:
    """(most microbatches stashed at once, most weight versions alive at once) of worker ``wi``'s op
    list under the runtime's rules (a version lives while it is the newest or a later op names it)."""
    ops = schedule.workers[wi].ops
    future: dict[tuple[int, int], int] = defaultdict(int)
    for op in ops:
        if op.kind in ("F", "B"):
            future[(op.chunk, op.version)] += 1
    newest = dict.fromkeys(schedule.workers[wi].chunks, 0)
    live = {c: {0} for c in newest}
    stashed = peak_stash = 0
    peak_versions = 1
    for op in ops:
        c = op.chunk
        if op.kind == "F":
            stashed += 1
            future[(c, op.version)] -= 1
        elif op.kind == "B":
            stashed -= 1
            future[(c, op.version)] -= 1
        else:
            newest[c] = op.version
            live[c].add(op.version)
            peak_versions = max(peak_versions, len(live[c]))
        live[c] = {v for v in live[c] if v == newest[c] or future[(c, v)] > 0}
        peak_stash = max(peak_stash, stashed)
    return peak_stash, peak_versions


def _own_simulation(
    scenario: PipeDreamScenario,
    schedule: Schedule,
    layers: pd.DataFrame,
    stages: tuple[StagePlan, ...],
    link: dict,
    collective: tuple[tuple[int, float], ...],
    chunks: pd.DataFrame,
    times: pd.DataFrame | None = None,
    rendezvous: bool = True,
    traffic: bool = True,
    in_run: bool = False,
) -> dict[str, float]:
    """The timed run simulated from the run's own measurements: its stages timed whole on one device
    (``chunks``; with ``in_run``, as the ranks timed them inside the run: ``times``, one plan's
    ``stage_times`` rows), the probed link and collective, NCCL's receive-side rendezvous and the
    slowdown of compute during transfers measured by the ranks (``times``;
    ``sim.pipedream.executor.simulate``)."""
    inside, slowdown = stage_compute(times) if times is not None and len(times) else ({}, None)
    costs = measured_costs(layers, stages, schedule.batch_microbatches, chunks, inside if in_run else None)
    network = probed_network(link["latency_s"], link["bandwidth_Bps"], collective)
    devices = [Device() for _ in schedule.workers]
    memory = MemoryModel(gradient_factor=1.0, optimizer_factor=0.0, gradient_buffer="per_update")
    if slowdown is not None:
        slowdown = (slowdown + [(0.0, 0.0)] * len(costs))[: len(costs)]
    out = simulate(
        schedule,
        costs,
        devices,
        network,
        memory,
        overlap_allreduce=False,
        rendezvous=rendezvous,
        transfer_slowdown=slowdown if traffic else None,
    )
    samples = schedule.num_microbatches * scenario.microbatch_size
    return {
        "makespan_s": out.makespan_s,
        "throughput_samples_per_s": samples / out.makespan_s,
        "peak_memory_gib_max": max(out.peak_memory) / GIB,
    }


def _stage_times(runs: dict[str, list[dict]], plans: list) -> pd.DataFrame:
    """The ``stage_times`` table: every rank's ``probe_compute`` rows of every plan."""
    rows = []
    for plan in plans:
        for item in runs[plan.name]:
            device = plan.timed.workers[item["rank"]].device
            for r in item.get("compute", []):
                rows.append(
                    {
                        "plan": plan.name,
                        "device": device,
                        "stage": int(r["chunk"]),
                        **{k: float(r[k]) for k in PIPEDREAM_STAGE_TIMES_TABLE if k.endswith("_s")},
                    }
                )
    return contract_frame(PIPEDREAM_STAGE_TIMES_TABLE, rows)


# The own simulation's variants, each as a throughput error next to the full one (``own_sim_*``): the
# model before the transfers were modelled (transfers prefetched, no slowdown), the full model without
# the slowdown, and with the stage times the ranks measured inside the run.
VARIANTS = {
    "profile": {"rendezvous": False, "traffic": False},
    "no_traffic": {"traffic": False},
    "in_run": {"in_run": True},
}


def run_real(
    scenario: PipeDreamScenario, progress: Progress | None = None, snapshot_dir: Any = None
) -> RunResult:
    """Profile, plan, run and simulate (see the module docstring)."""
    from clustertwin.runtime.launch import launch
    from clustertwin.runtime.pipedream.real import RealPlan, rank_main

    check(scenario, "real")
    real = scenario.real
    assert real is not None
    say = progress or (lambda _f, _t: None)
    say(0.0, f"profiling {real.model} on {real.device}")
    source, traced, time_chunks = _profile(scenario)
    layers = traced[0]
    profile = planner_profile(layers, scenario.microbatch_size, real.model)
    _, plan, schedule, costs, devices = build(scenario, profile)
    stages = plan.stages
    if plan.data_parallel != 1:
        raise InputError(
            scenario.source,
            f"planner.mode: {scenario.planner.mode} chose {plan.data_parallel} pipeline copies, and the"
            " runtime runs one pipeline: use a planner that replicates stages (hierarchical) instead",
        )
    if any(s.replicas > 1 for s in stages) and scenario.overlap_allreduce:
        raise InputError(
            scenario.source,
            f"overlap_allreduce: the plan {plan.config} replicates stages, and the runtime all-reduces"
            " after the backward (no overlap): set overlap_allreduce: false",
        )
    world = len(schedule.workers)
    replicas = (
        (1,) * world if schedule_spec(scenario.schedule).interleaves else tuple(s.replicas for s in stages)
    )
    warmup, timed = _schedules(scenario, replicas, scenario.schedule)
    plans = [RealPlan("plan", _workload(source, scenario, stages, traced), warmup, timed)]
    ddp_stages = (StagePlan(0, len(layers) - 1, world),)
    cuts = sorted({(st.first, st.last) for st in (*stages, *(ddp_stages if real.ddp_baseline else ()))})
    say(0.05, f"timing {len(cuts)} stages whole")
    chunks = time_chunks(cuts)
    del time_chunks  # frees the profiled model before the ranks start
    if real.ddp_baseline:
        flat = scenario.model_copy(update={"chunks_per_device": 1, "in_flight": None})
        ddp_warmup, ddp_timed = _schedules(flat, (world,), "1f1b")
        plans.append(RealPlan("ddp", _workload(source, scenario, ddp_stages, traced), ddp_warmup, ddp_timed))
    backend = "nccl" if real.device == "cuda" else "gloo"
    say(0.1, f"running plan {plan.config} ({scenario.schedule}) on {world} {backend} processes")
    env_before = os.environ.get("NCCL_NVLS_ENABLE")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # never NVLink multicast
    try:
        items = launch(rank_main, world, (backend, plans, real.lr), limit_s=real.limit_s)
    finally:
        if env_before is None:
            os.environ.pop("NCCL_NVLS_ENABLE", None)
    say(0.9, "simulating the run from its own profile")
    links = [i["link"] for i in items if "link" in i and i["rank"] == 1]
    link = links[0] if links else {"latency_s": 0.0, "bandwidth_Bps": math.inf}
    runs: dict[str, list[dict]] = defaultdict(list)
    for item in items:
        if "plan" in item:
            runs[item["plan"]].append(item)
    result = _result(scenario, plan, timed, costs, devices, runs["plan"], layers)
    result.tables["chunks"] = chunks
    times = _stage_times(runs, plans)
    result.tables["stage_times"] = times
    collectives = {
        name: collective_table(p for r in ranks for p in r["sync"]) for name, ranks in runs.items()
    }

    def own_sim(name: str, schedule: Schedule, plan_stages: tuple[StagePlan, ...], **variant: bool) -> dict:
        mine = times[times["plan"] == name]
        return _own_simulation(
            scenario, schedule, layers, plan_stages, link, collectives[name], chunks, mine, **variant
        )

    own = own_sim("plan", timed, stages)
    info = result.info
    for name, table in collectives.items():
        prefix = "" if name == "plan" else f"{name}_"
        info.update({f"{prefix}sync_busbw_gbs_r{r}": bw / 1e9 for r, bw in table})
    info.update({f"own_sim_{k}": v for k, v in own.items()})
    info["link_latency_us"] = link["latency_s"] * 1e6
    info["link_bandwidth_gbs"] = link["bandwidth_Bps"] / 1e9
    real_tput = info["samples"] / info["makespan_s"]
    info["own_sim_throughput_error"] = own["throughput_samples_per_s"] / real_tput - 1.0
    for variant, options in VARIANTS.items():
        other = own_sim("plan", timed, stages, **options)
        info[f"own_sim_{variant}_throughput_error"] = other["throughput_samples_per_s"] / real_tput - 1.0
    if real.ddp_baseline:
        ddp = runs["ddp"]
        wall = max(r["wall_s"] for r in ddp)
        ddp_samples = plans[1].timed.num_microbatches * scenario.microbatch_size
        info["ddp_throughput_samples_per_s"] = ddp_samples / wall
        info["ddp_peak_memory_gib_max"] = max(r["peak_bytes"] for r in ddp) / GIB
        result.tables["ddp_ops"] = ops_table(
            [row for r in sorted(ddp, key=lambda r: r["rank"]) for row in r["rows"]]
        )
        info["speedup_over_ddp"] = real_tput / info["ddp_throughput_samples_per_s"]
        ddp_own = own_sim("ddp", plans[1].timed, ddp_stages)
        for variant in ("profile", "in_run"):
            other = own_sim("ddp", plans[1].timed, ddp_stages, **VARIANTS[variant])
            info[f"ddp_own_sim_{variant}_throughput_error"] = (
                other["throughput_samples_per_s"] / info["ddp_throughput_samples_per_s"] - 1.0
            )
        info["ddp_own_sim_throughput_samples_per_s"] = ddp_own["throughput_samples_per_s"]
        info["ddp_own_sim_throughput_error"] = (
            ddp_own["throughput_samples_per_s"] / info["ddp_throughput_samples_per_s"] - 1.0
        )
        info["own_sim_speedup_over_ddp"] = (
            own["throughput_samples_per_s"] / ddp_own["throughput_samples_per_s"]
        )
    say(1.0, "done")
    return result


def _result(
    scenario: PipeDreamScenario,
    plan: Any,
    schedule: Schedule,
    costs: list,
    devices: list[Device],
    ranks: list[dict],
    layers: pd.DataFrame,
) -> RunResult:
    """The run's tables (the simulation's contract plus ``layers``) and facts."""
    from clustertwin.sim.pipedream.executor import SimOutcome

    ranks = sorted(ranks, key=lambda r: r["rank"])
    rows = [row for r in ranks for row in r["rows"]]
    busy = [0.0] * len(devices)
    for row in rows:
        busy[row[0]] += row[8] - row[7]
    counts = [_live_counts(schedule, wi) for wi in range(len(schedule.workers))]
    wall = max(r["wall_s"] for r in ranks)
    outcome = SimOutcome(
        rows=rows,
        makespan_s=wall,
        busy_s=busy,
        peak_memory=[r["peak_bytes"] for r in ranks],
        peak_stashes=[c[0] for c in counts],
        peak_versions=[c[1] for c in counts],
        memory_trace=[],
    )
    out = tables(outcome, schedule, plan, costs, devices)
    out["layers"] = layers
    info: dict[str, float | int | str] = {
        "schedule": schedule.name,
        "config": plan.config,
        "noam": plan.noam,
        "predicted_time_per_microbatch_s": plan.time_per_input,
        "makespan_s": wall,
        "samples": schedule.num_microbatches * scenario.microbatch_size,
        "microbatches": schedule.num_microbatches,
        "num_devices": scenario.cluster.num_devices,
        "backend": "nccl" if scenario.real and scenario.real.device == "cuda" else "gloo",
    }
    return RunResult(tables=out, info=info)
