"""The interleaved 1F1B schedule of PTD-P ([Narayanan] §4.2.2): each of ``p`` devices holds ``v`` model
chunks (device ``d`` holds chunks ``d, d+p, d+2p, …``), shrinking the bubble to ``(1/v)·(p-1)/m`` at
``v`` times the pipeline communication.

The op order follows Megatron-LM's schedule (not in the seed; the dissertation gives only its shape):
virtual microbatch ``i`` of a device runs local chunk ``(i mod pv) // p`` forward (reversed for
backward) on microbatch ``(i // pv)·p + i mod p``; device ``d`` first runs
``min(2(p-d-1) + (v-1)p, m·v)`` warm-up forwards, then alternates, then drains, then one synchronous
update per chunk. ``m`` must be a multiple of ``p``.
"""

from __future__ import annotations

from clustertwin.policies.pipedream.ops import Op, Schedule, Worker
from clustertwin.policies.pipedream.schedules import SCHEDULES, PipelineSchedule


def interleaved(
    num_devices: int, chunks_per_device: int, num_microbatches: int, num_batches: int = 1
) -> Schedule:
    """Interleaved 1F1B with ``chunks_per_device`` chunks per device, over ``num_batches`` minibatches."""
    p, v, m = num_devices, chunks_per_device, num_microbatches
    if p < 1 or v < 1 or m < 1 or num_batches < 1:
        raise ValueError("num_devices, chunks_per_device, num_microbatches and num_batches must be >= 1")
    if m % p:
        raise ValueError(f"interleaving needs num_microbatches ({m}) to be a multiple of num_devices ({p})")
    total = m * v

    def chunk(d: int, i: int, forward: bool) -> int:
        local = (i % (p * v)) // p
        return (local if forward else v - 1 - local) * p + d

    def microbatch(i: int) -> int:
        return (i // (p * v)) * p + i % p

    workers = []
    for d in range(p):
        ops: list[Op] = []
        warmup = min(2 * (p - d - 1) + (v - 1) * p, total)
        for t in range(num_batches):
            base = t * m
            order: list[tuple[str, int]] = [("F", i) for i in range(warmup)]
            for i in range(total - warmup):
                order += [("F", warmup + i), ("B", i)]
            order += [("B", i) for i in range(total - warmup, total)]
            for kind, i in order:
                ops.append(Op(kind, base + microbatch(i), chunk(d, i, kind == "F"), t))  # type: ignore[arg-type]
            ops += [Op("W", base + m - 1, j * p + d, t + 1) for j in range(v)]
        workers.append(Worker(device=d, chunks=tuple(j * p + d for j in range(v)), replica=0, ops=tuple(ops)))
    placement = tuple((c % p,) for c in range(p * v))
    return Schedule(
        name="interleaved",
        num_chunks=p * v,
        num_microbatches=m * num_batches,
        workers=tuple(workers),
        placement=placement,
        update_rule=Interleaved.update_rule,
        batch_microbatches=m,
    )


@SCHEDULES.register("interleaved")
class Interleaved(PipelineSchedule):
    """PTD-P's interleaved 1F1B: several model chunks per device, a flush per minibatch (§4.2.2)"""

    update_rule = "sync"
    flushes = True
    interleaves = True

    def generate(
        self,
        replicas: tuple[int, ...],
        microbatches: int,
        num_batches: int,
        chunks_per_device: int,
        in_flight: tuple[int, ...] | None,
    ) -> Schedule:
        return interleaved(len(replicas), chunks_per_device, microbatches, num_batches)

    def weight_versions(self, stages: int, stage: int) -> int:
        return 1  # per chunk

    def stashed_activations(self, stages: int, microbatches: int, stage: int) -> None:
        return None  # §4.2.2 only says "comparable to 1F1B"; device 0 holds p + (p-1)/v stage equivalents
