"""One entry point over the schedule generators, by name (used by scenarios and benchmarks)."""

from __future__ import annotations

from typing import Literal

from clustertwin.policies.pipedream.flush import flush
from clustertwin.policies.pipedream.gpipe import gpipe
from clustertwin.policies.pipedream.interleaved import interleaved
from clustertwin.policies.pipedream.one_f_one_b import one_f_one_b
from clustertwin.policies.pipedream.ops import Schedule
from clustertwin.policies.pipedream.twobw import twobw

ScheduleName = Literal["gpipe", "flush", "1f1b", "2bw", "interleaved"]
SCHEDULES: tuple[str, ...] = ("gpipe", "flush", "1f1b", "2bw", "interleaved")


def make_schedule(
    name: str,
    replicas: tuple[int, ...],
    microbatches: int,
    num_batches: int = 1,
    chunks_per_device: int = 1,
    in_flight: tuple[int, ...] | None = None,
) -> Schedule:
    """Build schedule ``name`` for stages with ``replicas`` replicas each.

    Only PipeDream's 1F1B replicates stages (1F1B-RR); the synchronous schedules take equi-replicated
    pipelines as whole parallel copies, which the executor models as data parallelism outside the
    schedule, so they need every count to be 1 here. ``microbatches`` is per minibatch (for 1F1B, the
    number of inputs simulated).
    """
    if name == "1f1b":
        return one_f_one_b(replicas, microbatches * num_batches, in_flight)
    if any(r != 1 for r in replicas):
        raise ValueError(f"schedule {name!r} runs straight pipelines only; got replicas {replicas}")
    p = len(replicas)
    if name == "gpipe":
        return gpipe(p, microbatches, num_batches)
    if name == "flush":
        return flush(p, microbatches, num_batches)
    if name == "2bw":
        return twobw(p, microbatches, num_batches)
    if name == "interleaved":
        return interleaved(p, chunks_per_device, microbatches, num_batches)
    raise ValueError(f"unknown schedule {name!r}; known: {', '.join(SCHEDULES)}")
