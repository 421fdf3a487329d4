"""Server and worker loops of a synchronous block-sharded parameter server on gloo point-to-point.

Ranks 0..S-1 are PSs (rank 0 doubles as the scheduler), ranks S..S+W-1 workers. Per iteration every
worker pushes each block's gradient to the block's owner (tag = block id); an owner sums the W pushes in
worker order (so the sum does not depend on which PS owns the block), then in vanilla mode applies SGD
with momentum to the parameters it holds and sends the new parameters back, or in BytePS mode sends the
sum back and the workers apply SGD. Workers time each block from push issue to pull completion and
report (server, bytes, seconds) samples.

Re-sharding (seed 002, §5 and Figs. 9-10): at every iteration boundary the scheduler broadcasts the plan
(``PREPARE(map_v+1, k*)``) to all ranks; the broadcast is also the point where every rank is blocked. At
k* the PSs migrate the moved blocks' parameters and momentum (vanilla only), in one global block order so
blocking send/recv pairs always match, and everyone resumes on the new map.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from policies.psld.blocks import Block
from policies.psld.migration import migrations
from policies.psld.profiling import Sample
from policies.psld.scheduler import PSLDScheduler, SchedulerConfig
from runtime.psld.throttle import TokenBucket


@dataclass(frozen=True)
class Job:
    """Everything every rank needs; ``plans`` maps k* to the new owners (what PREPARE carries)."""

    servers: int
    workers: int
    numel: int  # float64 parameters
    blocks: tuple[Block, ...]  # byte ranges of the flat parameter vector (8 bytes per element)
    owners: tuple[int, ...]
    iterations: int
    mode: str  # byteps | vanilla
    plans: dict[int, tuple[int, ...]]
    lr: float = 0.05
    momentum: float = 0.9
    throttle: dict[int, float] | None = None  # server -> bytes/s
    report_every: int = 0  # > 0: closed loop, PSLD's scheduler on rank 0 decides from live samples
    scheduler: SchedulerConfig | None = None
    seed: tuple[int, ...] = (0,)  # the scheduler's random stream (the simulator's, for a scenario)


def _slice(block: Block) -> slice:
    return slice(block.offset // 8, (block.offset + block.nbytes) // 8)


def initial_params(numel: int) -> torch.Tensor:
    return torch.linspace(-1.0, 1.0, numel, dtype=torch.float64)


def gradient(params: torch.Tensor, worker: int, k: int) -> torch.Tensor:
    """A deterministic, worker- and step-dependent gradient of a toy quadratic loss."""
    idx = torch.arange(params.numel(), dtype=torch.float64)
    return params * (1.0 + 0.1 * worker) + torch.sin(idx * 0.01 + k + worker)


def _sgd(p: torch.Tensor, m: torch.Tensor, g: torch.Tensor, job: Job) -> None:
    m.mul_(job.momentum).add_(g)
    p.sub_(job.lr * m)


class Control:
    """The scheduler's side of the protocol, on rank 0: a fixed plan, or PSLD's loop on live samples."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.owners = tuple(job.owners)
        self.decisions: list[tuple[int, str]] = []
        # Every decision with the profile it was made on: (k, wall clock, decision, {server: profile}).
        self.records: list[tuple] = []
        self.sched = None
        if job.report_every > 0:
            sizes = [b.nbytes for b in job.blocks]
            self.sched = PSLDScheduler(
                sizes, list(range(job.servers)), [], job.scheduler or SchedulerConfig()
            )
            self.rng = np.random.default_rng(np.random.SeedSequence(list(job.seed)))

    def plan(self, k: int, samples: list[Sample]) -> tuple[int, ...] | None:
        new = self.job.plans.get(k)
        if self.sched is not None and samples:
            self.sched.observe(samples)
            decision = self.sched.decide(k // self.job.report_every, self.owners, self.rng)
            reference = float(sum(self.sched.sizes)) / max(1, len(self.sched.active))
            profile = {
                r: (float(np.mean(m.alphas)), float(np.mean(m.betas)), m.mean(reference))
                for r, m in sorted(self.sched.model().items())
            }
            self.records.append((k, time.monotonic(), decision, profile))
            if decision.owners is not None:
                self.decisions.append((k, decision.action))
                new = decision.owners
        if new is not None:
            self.owners = tuple(new)
        return new


Marks = list[tuple[int, float, float]]  # (k, arrived at PREPARE k, released), time.monotonic()


def _plan(
    rank: int, job: Job, k: int, mine: list[Sample], control: Control | None, marks: Marks | None = None
) -> tuple[int, ...] | None:
    """PREPARE for iteration ``k``: every rank blocks here; in closed loop the workers' samples of the
    last reporting period are gathered on rank 0 first, and the scheduler's decision is broadcast.
    ``marks`` (if given) gets when this rank arrived and was released: the iteration boundaries."""
    arrived = time.monotonic()
    samples: list[Sample] = []
    if job.report_every > 0 and k > 0 and k % job.report_every == 0:
        parts: list[list[Sample]] | None = [[] for _ in range(dist.get_world_size())] if rank == 0 else None
        dist.gather_object(list(mine), parts, dst=0)
        mine.clear()
        if parts is not None:
            samples = [x for part in parts for x in part]
    box = [control.plan(k, samples) if control is not None else None]
    dist.broadcast_object_list(box, src=0)
    if marks is not None:
        marks.append((k, arrived, time.monotonic()))
    return box[0]


def run_server(
    rank: int, job: Job, marks: Marks | None = None
) -> tuple[dict[int, tuple[torch.Tensor, torch.Tensor]], Control | None]:
    """Serve until the last iteration; returns the blocks (params, momentum) held at the end and, on
    rank 0, the scheduler's record."""
    control = Control(job) if rank == 0 else None
    bucket = TokenBucket((job.throttle or {}).get(rank))
    params0 = initial_params(job.numel)
    owners = list(job.owners)
    held = {
        b.id: (params0[_slice(b)].clone(), torch.zeros(b.nbytes // 8, dtype=torch.float64))
        for b in job.blocks
        if owners[b.id] == rank
    }
    for k in range(job.iterations):
        new = _plan(rank, job, k, [], control, marks)
        if new is not None:
            if job.mode == "vanilla":
                for b, src, dst in migrations(owners, new):
                    if src == rank:
                        p, m = held.pop(b)
                        dist.send(torch.stack([p, m]), dst)
                    elif dst == rank:
                        buf = torch.empty(2, job.blocks[b].nbytes // 8, dtype=torch.float64)
                        dist.recv(buf, src)
                        held[b] = (buf[0].clone(), buf[1].clone())
            owners = list(new)
        mine = [b for b in job.blocks if owners[b.id] == rank]
        bufs = {
            (b.id, w): torch.empty(b.nbytes // 8, dtype=torch.float64)
            for b in mine
            for w in range(job.workers)
        }
        reqs = [
            dist.irecv(bufs[(b.id, w)], job.servers + w, tag=b.id) for b in mine for w in range(job.workers)
        ]
        for r in reqs:
            r.wait()
        out = []
        for b in mine:
            total = bufs[(b.id, 0)].clone()
            for w in range(1, job.workers):
                total += bufs[(b.id, w)]
            bucket.take(b.nbytes * job.workers)
            if job.mode == "vanilla":
                p, m = held[b.id]
                _sgd(p, m, total, job)
                total = p
            for w in range(job.workers):
                out.append(dist.isend(total.clone(), job.servers + w, tag=b.id))
        for r in out:
            r.wait()
    return held, control


def run_worker(rank: int, job: Job, marks: Marks | None = None) -> tuple[torch.Tensor, list[Sample]]:
    """Train; returns the final parameters and the block timing samples.

    A block's sample ends when *its* pull completes. Waiting on the pulls in block order would time a
    fast PS's block queued behind a throttled PS's block as slow as that one, and PSLD would never see
    the difference between the servers; so one thread per PS waits on that PS's pulls, in the order the
    PS sends them, and stamps each (gloo's ``is_completed`` only turns true inside ``wait``).
    """
    w = rank - job.servers
    params = initial_params(job.numel)
    momentum = torch.zeros_like(params)
    owners = list(job.owners)
    samples: list[Sample] = []
    period: list[Sample] = []
    with ThreadPoolExecutor(max_workers=job.servers) as pool:
        for k in range(job.iterations):
            new = _plan(rank, job, k, period, None, marks)
            if new is not None:
                owners = list(new)
            grad = gradient(params, w, k)
            issued = {}
            sends = []
            for b in job.blocks:
                issued[b.id] = time.perf_counter()
                sends.append(dist.isend(grad[_slice(b)].contiguous(), owners[b.id], tag=b.id))
            pulled = {b.id: torch.empty(b.nbytes // 8, dtype=torch.float64) for b in job.blocks}
            by_server: dict[int, list] = {}
            for b in job.blocks:
                by_server.setdefault(owners[b.id], []).append(
                    (b.id, dist.irecv(pulled[b.id], owners[b.id], tag=b.id))
                )
            done: dict[int, float] = {}
            for stamps in pool.map(_wait_in_order, by_server.values()):
                done.update(stamps)
            for r in sends:
                r.wait()
            for b in job.blocks:
                sample = Sample(w, owners[b.id], float(b.nbytes), done[b.id] - issued[b.id])
                samples.append(sample)
                period.append(sample)
            for b in job.blocks:
                if job.mode == "vanilla":
                    params[_slice(b)] = pulled[b.id]
                else:
                    _sgd(params[_slice(b)], momentum[_slice(b)], pulled[b.id], job)
    return params, samples


def _wait_in_order(works: list) -> dict[int, float]:
    stamps = {}
    for block, work in works:
        work.wait()
        stamps[block] = time.perf_counter()
    return stamps


def reference(job: Job) -> torch.Tensor:
    """The same training computed serially (what every worker must end with)."""
    params = initial_params(job.numel)
    momentum = torch.zeros_like(params)
    for k in range(job.iterations):
        grads = [gradient(params, w, k) for w in range(job.workers)]
        total = grads[0].clone()
        for g in grads[1:]:
            total += g
        _sgd(params, momentum, total, job)
    return params


def block_layout(sizes: Sequence[int], block_bytes: int) -> tuple[int, tuple[Block, ...]]:
    """Blocks over one flat float64 vector made of tensors of ``sizes`` elements."""
    from policies.psld.blocks import Tensor, split_blocks

    tensors = [Tensor(f"t{i}", n * 8) for i, n in enumerate(sizes)]
    blocks = split_blocks(tensors, block_bytes)
    starts = [0]
    for n in sizes:
        starts.append(starts[-1] + n * 8)
    flat = tuple(Block(b.id, b.tensor, starts[b.tensor] + b.offset, b.nbytes) for b in blocks)
    return sum(sizes), flat
