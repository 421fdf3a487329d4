"""PipeDream-Flush ([Narayanan] §3.2.2): 1F1B within a minibatch, then a flush and one synchronous update.

Stage ``s`` (0-indexed) of ``p`` first runs ``min(p-s-1, m)`` warm-up forwards (Megatron's count; the
dissertation's figure shows the same shape), then alternates one forward and one backward, then drains.
So it holds at most ``p-s`` stashed activations (Table 7.1: at most ``p``), keeps one weight version,
and its bubble is ``(p-1)/m`` like GPipe's.
"""

from __future__ import annotations

from clustertwin.policies.pipedream.ops import Op, Schedule, build_schedule
from clustertwin.policies.pipedream.schedules import SCHEDULES, PipelineSchedule


def one_f_one_b_order(microbatches: list[int], warmup: int) -> list[tuple[str, int]]:
    """The 1F1B order of one stage: ``warmup`` forwards, then F/B pairs, then the remaining backwards
    (backwards in microbatch order)."""
    warmup = min(warmup, len(microbatches))
    order: list[tuple[str, int]] = [("F", k) for k in microbatches[:warmup]]
    pending = list(microbatches[:warmup])
    for k in microbatches[warmup:]:
        order.append(("F", k))
        pending.append(k)
        order.append(("B", pending.pop(0)))
    order += [("B", k) for k in pending]
    return order


def flush(num_stages: int, num_microbatches: int, num_batches: int = 1) -> Schedule:
    """PipeDream-Flush (1F1B with a flush per minibatch) over ``num_batches`` minibatches."""
    if num_stages < 1 or num_microbatches < 1 or num_batches < 1:
        raise ValueError("num_stages, num_microbatches and num_batches must be >= 1")
    programs = []
    for stage in range(num_stages):
        ops: list[Op] = []
        for t in range(num_batches):
            mbs = [t * num_microbatches + k for k in range(num_microbatches)]
            for kind, k in one_f_one_b_order(mbs, num_stages - stage - 1):
                ops.append(Op(kind, k, stage, t))  # type: ignore[arg-type]
            ops.append(Op("W", mbs[-1], stage, t + 1))
        programs.append(ops)
    return build_schedule(
        "flush",
        num_stages,
        num_microbatches * num_batches,
        None,
        programs,
        Flush.update_rule,
        num_microbatches,
    )


@SCHEDULES.register("flush")
class Flush(PipelineSchedule):
    """PipeDream-Flush: 1F1B within a minibatch, then a flush and one synchronous update (§3.2.2)"""

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
        return flush(len(replicas), microbatches, num_batches)

    def weight_versions(self, stages: int, stage: int) -> int:
        return 1

    def stashed_activations(self, stages: int, microbatches: int, stage: int) -> int:
        return min(stages - stage, microbatches)  # the warm-up forwards plus the one in steady state
