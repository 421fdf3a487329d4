"""GPipe ([Narayanan] §2.2.1 and Table 7.1): all forwards, then all backwards, then one synchronous update.

Bubble ``(p-1)/m`` of the ideal time; one weight version; ``m`` stashed activations per stage (GPipe
recomputes, so only stage inputs are kept: the executor's ``recompute`` option). Backwards run in reverse
microbatch order, as a last-in-first-out pipeline drains.
"""

from __future__ import annotations

from clustertwin.policies.pipedream.ops import (
    Op,
    Schedule,
    build_schedule,
    owned_microbatches,
    straight_placement,
)
from clustertwin.policies.pipedream.schedules import SCHEDULES, PipelineSchedule


def gpipe(num_stages: int, num_microbatches: int, num_batches: int = 1) -> Schedule:
    """GPipe over ``num_batches`` minibatches of ``num_microbatches`` microbatches each."""
    if num_stages < 1 or num_microbatches < 1 or num_batches < 1:
        raise ValueError("num_stages, num_microbatches and num_batches must be >= 1")
    programs = []
    for stage, _ in straight_placement(num_stages):
        ops: list[Op] = []
        for t in range(num_batches):
            mbs = [t * num_microbatches + k for k in owned_microbatches(num_microbatches, 1, 0)]
            ops += [Op("F", k, stage, t) for k in mbs]
            ops += [Op("B", k, stage, t) for k in reversed(mbs)]
            ops.append(Op("W", mbs[-1], stage, t + 1))
        programs.append(ops)
    return build_schedule(
        "gpipe",
        num_stages,
        num_microbatches * num_batches,
        None,
        programs,
        GPipe.update_rule,
        num_microbatches,
    )


@SCHEDULES.register("gpipe")
class GPipe(PipelineSchedule):
    """GPipe: all forwards, all backwards, then one synchronous update per minibatch (§2.2.1)"""

    update_rule = "sync"
    flushes = True

    def generate(
        self,
        replicas: tuple[int, ...],
        microbatches: int,
        num_batches: int,
        chunks_per_device: int,
        in_flight: tuple[int, ...] | None,
    ) -> Schedule:
        return gpipe(len(replicas), microbatches, num_batches)

    def weight_versions(self, stages: int, stage: int) -> int:
        return 1

    def stashed_activations(self, stages: int, microbatches: int, stage: int) -> int:
        return microbatches  # every microbatch's forward runs before the first backward
