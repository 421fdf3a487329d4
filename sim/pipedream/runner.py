"""From a ``PipeDreamScenario`` to a ``RunResult``: load the profile, plan stages, generate the op lists,
execute them and tabulate. All decisions come from ``policies.pipedream``; this file only wires."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial

import pandas as pd
from clustertwin.policies.pipedream.ops import Schedule
from clustertwin.policies.pipedream.partition import PartitionPlan, StageMemory, StagePlan
from clustertwin.policies.pipedream.plan_memory import stage_memory
from clustertwin.policies.pipedream.planners import PLANNERS, PlannerInput, plan_with
from clustertwin.policies.pipedream.schedules import make_schedule, schedule_spec
from clustertwin.scenarios.pipedream_results import PIPEDREAM_TABLES
from clustertwin.scenarios.pipedream_schema import PipeDreamMeasured, PipeDreamScenario
from clustertwin.scenarios.results import RunResult
from clustertwin.sim.pipedream.executor import SimOutcome, simulate
from clustertwin.sim.pipedream.measured import (
    is_run_folder,
    measured_costs,
    planner_profile,
    read_chunks,
    read_layers,
    read_run,
)
from clustertwin.sim.pipedream.model import ChunkCost, Device, MemoryModel, Network
from clustertwin.traces.pipedream_profile import (
    BUNDLED_BATCH_SIZES,
    ModelProfile,
    bundled_profile,
    load_profile,
)

from clustertwin.errors import InputError

GB = 1e9
GIB = 2.0**30


def scenario_profile(scenario: PipeDreamScenario) -> ModelProfile:
    """The scenario's profile, rescaled to its microbatch size and, for a planner that needs it
    (``StagePlanner.coarsens``), coarsened to ``model.max_blocks``."""
    spec = scenario.model
    if is_run_folder(spec.profile):  # measured at the real run's microbatch size: not rescaled
        return planner_profile(read_layers(spec.profile), scenario.microbatch_size)
    if spec.profile in BUNDLED_BATCH_SIZES:
        raw = bundled_profile(spec.profile)
    else:
        raw = load_profile(spec.profile, spec.profile_batch_size)
    profile = raw.scaled(scenario.microbatch_size)
    straight = not schedule_spec(scenario.schedule).replicates_stages
    if PLANNERS.get(scenario.planner.mode).coarsens(straight):
        profile = profile.coarsened(spec.max_blocks)
    return profile


def network_of(scenario: PipeDreamScenario) -> Network:
    c = scenario.cluster
    return Network(
        intra_bandwidth=c.intra_bandwidth_gbs * GB,
        intra_latency=c.intra_latency_us * 1e-6,
        inter_bandwidth=c.inter_bandwidth_gbs * GB,
        inter_latency=c.inter_latency_us * 1e-6,
    )


def memory_model(scenario: PipeDreamScenario, profile: ModelProfile) -> Callable[[int], StageMemory] | None:
    """The memory-aware planner's model of a pipeline on ``devices`` devices (``None`` when the scenario
    does not plan memory, or interleaves chunks, whose per-device sum the per-stage DP cannot see)."""
    if not scenario.planner.memory_aware or schedule_spec(scenario.schedule).interleaves:
        return None
    activations = [lay.activation_bytes for lay in profile.layers]
    m = scenario.memory
    return partial(
        stage_memory,
        scenario.schedule,
        microbatches=scenario.microbatches,
        capacity_bytes=scenario.cluster.memory_gib * GIB,
        activation_bytes=activations,
        state_factor=m.gradient_factor + m.optimizer_factor,
        recompute=m.recompute,
    )


def plan_stages(scenario: PipeDreamScenario, profile: ModelProfile) -> PartitionPlan:
    """Stages (layer ranges and replicas) for one pipeline copy, by the scenario's planner mode."""
    c = scenario.cluster
    manual = scenario.planner.stages
    spec = schedule_spec(scenario.schedule)
    inp = PlannerInput(
        compute_s=profile.compute_s(),
        parameter_bytes=[lay.parameter_bytes for lay in profile.layers],
        cut_bytes=list(profile.cut_bytes),
        servers=c.servers,
        devices_per_server=c.devices_per_server,
        intra_bandwidth=c.intra_bandwidth_gbs * GB,
        inter_bandwidth=c.inter_bandwidth_gbs * GB,
        devices=c.num_devices // scenario.data_parallel,
        chunks_per_device=scenario.chunks_per_device,
        straight=not spec.replicates_stages,
        convention=scenario.planner.convention,
        stages=None if manual is None else tuple(StagePlan(s.first, s.last, s.replicas) for s in manual),
        activation_compression_ratio=scenario.planner.activation_compression_ratio,
        memory_for=memory_model(scenario, profile),
        microbatches=scenario.microbatches,
    )
    try:
        return plan_with(scenario.planner.mode, inp)
    except ValueError as err:
        raise InputError(f"{scenario.name}: planner", str(err)) from None


def chunk_costs(profile: ModelProfile, stages: Sequence[StagePlan]) -> list[ChunkCost]:
    """Per-stage costs for one microbatch (the profile is already at the microbatch size)."""
    out = []
    for i, st in enumerate(stages):
        group = profile.layers[st.first : st.last + 1]
        out.append(
            ChunkCost(
                forward_s=sum(g.forward_s for g in group),
                backward_s=sum(g.backward_s for g in group),
                parameter_bytes=sum(g.parameter_bytes for g in group),
                activation_bytes=sum(g.activation_bytes for g in group),
                input_bytes=profile.cut_bytes[st.first - 1] if st.first > 0 else 0.0,
                output_bytes=profile.cut_bytes[st.last] if i + 1 < len(stages) else 0.0,
            )
        )
    return out


def build(
    scenario: PipeDreamScenario, profile: ModelProfile | None = None
) -> tuple[ModelProfile, PartitionPlan, Schedule, list[ChunkCost], list[Device]]:
    """Everything the executor needs, without running it (also used by the real runtime and tests);
    ``profile``: plan this one instead of the scenario's."""
    profile = profile or scenario_profile(scenario)
    plan = plan_stages(scenario, profile)
    spec = schedule_spec(scenario.schedule)
    replicas = tuple(s.replicas for s in plan.stages)
    if spec.interleaves:  # one straight pipeline of devices, each holding several of the plan's stages
        replicas = (1,) * (len(plan.stages) // scenario.chunks_per_device)
    microbatches = spec.inputs(scenario.microbatches, replicas)
    try:
        schedule = make_schedule(
            scenario.schedule,
            replicas,
            microbatches,
            scenario.num_batches,
            scenario.chunks_per_device,
            tuple(scenario.in_flight) if scenario.in_flight else None,
            scenario.vertical_sync,
        )
    except ValueError as err:
        raise InputError(f"{scenario.name}: schedule", str(err)) from None
    c = scenario.cluster
    speeds = c.speeds or [1.0] * c.num_devices
    folder = scenario.model.profile
    measured = measured_options(scenario)
    # the run's processes shared one host: over its probed link no transfer queues on a server's NIC
    one_host = measured is not None and measured.link == "run"
    devices = [
        Device(
            speed=speeds[i],
            memory_bytes=c.memory_gib * GIB,
            server=0 if one_host else i // c.devices_per_server,
        )
        for i in range(len(schedule.workers))
    ]
    if measured is not None:
        layers = read_layers(folder)
        # stages the run timed whole, where the cuts agree
        chunks = read_chunks(folder) if measured.stage_times != "layers" else None
        inside = read_run(folder).stage_in_run(plan.stages) if measured.stage_times == "in_run" else None
        costs = measured_costs(layers, plan.stages, schedule.batch_microbatches, chunks, inside)
    else:
        costs = chunk_costs(profile, plan.stages)
    return profile, plan, schedule, costs, devices


def measured_options(scenario: PipeDreamScenario) -> PipeDreamMeasured | None:
    """What of a real run's folder (the scenario's profile) its simulation uses; ``None``: not a run
    folder (the profile alone, the cluster's links)."""
    if not is_run_folder(scenario.model.profile):
        return None
    return scenario.model.measured or PipeDreamMeasured()


def run(scenario: PipeDreamScenario, progress: Callable[[float, str], None] | None = None) -> RunResult:
    """Plan, generate and simulate; tables follow ``scenarios.pipedream_results.PIPEDREAM_TABLES``."""
    started = time.perf_counter()
    profile, plan, schedule, costs, devices = build(scenario)
    network = network_of(scenario)
    rendezvous, slowdown = False, None
    measured = measured_options(scenario)
    if measured is not None:  # the run's own measurements (``sim.pipedream.measured.RunMeasurements``)
        run_facts = read_run(scenario.model.profile)
        network = run_facts.network() if measured.link == "run" else network
        rendezvous = measured.rendezvous
        slowdown = run_facts.stage_slowdown(plan.stages) if measured.transfer_slowdown else None
    planned = time.perf_counter()
    memory = MemoryModel(
        gradient_factor=scenario.memory.gradient_factor,
        optimizer_factor=scenario.memory.optimizer_factor,
        recompute=scenario.memory.recompute,
        gradient_buffer=scenario.memory.gradient_buffer,
    )
    outcome = simulate(
        schedule,
        costs,
        devices,
        network,
        memory,
        optimizer_step_s=scenario.optimizer_step_ms / 1000.0,
        parallel_pipelines=scenario.data_parallel * plan.data_parallel,
        overlap_allreduce=scenario.overlap_allreduce,
        progress=progress,
        rendezvous=rendezvous,
        transfer_slowdown=slowdown,
    )
    data_parallel = scenario.data_parallel * plan.data_parallel
    samples = schedule.num_microbatches * scenario.microbatch_size * data_parallel
    info: dict[str, float | int | str] = {
        "schedule": schedule.name,
        "config": plan.config,
        "noam": plan.noam,
        "predicted_time_per_microbatch_s": plan.time_per_input,
        "makespan_s": outcome.makespan_s,
        "samples": samples,
        "microbatches": schedule.num_microbatches,
        "num_devices": scenario.cluster.num_devices,
        "simulated_devices": len(schedule.workers),
        "data_parallel": data_parallel,
        "plan_wall_s": planned - started,
        "sim_wall_s": time.perf_counter() - planned,
    }
    return RunResult(tables=tables(outcome, schedule, plan, costs, devices), info=info)


def ops_table(rows: Sequence[tuple]) -> pd.DataFrame:
    """The ``ops`` table of op rows (``executor.OpRow``), in time order, with the contract's dtypes."""
    ops = pd.DataFrame(rows, columns=list(PIPEDREAM_TABLES["ops"]))
    ops = ops.sort_values(["start_s", "device", "end_s"], kind="stable").reset_index(drop=True)
    for column, dtype in PIPEDREAM_TABLES["ops"].items():
        ops[column] = ops[column].astype(object if dtype == "str" else dtype)
    return ops


def tables(
    outcome: SimOutcome,
    schedule: Schedule,
    plan: PartitionPlan,
    costs: Sequence[ChunkCost],
    devices: Sequence[Device],
) -> dict[str, pd.DataFrame]:
    """The three event tables, with the contract's dtypes."""
    ops = ops_table(outcome.rows)
    device_rows = []
    for w_index, worker in enumerate(schedule.workers):
        d = worker.device
        device_rows.append(
            (
                d,
                ",".join(str(c) for c in worker.chunks),
                outcome.busy_s[d],
                outcome.peak_memory[d],
                outcome.peak_stashes[w_index],
                outcome.peak_versions[w_index],
                devices[d].memory_bytes,
            )
        )
    dev = pd.DataFrame(device_rows, columns=list(PIPEDREAM_TABLES["devices"]))
    stage_rows = [
        (i, st.first, st.last, st.replicas, costs[i].forward_s, costs[i].backward_s, costs[i].parameter_bytes)
        for i, st in enumerate(plan.stages)
    ]
    stages = pd.DataFrame(stage_rows, columns=list(PIPEDREAM_TABLES["stages"]))
    out = {"ops": ops, "devices": dev, "stages": stages}
    for name, frame in out.items():
        for column, dtype in PIPEDREAM_TABLES[name].items():
            frame[column] = frame[column].astype(object if dtype == "str" else dtype)
    return out
