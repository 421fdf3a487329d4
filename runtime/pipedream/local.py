"""Single-process execution of a schedule's op lists on real stage modules, with weight versions.

Every worker's list is run in order; a round-robin loop runs whichever worker's next op has its inputs
(an activation, a gradient, a weight version, or all replicas at an update), which is the same
readiness rule as the simulator's. Weight versions are immutable parameter dicts used through
``torch.func.functional_call``: an update creates a new version instead of stepping in place, because a
stashed version may still be needed by an in-flight backward ([Narayanan] §2.4.3). The update is SGD,
``W^(v+1) = W^(newest) − lr · mean over replicas of the accumulated gradient``, which gives each
schedule's rule of Table 7.1: ∇f(W^(t)) (sync), per-stage delays (stash) and ∇f(W^(t−1)) (2BW).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from clustertwin.policies.pipedream.ops import Op, Schedule
from torch import nn
from torch.func import functional_call

Params = dict[str, torch.Tensor]


@dataclass
class LocalRun:
    """Final weights per chunk, every version created, and the executed ops in execution order."""

    versions: list[dict[int, Params]]
    executed: list[tuple[int, Op]]

    def final(self, chunk: int) -> Params:
        return self.versions[chunk][max(self.versions[chunk])]


def run_local(
    schedule: Schedule,
    modules: Sequence[nn.Module],
    inputs: Sequence[torch.Tensor],
    targets: Sequence[torch.Tensor],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    lr: float,
) -> LocalRun:
    """Execute ``schedule`` with ``modules[c]`` as chunk ``c`` on microbatch ``inputs[k]``/``targets[k]``."""
    if len(modules) != schedule.num_chunks:
        raise ValueError(f"need {schedule.num_chunks} chunk modules, got {len(modules)}")
    if len(inputs) < schedule.num_microbatches:
        raise ValueError(f"need {schedule.num_microbatches} microbatches, got {len(inputs)}")
    last = schedule.num_chunks - 1
    # Losses are averaged over the microbatches of one update, so accumulation gives the batch mean.
    scale = 1.0 / schedule.batch_microbatches
    versions: list[dict[int, Params]] = [
        {0: {n: p.detach().clone() for n, p in m.named_parameters()}} for m in modules
    ]
    grads: dict[tuple[int, int], Params] = {}
    mailbox: dict[tuple[str, int, int], torch.Tensor] = {}
    stash: dict[tuple[int, int, int], tuple[torch.Tensor, Params, torch.Tensor]] = {}
    cursor = [0] * len(schedule.workers)
    executed: list[tuple[int, Op]] = []

    def ready(wi: int, op: Op) -> bool:
        if op.kind == "F":
            return (op.chunk == 0 or ("act", op.microbatch, op.chunk) in mailbox) and op.version in versions[
                op.chunk
            ]
        if op.kind == "B":
            return op.chunk == last or ("grad", op.microbatch, op.chunk) in mailbox
        # An update runs once every replica of the chunk has reached the same update.
        group = schedule.placement[op.chunk]
        for g in group:
            ops = schedule.workers[g].ops
            if cursor[g] >= len(ops):
                return False
            other = ops[cursor[g]]
            if other.kind != "W" or other.chunk != op.chunk or other.version != op.version:
                return False
        return True

    def forward(wi: int, op: Op) -> None:
        c, k = op.chunk, op.microbatch
        x = inputs[k] if c == 0 else mailbox.pop(("act", k, c))
        x = x.detach().requires_grad_(c > 0)
        params = {n: t.detach().requires_grad_() for n, t in versions[c][op.version].items()}
        out = functional_call(modules[c], params, (x,))
        if c == last:
            out = loss_fn(out, targets[k]) * scale
        else:
            mailbox[("act", k, c + 1)] = out.detach()
        stash[(wi, k, c)] = (x, params, out)

    def backward(wi: int, op: Op) -> None:
        c, k = op.chunk, op.microbatch
        x, params, out = stash.pop((wi, k, c))
        grad_out = torch.ones_like(out) if c == last else mailbox.pop(("grad", k, c))
        wrt = list(params.values()) + ([x] if c > 0 else [])
        got = torch.autograd.grad(out, wrt, grad_out)
        acc = grads.setdefault((wi, c), {n: torch.zeros_like(t) for n, t in params.items()})
        for (n, _), g in zip(params.items(), got, strict=False):
            acc[n] += g
        if c > 0:
            mailbox[("grad", k, c - 1)] = got[-1]

    def update(op: Op) -> None:
        c = op.chunk
        group = schedule.placement[c]
        base = versions[c][max(versions[c])]
        new = {}
        for n, t in base.items():
            g = sum(grads.get((g_w, c), {}).get(n, torch.zeros_like(t)) for g_w in group) / len(group)
            new[n] = t - lr * g
        versions[c][op.version] = new
        for g_w in group:
            grads.pop((g_w, c), None)
            cursor[g_w] += 1
            executed.append((g_w, schedule.workers[g_w].ops[cursor[g_w] - 1]))

    remaining = sum(len(w.ops) for w in schedule.workers)
    while remaining:
        progressed = False
        for wi, worker in enumerate(schedule.workers):
            while cursor[wi] < len(worker.ops) and ready(wi, worker.ops[cursor[wi]]):
                op = worker.ops[cursor[wi]]
                if op.kind == "W":
                    update(op)
                    remaining -= len(schedule.placement[op.chunk])
                else:
                    (forward if op.kind == "F" else backward)(wi, op)
                    cursor[wi] += 1
                    remaining -= 1
                    executed.append((wi, op))
                progressed = True
        if not progressed:
            raise RuntimeError(f"schedule {schedule.name!r} deadlocked at cursors {cursor}")
    return LocalRun(versions, executed)
