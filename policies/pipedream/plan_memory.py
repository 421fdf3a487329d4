"""Per-device memory of a pipeline plan under a schedule: what the memory-aware planner keeps within a
device ([Narayanan] §2.4.1: the stashed activations and weights of a stage's in-flight inputs; Table
7.1: weight versions and activation stashes per schedule; §3.3.3 for gradients and optimizer state).

A stage of layers ``i..j`` on ``r`` replicas holds per device ``|w|·(versions + state_factor)`` plus,
per stashed input, its input activation and (without recomputation) every layer's output; with
recomputation one input's layer outputs are rebuilt during a backward next to the stashes. The counts:

- ``1f1b`` (1F1B-RR with weight stashing): ``⌈D/r⌉`` inputs in flight per replica, ``D`` the devices
  from the stage to the end of the pipeline (NOAM at the input stage), one weight version each;
- the straight schedules: the schedule's own Table 7.1 counts at stage ``p - D`` of ``p``
  (``PipelineSchedule.weight_versions`` and ``stashed_activations``).

This is the simulator's accounting (``sim.pipedream.memory``) at its peak, so a plan that fits here
fits there unless transfers or the optimizer step add transient bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from clustertwin.policies.pipedream.partition import StageMemory, StagePlan
from clustertwin.policies.pipedream.schedules import schedule_spec


def schedule_counts(
    schedule: str, stages: int, microbatches: int
) -> Callable[[int, int], tuple[float, float]]:
    """``(versions, stashes)`` per device of a stage with ``D`` devices from it to the end and ``r``
    replicas, under ``schedule`` on ``stages`` stages with ``microbatches`` per minibatch; raises
    ``ValueError`` for a schedule whose stashes per stage Table 7.1 does not state (interleaved)."""
    spec = schedule_spec(schedule)
    if spec.replicates_stages:

        def replicated(downstream: int, replicas: int) -> tuple[float, float]:
            in_flight = math.ceil(downstream / replicas)
            return float(in_flight), float(in_flight)

        return replicated
    if spec.stashed_activations(stages, microbatches, 0) is None:
        raise ValueError(f"schedule {schedule!r} states no stashed activations per stage to plan memory with")

    def straight(downstream: int, replicas: int) -> tuple[float, float]:
        stage = stages - downstream
        return (
            float(spec.weight_versions(stages, stage)),
            float(spec.stashed_activations(stages, microbatches, stage) or 0),
        )

    return straight


def stage_memory(
    schedule: str,
    stages: int,
    *,
    microbatches: int,
    capacity_bytes: float,
    activation_bytes: Sequence[float],
    state_factor: float,
    recompute: bool = False,
) -> StageMemory:
    """The ``StageMemory`` of ``schedule`` for a pipeline of ``stages`` devices (``activation_bytes``:
    each layer's output bytes for one microbatch)."""
    return StageMemory(
        capacity_bytes=capacity_bytes,
        stash_bytes=tuple(activation_bytes),
        state_factor=state_factor,
        counts=schedule_counts(schedule, stages, microbatches),
        recompute=recompute,
    )


def plan_memory_bytes(
    stages: Sequence[StagePlan],
    parameter_bytes: Sequence[float],
    cut_bytes: Sequence[float],
    memory: StageMemory,
) -> list[float]:
    """Bytes per device of every stage of a flattened plan (``StageMemory.stage_bytes``)."""
    out = []
    total = sum(st.replicas for st in stages)
    used = 0
    for st in stages:
        downstream = total - used
        used += st.replicas
        out.append(
            memory.stage_bytes(
                float(sum(parameter_bytes[st.first : st.last + 1])),
                float(sum(memory.stash_bytes[st.first : st.last + 1])),
                float(cut_bytes[st.first - 1]) if st.first > 0 else 0.0,
                downstream,
                st.replicas,
            )
        )
    return out
