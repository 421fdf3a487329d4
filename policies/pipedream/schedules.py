"""Pipeline schedules as a registry ([Narayanan] Table 7.1): a schedule is one file with a generator of
per-worker op lists plus one :class:`PipelineSchedule` entry that states what planners, executors,
scenario validation and the claims branch on.

An entry's properties:

- ``update_rule``: Table 7.1's weight-update semantics (``"sync"``: ∇f(W^(t)); ``"stash"``: PipeDream's
  per-stage delays; ``"2bw"``: ∇f(W^(t-1))), copied onto every :class:`~.ops.Schedule` it generates;
- ``flushes``: the pipeline drains before every weight update (the bubble ``(p-1)/m`` is paid per
  minibatch, not once);
- ``replicates_stages``: the schedule routes microbatches round-robin over replicated stages (1F1B-RR),
  so the planner may replicate stages; the others run straight pipelines and take data parallelism as
  whole pipeline copies outside the schedule;
- ``interleaves``: a device may hold several model chunks (``chunks_per_device``);
- ``takes_in_flight``: a per-stage count of inputs in flight can be given;
- ``takes_vertical_sync``: the schedule may run with vertical sync (``vertical_sync``, §2.4.3);
- ``weight_versions`` and ``stashed_activations``: Table 7.1's memory formulas per stage, which the
  op-level simulator must reproduce.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from clustertwin.policies.pipedream.ops import Schedule, UpdateRule
from clustertwin.policies.pipedream.vertical_sync import with_vertical_sync
from clustertwin.policies.registry import Registry


class PipelineSchedule(ABC):
    """One pipeline schedule: its op-list generator and the properties stated in the module docstring."""

    update_rule: ClassVar[UpdateRule]
    flushes: ClassVar[bool]
    replicates_stages: ClassVar[bool] = False
    interleaves: ClassVar[bool] = False
    takes_in_flight: ClassVar[bool] = False
    takes_vertical_sync: ClassVar[bool] = False

    @abstractmethod
    def generate(
        self,
        replicas: tuple[int, ...],
        microbatches: int,
        num_batches: int,
        chunks_per_device: int,
        in_flight: tuple[int, ...] | None,
    ) -> Schedule:
        """The op lists for stages (devices, when interleaving) with ``replicas`` replicas each."""

    def inputs(self, microbatches: int, replicas: tuple[int, ...]) -> int:
        """How many microbatches per minibatch to generate when ``microbatches`` are asked for."""
        return microbatches

    @abstractmethod
    def weight_versions(self, stages: int, stage: int) -> int:
        """Table 7.1: the most weight versions stage ``stage`` of a straight pipeline of ``stages``
        keeps at once."""

    @abstractmethod
    def stashed_activations(self, stages: int, microbatches: int, stage: int) -> int | None:
        """Table 7.1: the most microbatches whose activations stage ``stage`` stashes at once, with
        ``microbatches`` per minibatch; ``None`` where the table gives no per-stage count."""


SCHEDULES: Registry[type[PipelineSchedule]] = Registry(
    "pipeline schedule",
    "PipeDream-family schedules: per-stage op lists (schedule of kind pipedream)",
    builtin="clustertwin.policies.pipedream",
    noun="schedule",
)


def schedule_spec(name: str) -> PipelineSchedule:
    """The registered schedule ``name``; an unknown name raises ``UnknownName`` listing the known ones."""
    return SCHEDULES.get(name)()


def names_where(prop: str) -> list[str]:
    """The registered schedules whose property ``prop`` is true (for error messages)."""
    return [e.name for e in SCHEDULES.entries() if getattr(e.factory, prop)]


def make_schedule(
    name: str,
    replicas: tuple[int, ...],
    microbatches: int,
    num_batches: int = 1,
    chunks_per_device: int = 1,
    in_flight: tuple[int, ...] | None = None,
    vertical_sync: bool = False,
) -> Schedule:
    """Build schedule ``name`` for stages with ``replicas`` replicas each.

    Only a schedule that ``replicates_stages`` takes replica counts above 1; the synchronous schedules
    take equi-replicated pipelines as whole parallel copies, which the executor models as data
    parallelism outside the schedule. ``microbatches`` is per minibatch (for 1F1B, the number of inputs
    simulated). ``vertical_sync`` rewrites the versions (``vertical_sync.with_vertical_sync``).
    """
    spec = schedule_spec(name)
    if not spec.replicates_stages and any(r != 1 for r in replicas):
        raise ValueError(f"schedule {name!r} runs straight pipelines only; got replicas {replicas}")
    if vertical_sync and not spec.takes_vertical_sync:
        raise ValueError(f"schedule {name!r} does not take vertical sync")
    schedule = spec.generate(tuple(replicas), microbatches, num_batches, chunks_per_device, in_flight)
    if vertical_sync:
        schedule = with_vertical_sync(schedule)
    return schedule
