"""PipeDream's asynchronous 1F1B(-RR) schedule with weight stashing ([Narayanan] §2.4.2-2.4.3;
[PipeDream-arXiv] §3.2).

Every stage admits a number of inputs before its first backward, then alternates one backward and one
forward; every backward is followed by a weight update (batch = microbatch, no accumulation). By
default replica ``j`` of stage ``s`` keeps ``⌈(workers in stages s..p-1) / r_s⌉`` inputs in flight, which
is NOAM (⌈#workers / #replicas of the input stage⌉) at the input stage and ``p-s`` in a straight
pipeline; ``in_flight`` overrides it per stage (more in-flight inputs hide communication, Fig 2.17).

Weight stashing: a forward uses the newest local version and the backward of the same input reuses it,
so stage ``s`` sees ``W_s`` delayed by ``p-1-s`` updates: W^(t+1) = W^(t) − ν∇f(W_1^(t−p+1), …, W_p^(t)).
"""

from __future__ import annotations

import math

from clustertwin.policies.pipedream.flush import one_f_one_b_order
from clustertwin.policies.pipedream.ops import (
    Op,
    Schedule,
    build_schedule,
    first_deadlock,
    owned_microbatches,
)
from clustertwin.policies.pipedream.schedules import SCHEDULES, PipelineSchedule


def default_in_flight(replicas: tuple[int, ...]) -> tuple[int, ...]:
    """Inputs in flight per replica of each stage: ⌈workers downstream (inclusive) / replicas⌉."""
    return tuple(math.ceil(sum(replicas[s:]) / replicas[s]) for s in range(len(replicas)))


def one_f_one_b(
    replicas: tuple[int, ...], num_microbatches: int, in_flight: tuple[int, ...] | None = None
) -> Schedule:
    """1F1B-RR for stages with ``replicas[s]`` replicas each; ``num_microbatches`` must be a multiple of
    every replica count so the replicas' gradient all-reduces pair up."""
    if not replicas or any(r < 1 for r in replicas) or num_microbatches < 1:
        raise ValueError(f"need replicas >= 1 per stage and num_microbatches >= 1, got {replicas}")
    bad = [r for r in replicas if num_microbatches % r]
    if bad:
        raise ValueError(f"num_microbatches={num_microbatches} is not a multiple of replica counts {bad}")
    caps = in_flight or default_in_flight(replicas)
    if len(caps) != len(replicas) or any(c < 1 for c in caps):
        raise ValueError(f"in_flight needs one count >= 1 per stage, got {caps}")
    programs = []
    for stage, count in enumerate(replicas):
        for replica in range(count):
            mine = owned_microbatches(num_microbatches, count, replica)
            ops: list[Op] = []
            version = 0
            stashed: dict[int, int] = {}
            for kind, k in one_f_one_b_order(mine, caps[stage] - 1):
                if kind == "F":
                    stashed[k] = version
                    ops.append(Op("F", k, stage, version))
                else:
                    ops.append(Op("B", k, stage, stashed.pop(k)))
                    version += 1
                    ops.append(Op("W", k, stage, version, blocking=False))
            programs.append(ops)
    schedule = build_schedule(
        "1f1b", len(replicas), num_microbatches, tuple(replicas), programs, OneFOneB.update_rule, 1
    )
    # A stage admitting more inputs than its upstream sends before needing a gradient back would wait
    # forever (e.g. in-flight (2, 3) on a straight pipeline); reject such caps here, not mid-run.
    stuck = first_deadlock(schedule)
    if stuck is not None:
        raise ValueError(f"in_flight {caps} for replicas {replicas} deadlocks: {stuck}")
    return schedule


@SCHEDULES.register("1f1b")
class OneFOneB(PipelineSchedule):
    """PipeDream's asynchronous 1F1B(-RR) with weight stashing, over replicated stages (§2.4.2-2.4.3)"""

    update_rule = "stash"
    flushes = False
    replicates_stages = True
    takes_in_flight = True
    takes_vertical_sync = True

    def generate(
        self,
        replicas: tuple[int, ...],
        microbatches: int,
        num_batches: int,
        chunks_per_device: int,
        in_flight: tuple[int, ...] | None,
    ) -> Schedule:
        return one_f_one_b(replicas, microbatches * num_batches, in_flight)

    def inputs(self, microbatches: int, replicas: tuple[int, ...]) -> int:
        """Replicas of a stage all-reduce after every backward, so each must run equally many inputs:
        round the input count up to a multiple of every replica count."""
        step = math.lcm(*replicas)
        return -(-microbatches // step) * step

    def weight_versions(self, stages: int, stage: int) -> int:
        return stages - stage  # one per input in flight: stage s sees W_s delayed by p-1-s updates

    def stashed_activations(self, stages: int, microbatches: int, stage: int) -> int:
        return min(stages - stage, microbatches)  # NOAM's in-flight inputs of a straight pipeline
