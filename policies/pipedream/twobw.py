"""PipeDream-2BW ([Narayanan] §3.2.1): 1F1B without flushes, gradients accumulated over ``m >= p``
microbatches, and at most two weight versions.

Microbatch ``k`` (0-indexed) belongs to batch ``t = k // m`` and uses version ``max(t - 1, 0)`` for both
its forward and backward (the notes' ``max(⌊(k-1)/m⌋ - 1, 0)`` with 1-indexed ``k``); after the last
backward of batch ``t`` a stage creates version ``t + 1`` by W^(t+1) = W^(t) − ν∇f(W^(t−1)). Inputs
still in flight keep the older (shadow) version, so no stage ever needs a third.
"""

from __future__ import annotations

from clustertwin.policies.pipedream.flush import one_f_one_b_order
from clustertwin.policies.pipedream.ops import Op, Schedule, build_schedule
from clustertwin.policies.pipedream.schedules import SCHEDULES, PipelineSchedule


def twobw_version(microbatch: int, batch_microbatches: int) -> int:
    """The weight version microbatch ``microbatch`` (0-indexed) uses under 2BW."""
    return max(microbatch // batch_microbatches - 1, 0)


def twobw(num_stages: int, batch_microbatches: int, num_batches: int) -> Schedule:
    """2BW on a straight pipeline of ``num_stages`` stages for ``num_batches`` batches of
    ``batch_microbatches`` microbatches each."""
    if batch_microbatches < num_stages:
        raise ValueError(
            f"2BW needs at least as many microbatches per batch ({batch_microbatches})"
            f" as stages ({num_stages})"
        )
    if num_batches < 1:
        raise ValueError("num_batches must be >= 1")
    total = batch_microbatches * num_batches
    programs = []
    for stage in range(num_stages):
        ops: list[Op] = []
        for kind, k in one_f_one_b_order(list(range(total)), num_stages - stage - 1):
            version = twobw_version(k, batch_microbatches)
            ops.append(Op(kind, k, stage, version))  # type: ignore[arg-type]
            if kind == "B" and (k + 1) % batch_microbatches == 0:
                ops.append(Op("W", k, stage, k // batch_microbatches + 1, blocking=False))
        programs.append(ops)
    return build_schedule("2bw", num_stages, total, None, programs, TwoBW.update_rule, batch_microbatches)


@SCHEDULES.register("2bw")
class TwoBW(PipelineSchedule):
    """PipeDream-2BW: 1F1B without flushes, gradient accumulation and two weight versions (§3.2.1)"""

    update_rule = "2bw"
    flushes = False

    def generate(
        self,
        replicas: tuple[int, ...],
        microbatches: int,
        num_batches: int,
        chunks_per_device: int,
        in_flight: tuple[int, ...] | None,
    ) -> Schedule:
        return twobw(len(replicas), microbatches, num_batches)

    def weight_versions(self, stages: int, stage: int) -> int:
        return 2  # the newest and the shadow version of inputs still in flight

    def stashed_activations(self, stages: int, microbatches: int, stage: int) -> int:
        return stages - stage  # 1F1B's warm-up forwards plus one; 2BW needs microbatches >= stages
