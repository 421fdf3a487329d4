"""The op vocabulary shared by every schedule, the simulator and the runtime ("a schedule is data").

A ``Schedule`` splits the model into ``num_chunks`` consecutive chunks (pipeline stages; with
interleaving a device holds several) and gives every worker an ordered op list. An executor runs each
list in order, waiting only for the data an op needs:

- ``F`` (forward of ``microbatch`` on ``chunk`` with weight ``version``) needs the activation of the
  same microbatch from ``chunk - 1`` (none for chunk 0) and the weight version to exist;
- ``B`` (backward) needs the gradient from ``chunk + 1`` (for the last chunk, its own ``F``) and uses
  the version its ``F`` stashed (``version`` repeats it);
- ``W`` (weight update of ``chunk``: all-reduce of the gradient over the chunk's replicas, then an
  optimizer step) creates weight ``version``; ``microbatch`` is the last microbatch it includes.
  ``blocking`` says whether the worker waits for it (a flush) or goes on computing while the all-reduce
  runs (asynchronous schedules, whose next ``F`` waits only if it needs the new version).

Microbatch ``k`` of chunk ``c`` runs on replica ``k mod replicas(c)`` (1F1B-RR, [Narayanan] §2.4.2), so
routing needs no coordination.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

OpKind = Literal["F", "B", "W"]
UpdateRule = Literal["sync", "stash", "2bw"]  # [Narayanan] Table 7.1; see ``Schedule``


@dataclass(frozen=True, slots=True)
class Op:
    """One op of a worker's list (see the module docstring)."""

    kind: OpKind
    microbatch: int
    chunk: int
    version: int
    blocking: bool = True


@dataclass(frozen=True)
class Worker:
    """One device's program: the chunks it holds, which replica of them it is, and its ops in order."""

    device: int
    chunks: tuple[int, ...]
    replica: int
    ops: tuple[Op, ...]


@dataclass(frozen=True)
class Schedule:
    """Per-worker op lists plus the placement an executor needs to route activations and gradients.

    ``placement[c]`` lists the workers (indices into ``workers``) holding chunk ``c``, by replica.
    ``update_rule`` is the paper's name for the semantics (Table 7.1 of [Narayanan]): ``"sync"`` (GPipe,
    Flush, interleaved: ∇f(W^(t))), ``"stash"`` (PipeDream: per-stage delays), ``"2bw"`` (∇f(W^(t-1))).
    """

    name: str
    num_chunks: int
    num_microbatches: int
    workers: tuple[Worker, ...]
    placement: tuple[tuple[int, ...], ...]
    update_rule: UpdateRule
    batch_microbatches: int  # microbatches per weight update (1 for PipeDream's asynchronous 1F1B)

    def worker_for(self, chunk: int, microbatch: int) -> int:
        """The worker that runs ``microbatch`` on ``chunk`` (round-robin over replicas)."""
        replicas = self.placement[chunk]
        return replicas[microbatch % len(replicas)]


def straight_placement(num_stages: int, replicas: tuple[int, ...] | None = None) -> list[tuple[int, int]]:
    """(stage, replica) per worker, stage-major; device ids follow the same order."""
    counts = replicas or (1,) * num_stages
    if len(counts) != num_stages or any(r < 1 for r in counts):
        raise ValueError(f"need one replica count >= 1 per stage, got {counts} for {num_stages} stages")
    return [(s, r) for s in range(num_stages) for r in range(counts[s])]


def build_schedule(
    name: str,
    num_stages: int,
    num_microbatches: int,
    replicas: tuple[int, ...] | None,
    programs: list[list[Op]],
    update_rule: UpdateRule,
    batch_microbatches: int,
) -> Schedule:
    """Assemble a one-chunk-per-worker schedule from per-worker op lists in ``straight_placement`` order."""
    slots = straight_placement(num_stages, replicas)
    placement: list[list[int]] = [[] for _ in range(num_stages)]
    workers = []
    for index, ((stage, replica), ops) in enumerate(zip(slots, programs, strict=True)):
        placement[stage].append(index)
        workers.append(Worker(device=index, chunks=(stage,), replica=replica, ops=tuple(ops)))
    return Schedule(
        name=name,
        num_chunks=num_stages,
        num_microbatches=num_microbatches,
        workers=tuple(workers),
        placement=tuple(tuple(p) for p in placement),
        update_rule=update_rule,
        batch_microbatches=batch_microbatches,
    )


def owned_microbatches(num_microbatches: int, replicas: int, replica: int) -> list[int]:
    """The microbatches replica ``replica`` of a stage with ``replicas`` replicas runs, in order."""
    return list(range(replica, num_microbatches, replicas))


def first_deadlock(schedule: Schedule) -> str | None:
    """Dry-run the op lists with the executors' readiness rules (activations, gradients, versions,
    replicas meeting at an update), ignoring time; return ``None`` if every list finishes, else a
    description of where the workers are stuck. Linear in the number of ops: a blocked worker waits on
    one key and is woken when that key is produced."""
    last = schedule.num_chunks - 1
    have: set[tuple] = set()
    for wi, worker in enumerate(schedule.workers):
        for c in worker.chunks:
            have.add(("v", wi, c, 0))
    cursor = [0] * len(schedule.workers)
    waiting: dict[tuple, list[int]] = {}
    arrived: dict[tuple, int] = {}
    runnable = list(range(len(schedule.workers)))

    def produce(key: tuple) -> None:
        have.add(key)
        runnable.extend(waiting.pop(key, []))

    def need(wi: int, op: Op) -> tuple | None:
        c, k = op.chunk, op.microbatch
        if op.kind == "F":
            for key in (("act", k, c) if c > 0 else None, ("v", wi, c, op.version)):
                if key is not None and key not in have:
                    return key
        elif op.kind == "B" and c < last and ("grad", k, c) not in have:
            return ("grad", k, c)
        elif op.kind == "W":
            key = ("w", c, op.version)
            if key not in have:
                return key
        return None

    while runnable:
        wi = runnable.pop()
        ops = schedule.workers[wi].ops
        while cursor[wi] < len(ops):
            op = ops[cursor[wi]]
            if op.kind == "W" and ("w", op.chunk, op.version) not in have:
                seen = arrived.get(("w", op.chunk, op.version), 0) + 1
                arrived[("w", op.chunk, op.version)] = seen
                if seen == len(schedule.placement[op.chunk]):
                    produce(("w", op.chunk, op.version))
                    for g in schedule.placement[op.chunk]:
                        produce(("v", g, op.chunk, op.version))
                else:
                    waiting.setdefault(("w", op.chunk, op.version), []).append(wi)
                    break
            missing = need(wi, op)
            if missing is not None:
                waiting.setdefault(missing, []).append(wi)
                break
            cursor[wi] += 1
            if op.kind == "F" and op.chunk < last:
                produce(("act", op.microbatch, op.chunk + 1))
            elif op.kind == "B" and op.chunk > 0:
                produce(("grad", op.microbatch, op.chunk - 1))
    stuck = [
        f"worker {wi} at {schedule.workers[wi].ops[cursor[wi]]}"
        for wi in range(len(schedule.workers))
        if cursor[wi] < len(schedule.workers[wi].ops)
    ]
    return "; ".join(stuck) if stuck else None
