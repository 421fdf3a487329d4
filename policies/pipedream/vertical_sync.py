"""PipeDream's vertical sync ([Narayanan] §2.4.3; [PipeDream-arXiv] §3.3) as a rewrite of a 1F1B schedule.

With weight stashing alone, stage ``s`` runs an input's forward with its own newest weights, so the
stages of one input see versions of different ages: W^(t+1) = W^(t) − ν∇f(W_1^(t−p+1), …, W_p^(t)).
Vertical sync tags each input with the version the input stage used for it and has every stage use that
version for the input's forward and backward, so all stages see W^(t−p+1). A stage then keeps older
versions alive until the inputs tagged with them are done (the executors keep a version while a later op
needs it, so the extra memory is an outcome).

Version ``v`` of every stage of a straight 1F1B pipeline is the one after the updates of inputs
``0..v-1`` (each stage runs its backwards in input order), so a tag means the same weights everywhere;
with replicated stages a version number counts one replica's own updates and is not comparable across
stages, so the rewrite takes straight pipelines only.
"""

from __future__ import annotations

from dataclasses import replace

from clustertwin.policies.pipedream.ops import Op, Schedule


def with_vertical_sync(schedule: Schedule) -> Schedule:
    """``schedule`` with every F and B of an input using the version its F on the input stage used."""
    if any(len(replicas) != 1 for replicas in schedule.placement):
        raise ValueError("vertical sync needs a straight pipeline (one replica per stage)")
    first = schedule.workers[schedule.placement[0][0]]
    tag = {op.microbatch: op.version for op in first.ops if op.kind == "F" and op.chunk == 0}
    workers = []
    for worker in schedule.workers:
        ops = tuple(
            Op(op.kind, op.microbatch, op.chunk, tag[op.microbatch], op.blocking) if op.kind in "FB" else op
            for op in worker.ops
        )
        workers.append(replace(worker, ops=ops))
    return replace(schedule, workers=tuple(workers))
