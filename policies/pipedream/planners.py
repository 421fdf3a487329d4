"""Stage planners as a registry: a per-layer profile and a cluster in, a :class:`PartitionPlan` out.

``planner.mode`` of a ``kind: pipedream`` scenario names an entry. The built-ins are PipeDream's
partitioning DP (``policies.pipedream.partition``, [Narayanan] §2.4.1), where ``A^k(i→j, m)`` is the
slowest stage of the best pipeline for layers ``i..j`` on ``m`` components of topology level ``k``:

    T^k(i→j, m) = (1/m) · max( A^{k-1}(i→j, m_{k-1}),  2(m-1) Σ_{l=i..j} |w_l| / B_k )
    A^k(i→j, m) = min{ T^k(i→j, m),
                       min_{i≤s<j} min_{1≤m'<m} max[ A^k(i→s, m-m'), 2 a_s / B_k, T^k(s+1→j, m') ] }

in three modes that differ only in the topology they give it: ``hierarchical`` (level 1: the devices
of a server at the intra-server bandwidth; level 2: the servers at the inter-server bandwidth),
``flat`` ([PipeDream-arXiv] §3.1: one level of every device at the inter-server bandwidth) and ``straight``
(one level of one stage per chunk, no replicas, at the bandwidth of the slowest link the pipeline crosses);
exhaustive search over flat plans (``brute_force``, the DP's oracle; tiny instances only);
hand-written stages (``manual``); and the data-parallel baseline (``data_parallel``).

PipeDream-2BW's planner is the entry ``2bw`` (``policies.pipedream.twobw_plan``, [Narayanan] §3.3,
Algorithm 1 on a profiled model): it also chooses how many copies of the pipeline run side by side
(``PartitionPlan.data_parallel``). PTD-P's formulas (``ptdp``) plan nothing.

Memory: with ``PlannerInput.memory_for`` every DP mode keeps each stage within a device's memory
(``partition.StageMemory``, counted per schedule by ``plan_memory``). ``flat`` and ``straight`` are one-level
DPs and take it exactly; ``hierarchical`` checks its plan and, when a stage does not fit, falls back to the
memory-aware flat DP over every device at the inter-server bandwidth.

A schedule that does not replicate stages (``PipelineSchedule.replicates_stages``) runs straight
pipelines of one stage per chunk; every planner honours that through :attr:`PlannerInput.straight`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

from clustertwin.policies.pipedream.partition import (
    Convention,
    Level,
    PartitionPlan,
    StageMemory,
    StagePlan,
    plan_partition,
)
from clustertwin.policies.pipedream.plan_memory import plan_memory_bytes
from clustertwin.policies.registry import Registry


@dataclass(frozen=True)
class PlannerInput:
    """One pipeline copy to plan. Bandwidths in bytes/s; per-layer lists as in ``plan_partition``.

    ``devices`` is the devices of one pipeline copy (of ``servers`` servers of ``devices_per_server``);
    ``chunks_per_device`` > 1 interleaves several stages per device; ``straight`` forbids replicated
    stages (one stage per chunk); ``stages`` are the hand-written stages of ``manual``.
    ``activation_compression_ratio`` is the ``code`` convention's option (``plan_partition``);
    ``memory_for(devices)`` is the memory model of a pipeline on that many devices (``None``: memory is
    not planned); ``microbatches`` per weight update (the ``2bw`` planner's gradient accumulation).
    """

    compute_s: Sequence[float]
    parameter_bytes: Sequence[float]
    cut_bytes: Sequence[float]
    servers: int
    devices_per_server: int
    intra_bandwidth: float
    inter_bandwidth: float
    devices: int
    chunks_per_device: int = 1
    straight: bool = False
    convention: Convention = "dissertation"
    stages: tuple[StagePlan, ...] | None = None
    activation_compression_ratio: float | None = None
    memory_for: Callable[[int], StageMemory] | None = None
    microbatches: int = 1

    @property
    def num_layers(self) -> int:
        return len(self.compute_s)

    @property
    def chunks(self) -> int:
        """Stages of a straight pipeline: one per chunk."""
        return self.devices * self.chunks_per_device

    def straight_level(self) -> Level:
        """One level of ``chunks`` stages, at the slower bandwidth when the pipeline spans servers."""
        spans = self.devices > self.devices_per_server
        return Level(self.chunks, self.inter_bandwidth if spans else self.intra_bandwidth)

    def check_straight(self) -> None:
        if self.num_layers < self.chunks:
            raise ValueError(f"{self.num_layers} layer blocks cannot fill {self.chunks} stages")


class StagePlanner(ABC):
    """A planner: the stages (layer ranges and replicas) of one pipeline copy. Bad input raises
    ``ValueError`` with a message for the scenario's ``planner`` field. ``given_stages``: the planner
    takes the stages from the scenario (``planner.stages``) instead of choosing them."""

    given_stages: ClassVar[bool] = False

    @abstractmethod
    def plan(self, inp: PlannerInput) -> PartitionPlan: ...

    @classmethod
    def coarsens(cls, straight: bool) -> bool:
        """Whether a big profile is coarsened to ``model.max_blocks`` before this planner sees it: only
        where the cost grows faster than the square of the layers (a DP level below the top, exhaustive
        search) or the stages name coarsened layers (``manual``). A one-level DP plans every layer."""
        return False


PLANNERS: Registry[type[StagePlanner]] = Registry(
    "pipeline planner",
    "PipeDream stage planners (planner.mode of kind pipedream)",
    builtin="clustertwin.policies.pipedream",
    noun="planner mode",
)


def plan_with(mode: str, inp: PlannerInput) -> PartitionPlan:
    """Plan with the registered planner ``mode``."""
    return PLANNERS.get(mode)().plan(inp)


def _dp(
    inp: PlannerInput, levels: list[Level], straight: bool, memory: StageMemory | None = None
) -> PartitionPlan:
    return plan_partition(
        inp.compute_s,
        inp.parameter_bytes,
        inp.cut_bytes,
        levels,
        inp.convention,
        straight,
        activation_compression_ratio=inp.activation_compression_ratio,
        memory=memory,
    )


def _memory(inp: PlannerInput, devices: int) -> StageMemory | None:
    return None if inp.memory_for is None else inp.memory_for(devices)


def fits(inp: PlannerInput, plan: PartitionPlan) -> bool:
    """Whether every stage of ``plan`` fits a device by ``inp.memory_for`` (always, without one)."""
    memory = _memory(inp, plan.num_devices)
    if memory is None:
        return True
    need = plan_memory_bytes(plan.stages, inp.parameter_bytes, inp.cut_bytes, memory)
    return max(need) <= memory.capacity_bytes


@PLANNERS.register("straight")
class StraightPlanner(StagePlanner):
    """The partitioning DP over one stage per chunk, no replicated stages"""

    def plan(self, inp: PlannerInput) -> PartitionPlan:
        inp.check_straight()
        level = inp.straight_level()
        return _dp(inp, [level], True, _memory(inp, level.count))


@PLANNERS.register("hierarchical")
class HierarchicalPlanner(StagePlanner):
    """The hierarchical partitioning DP of [Narayanan] §2.4.1 over (devices per server, servers)"""

    @classmethod
    def coarsens(cls, straight: bool) -> bool:
        return not straight  # a straight schedule makes it the one-level straight DP

    def plan(self, inp: PlannerInput) -> PartitionPlan:
        if inp.straight:
            return StraightPlanner().plan(inp)
        levels = [Level(inp.devices_per_server, inp.intra_bandwidth)]
        if inp.servers > 1:
            levels.append(Level(inp.servers, inp.inter_bandwidth))
        plan = _dp(inp, levels, False)
        if fits(inp, plan):
            return plan
        # The levels below the top do not know how many devices follow a stage, so the memory-aware DP
        # is the one-level one.
        return FlatPlanner().plan(inp)


@PLANNERS.register("flat")
class FlatPlanner(StagePlanner):
    """The partitioning DP over one level of every device at the inter-server bandwidth
    ([PipeDream-arXiv] §3.1)"""

    def plan(self, inp: PlannerInput) -> PartitionPlan:
        if inp.straight:
            return StraightPlanner().plan(inp)
        return _dp(inp, [Level(inp.devices, inp.inter_bandwidth)], False, _memory(inp, inp.devices))


@PLANNERS.register("manual")
class ManualPlanner(StagePlanner):
    """The stages as written: contiguous, covering every layer block, on the pipeline's devices"""

    given_stages = True

    @classmethod
    def coarsens(cls, straight: bool) -> bool:
        return True

    def plan(self, inp: PlannerInput) -> PartitionPlan:
        stages = tuple(inp.stages or ())
        expected = 0
        for i, st in enumerate(stages):
            if st.first != expected or st.last < st.first:
                raise ValueError(f"stage {i} must start at layer {expected} and end at or after it; got {st}")
            expected = st.last + 1
        if expected != inp.num_layers:
            raise ValueError(
                f"stages must cover layers 0..{inp.num_layers - 1} (after coarsening); they end at"
                f" {expected - 1}"
            )
        if not inp.straight:
            if sum(st.replicas for st in stages) != inp.devices:
                raise ValueError(f"replicas must add up to the {inp.devices} devices of a pipeline")
        elif len(stages) != inp.chunks or any(st.replicas != 1 for st in stages):
            raise ValueError(
                f"the schedule runs straight pipelines: it needs {inp.chunks} unreplicated stages"
            )
        return PartitionPlan(stages, math.nan, math.ceil(inp.devices / stages[0].replicas))


@PLANNERS.register("data_parallel")
class DataParallelPlanner(StagePlanner):
    """The data-parallel baseline: the whole model as one stage on every device ([Narayanan] §2.5.2's DP)"""

    def plan(self, inp: PlannerInput) -> PartitionPlan:
        whole = inp.num_layers - 1
        if inp.straight:  # the schedule takes data parallelism as whole copies of a one-stage pipeline
            plan = PartitionPlan((StagePlan(0, whole, 1),), math.nan, 1, data_parallel=inp.devices)
        else:
            plan = PartitionPlan((StagePlan(0, whole, inp.devices),), math.nan, 1)
        if not fits(inp, replace(plan, data_parallel=1)):
            raise ValueError("the whole model does not fit one device's memory: no data-parallel plan")
        return plan
