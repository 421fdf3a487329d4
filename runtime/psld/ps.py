"""Server and worker loops of a synchronous block-sharded parameter server on gloo point-to-point.

Ranks 0..S-1 are PSs (rank 0 doubles as the scheduler), ranks S..S+T-1 standby PSs (idle, no blocks,
until a scale-out maps blocks to one), ranks S+T..S+T+W-1 workers. Per iteration every
worker pushes each block's gradient to the block's owner (tag = block id); an owner sums the W pushes in
worker order (so the sum does not depend on which PS owns the block), then in vanilla mode applies SGD
with momentum to the parameters it holds and sends the new parameters back, or in BytePS mode sends the
sum back and the workers apply SGD. After its last pull of an iteration a PS tells every worker, per
block, how long it held that worker's copy of the block without working on it (``held_s``: the wait for
the other workers' pushes and for its CPU, its emulated NIC's queue); a worker's sample of a block is its
round trip less that (``shaped``: the simulator's push transfer + PS service + pull transfer), and it
reports (server, bytes, seconds) samples. A worker computes its gradient on the CPU or on its GPU
(``Job.device``; parameters in, gradient out over the host, as gloo moves host memory), either the
closed-form toy or a linear layer's gradient over a synthetic minibatch (``Job.gradient``). A throttled
PS emulates a capped NIC, each direction paced concurrently (``run_server``).

Re-sharding ([PSLD], §5 and Figs. 9-10: prepare, block, migrate, resume): at every iteration boundary
the scheduler broadcasts the plan (``PREPARE(map_v+1, k*)``) to all ranks; the broadcast is also the
point where every rank is blocked. At k* the PSs migrate the moved blocks' parameters and momentum
(vanilla only), in one global block order so blocking send/recv pairs always match, while the workers
stay blocked; then every rank meets at the RESUME barrier (``resume``) and iteration k* runs on the new
map. A scale-out (ADD_SERVER) is such a re-sharding whose map gives blocks to a standby PS: it was in
every PREPARE from the start, so activating it needs no change of the process group (the standby pool of
[PSLD] §5).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist
from clustertwin.policies.psld.blocks import Block
from clustertwin.policies.psld.migration import migrations
from clustertwin.policies.psld.profiling import Sample
from clustertwin.policies.psld.scheduler import PSLDScheduler, SchedulerConfig
from clustertwin.runtime.psld.throttle import Link, TokenBucket


@dataclass(frozen=True)
class Job:
    """Everything every rank needs; ``plans`` maps k* to the new owners (what PREPARE carries)."""

    servers: int
    workers: int
    numel: int  # parameters (float64, or the model's float32 when ``model`` is set)
    blocks: tuple[Block, ...]  # byte ranges of the flat parameter vector (8 bytes per element)
    owners: tuple[int, ...]
    iterations: int
    mode: str  # byteps | vanilla
    plans: dict[int, tuple[int, ...]]
    lr: float = 0.05
    momentum: float = 0.9
    throttle: dict[int, float] | None = None  # server -> NIC cap in bytes/s, each direction
    report_every: int = 0  # > 0: closed loop, PSLD's scheduler on rank 0 decides from live samples
    scheduler: SchedulerConfig | None = None
    seed: tuple[int, ...] = (0,)  # the scheduler's random stream (the simulator's, for a scenario)
    cpu_throttle: dict[int, float] | None = None  # server -> summing rate in bytes/s (a CPU straggler)
    device: str = "cpu"  # cpu | cuda: where workers compute gradients (PSs are always CPU processes)
    gradient: str = "toy"  # toy: closed form | linear: a linear layer's gradient over a synthetic batch
    batch: int = 32  # samples per worker minibatch of the linear gradient
    # > 0: rank 0 ends the run at the first PREPARE at least this many seconds after it started (and
    # after at least ``min_iterations``); ``iterations`` is then only a cap. A count fixed in advance
    # cannot know that PSLD will make the iterations several times shorter after its first decision.
    stop_after_s: float = 0.0
    min_iterations: int = 0
    # PSs launched idle for scale-out (ranks ``servers``..``servers + standby - 1``, server ids = ranks):
    # they hold no block until the scheduler activates one (ADD_SERVER) and a PREPARE maps blocks to it
    standby: int = 0
    # fault injection (tests): (rank, k) -> that PS SIGKILLs itself right after PREPARE k, mid-run
    kill_at: tuple[int, int] | None = None
    # a straggling worker (tests): worker -> seconds it sleeps after its gradient, before its pushes
    push_delay: dict[int, float] | None = None
    # a real network (``runtime.models``: a built-in name or ``module:function``) trained on the data
    # set ``data`` (None: the model's own), built under ``model_seed``: the flat vector is its float32
    # parameters and a worker's gradient is its minibatch's (``gradient`` is then ignored)
    model: str | None = None
    data: str | None = None
    model_seed: int = 0
    # step changes after the start, (time_s, server, what, value, rate): at the first iteration boundary
    # at least time_s into the run, PS server's NIC cap (what "bandwidth") or summing pace ("cpu")
    # becomes rate bytes/s (None: no cap, the PS's own speed); value is the scenario's (Gbit/s, cores)
    changes: tuple[tuple[float, int, str, float, float | None], ...] = ()
    # DEL_SERVER (time_s, server): at the first PREPARE at least time_s into the run, the scheduler
    # redistributes the PS's blocks over the others (Algorithm 3); the process stays, idle, in the group
    removals: tuple[tuple[float, int], ...] = ()

    @property
    def itemsize(self) -> int:
        """Bytes per parameter on the wire: the model's float32, else the stand-ins' float64."""
        return 4 if self.model else 8

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32 if self.model else torch.float64

    @property
    def report_tag(self) -> int:
        """The tag of a PS's per-iteration timing report to a worker (``held_s``); block tags are the
        block ids 0..n-1, so this one never matches a pull."""
        return len(self.blocks)

    @property
    def ps_ranks(self) -> int:
        """PS processes, standby included: workers are ranks ``ps_ranks``..``ps_ranks + workers - 1``."""
        return self.servers + self.standby


def _slice(block: Block, itemsize: int = 8) -> slice:
    return slice(block.offset // itemsize, (block.offset + block.nbytes) // itemsize)


def initial_params(numel: int) -> torch.Tensor:
    return torch.linspace(-1.0, 1.0, numel, dtype=torch.float64)


def trainer(job: Job):
    """This process's ``runtime.models.trainer.Trainer`` of the job's model (built once per process:
    the network and its data set are the same for every job of a launch with the same model)."""
    from clustertwin.runtime.models.trainer import Trainer

    key = (job.model, job.data, job.model_seed, job.batch, job.workers)
    if _TRAINERS.get("key") != key:
        _TRAINERS.update(
            key=key, trainer=Trainer(job.model or "", job.data, job.model_seed, job.batch, job.workers)
        )
    return _TRAINERS["trainer"]


_TRAINERS: dict = {}


def start_params(job: Job) -> torch.Tensor:
    """The parameters every rank starts from: the model's initial ones, or the stand-ins' ramp."""
    return trainer(job).initial() if job.model else initial_params(job.numel)


def gradient(params: torch.Tensor, worker: int, k: int) -> torch.Tensor:
    """A deterministic, worker- and step-dependent gradient of a toy quadratic loss."""
    idx = torch.arange(params.numel(), dtype=torch.float64, device=params.device)
    return params * (1.0 + 0.1 * worker) + torch.sin(idx * 0.01 + k + worker)


LINEAR_FEATURES = 64  # input features of the linear layer whose weights are the parameter vector


def linear_gradient(params: torch.Tensor, worker: int, k: int, batch: int) -> torch.Tensor:
    """Gradient of a linear layer's least-squares loss over a synthetic minibatch (real matmul work).

    The flat parameter vector (zero-padded to a multiple of ``LINEAR_FEATURES``) is the weight matrix
    ``P`` of shape (F, n/F). Worker ``worker``'s minibatch at step ``k`` is ``batch`` inputs ``X`` (B x F,
    rows of norm <= 1) and targets ``Y``; the loss is ||X P - Y||^2 / 2B, so the gradient is
    X^T (X P - Y) / B: 4·B·n floating-point operations, on whatever device ``params`` lives. Inputs are
    closed forms (no random generator), so the gradient depends only on (params, worker, k, batch) and
    the device's kernels: on one device it is bitwise reproducible under deterministic algorithms. Each
    worker's curvature X^T X / B has norm <= 1, so SGD on the sum of W gradients stays stable at lr·W < 3.8.
    """
    n, f = params.numel(), LINEAR_FEATURES
    cols = -(-n // f)
    padded = torch.zeros(f * cols, dtype=params.dtype, device=params.device)
    padded[:n] = params
    i = torch.arange(batch, dtype=params.dtype, device=params.device)[:, None]
    j = torch.arange(f, dtype=params.dtype, device=params.device)[None, :]
    x = torch.sin(0.7 * (i + 1.0) * (j + 1.0) + k + 0.5 * worker) / f**0.5
    y = torch.cos(i + k + worker)  # (B, 1), broadcast over the output columns
    residual = x @ padded.view(f, cols) - y
    return (x.T @ residual).view(-1)[:n] / batch


def worker_device(job: Job, worker: int) -> torch.device:
    """Worker ``worker``'s compute device: ``cuda:<worker mod #GPUs>`` (one GPU per worker, round-robin
    if there are fewer GPUs than workers) or the CPU."""
    if job.device == "cuda":
        return torch.device(f"cuda:{worker % torch.cuda.device_count()}")
    return torch.device("cpu")


def deterministic_cuda() -> None:
    """Make cuBLAS reproducible bit for bit (the parameter-identity check compares runs on the GPUs).

    cuBLAS reads ``CUBLAS_WORKSPACE_CONFIG`` when its handle is created, so this runs before the first
    CUDA call of a process; ``use_deterministic_algorithms`` then refuses any op without a deterministic
    kernel instead of silently changing the bits."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)


def compute_gradient(
    params: torch.Tensor,
    worker: int,
    k: int,
    job: Job,
    device: torch.device,
    losses: list[float] | None = None,
) -> torch.Tensor:
    """Worker ``worker``'s gradient at step ``k`` on ``device``, returned on the host as a contiguous
    float64 vector (gloo moves host memory: a GPU worker copies its parameters in and its gradient out,
    as a GPU worker of a CPU parameter server does). A model's minibatch loss is appended to ``losses``."""
    p = params if device.type == "cpu" else params.to(device)
    if job.model:
        g, loss = trainer(job).gradient(p, worker, k)
        if losses is not None:
            losses.append(loss)
    elif job.gradient == "toy":
        g = gradient(p, worker, k)
    else:
        g = linear_gradient(p, worker, k, job.batch)
    if device.type != "cpu":
        g = g.cpu()  # a blocking device-to-host copy: the GPU's work is done when it returns
    return g.contiguous()


def _sgd(p: torch.Tensor, m: torch.Tensor, g: torch.Tensor, job: Job) -> None:
    m.mul_(job.momentum).add_(g)
    p.sub_(job.lr * m)


class Control:
    """The scheduler's side of the protocol, on rank 0: a fixed plan, or PSLD's loop on live samples."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.started = time.monotonic()
        self.owners = tuple(job.owners)
        self.decisions: list[tuple[int, str]] = []
        # Every decision with the profile it was made on: (k, wall clock, decision, {server: profile}).
        self.records: list[tuple] = []
        # DEL_SERVER as it happened: (wall clock, server, whether it could be removed)
        self.removed: list[tuple[float, int, bool]] = []
        self.removals = sorted(job.removals)
        self.sched = None
        if job.report_every > 0:
            sizes = [b.nbytes for b in job.blocks]
            self.sched = PSLDScheduler(
                sizes,
                list(range(job.servers)),
                list(range(job.servers, job.ps_ranks)),  # the standby pool, activated in this order
                job.scheduler or SchedulerConfig(),
            )
            self.rng = np.random.default_rng(np.random.SeedSequence(list(job.seed)))

    def plan(self, k: int, samples: list[Sample]) -> tuple[int, ...] | None:
        new = self.job.plans.get(k)
        if (
            self.sched is not None
            and self.removals
            and self.removals[0][0] <= time.monotonic() - self.started
        ):
            if samples:  # the period's samples still count; the DEL_SERVER replaces this period's decision
                self.sched.observe(samples)
                samples = []
            removal = self._remove(k)
            if removal is not None:
                self.owners = removal
                return removal
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

    def _remove(self, k: int) -> tuple[int, ...] | None:
        """The map of the DEL_SERVER that is due (the simulator's rule: a PS that is not active, or the
        last one, is not removed, and that is logged too), or None."""
        _, server = self.removals.pop(0)
        assert self.sched is not None
        usable = server in self.sched.active and len(self.sched.active) > 1
        self.removed.append((time.monotonic(), server, usable))
        if not usable:
            return None
        decision = self.sched.remove_server(server, self.rng)
        self.records.append((k, time.monotonic(), decision, {}))
        self.decisions.append((k, decision.action))
        return decision.owners


Marks = list[tuple[int, float, float]]  # (k, arrived at PREPARE k, released), time.monotonic()


def _plan(
    rank: int, job: Job, k: int, mine: list[Sample], control: Control | None, marks: Marks | None = None
) -> tuple[tuple[int, ...] | None, bool]:
    """PREPARE for iteration ``k``: every rank blocks here; in closed loop the workers' samples of the
    last reporting period are gathered on rank 0 first, and the scheduler's decision is broadcast with
    whether the run ends here (``Job.stop_after_s``; then iteration ``k`` does not run). ``marks`` (if
    given) gets when this rank arrived and was released for every iteration that runs: its boundaries."""
    arrived = time.monotonic()
    samples: list[Sample] = []
    if job.report_every > 0 and k > 0 and k % job.report_every == 0:
        parts: list[list[Sample]] | None = [[] for _ in range(dist.get_world_size())] if rank == 0 else None
        dist.gather_object(list(mine), parts, dst=0)
        mine.clear()
        if parts is not None:
            samples = [x for part in parts for x in part]
    box: list = [None]
    if control is not None:
        stop = (
            job.stop_after_s > 0
            and k >= job.min_iterations
            and time.monotonic() - control.started >= job.stop_after_s
        )
        box = [(None if stop else control.plan(k, samples), stop)]
    dist.broadcast_object_list(box, src=0)
    new, stop = box[0]
    if marks is not None and not stop:
        marks.append((k, arrived, time.monotonic()))
    return new, stop


def resume() -> None:
    """RESUME after a PREPARE that carried a new map: every rank waits here until every PS has finished
    its migration and holds the new map ([PSLD] §5: prepare, block, migrate, resume).

    *Why:* released at PREPARE, the workers pushed iteration k*'s gradients while the PSs were still
    migrating (a PS posts its receives only after its migration), so every sample of iteration k* held
    the migration (243 ms against 0.5-30 ms in a GPU run) and the next report's fit went through it; the
    simulator's workers, as the paper's, stay blocked until the migration ends."""
    dist.barrier()


@dataclass
class ServerStats:
    """What a PS measures about itself (the simulator's PS CPU costs, and the re-sharding pause).

    ``sum_bytes``/``sum_s``: push bytes summed and the seconds it took (the simulator's summing rate per
    core: a PS is one process on one thread); ``update_bytes``/``update_s``: the same for the vanilla
    optimizer; ``migration_s``: per reassignment, (k*, seconds from the PREPARE release to this PS's
    RESUME: its own migration (vanilla), then the wait for every other PS's), so the slowest PS's is how
    long the workers stayed blocked after the PREPARE barrier."""

    sum_bytes: float = 0.0
    sum_s: float = 0.0
    update_bytes: float = 0.0
    update_s: float = 0.0
    migration_s: list[tuple[int, float]] = field(default_factory=list)
    # step changes as applied: (wall clock, what, the scenario's value)
    changes: list[tuple[float, str, float]] = field(default_factory=list)


def run_server(
    rank: int,
    job: Job,
    marks: Marks | None = None,
    stats: ServerStats | None = None,
    origin: float | None = None,
) -> tuple[dict[int, tuple[torch.Tensor, torch.Tensor]], Control | None]:
    """Serve until the last iteration; returns the blocks (params, momentum) held at the end and, on
    rank 0, the scheduler's record.

    A throttled PS emulates a NIC of ``job.throttle[rank]`` bytes/s in each direction ([PSLD] §6.1
    caps links with ``tc``: the cap is applied in the application because ``tc`` needs
    NET_ADMIN and does nothing on loopback): the ingress ``Link`` releases each push to the PS no
    earlier than the capped link would deliver it, the egress ``Link`` paces every pull (and migration)
    the PS sends, and both run concurrently, so the PS receives block b+1 while block b's pulls leave,
    as on a full-duplex NIC. Pushes are taken block by block, each block's W pushes in worker order,
    which is how a fair link interleaves W workers that all push the blocks in the same order; a
    block's W pulls share the egress, each taking W x its bytes / rate, as W flows of a fair link do
    (and the simulator's max-min share). A CPU straggler instead paces the summing
    (``job.cpu_throttle``).

    After the iteration's last pull the PS sends every worker a timing report (tag ``job.report_tag``):
    per block it served, in block order, ``held_s`` of that worker's copy (see there), on this process's
    clock; the worker subtracts it from its own round trip (``shaped``)."""
    started = time.monotonic() if origin is None else origin
    control = Control(job) if rank == 0 else None
    if control is not None:
        control.started = started
    nic = (job.throttle or {}).get(rank)
    ingress, egress = Link(nic), Link(nic)
    cpu = TokenBucket((job.cpu_throttle or {}).get(rank))
    steps = [(t, what, value, rate) for t, r, what, value, rate in sorted(job.changes) if r == rank]
    params0 = start_params(job)
    owners = list(job.owners)
    held = {
        b.id: (
            params0[_slice(b, job.itemsize)].clone(),
            torch.zeros(b.nbytes // job.itemsize, dtype=job.dtype),
        )
        for b in job.blocks
        if owners[b.id] == rank
    }
    # The emulated NIC's two directions and the PS's CPU are three concurrent stages, as in the
    # simulator: a receiver thread takes the pushes through the ingress link, the main thread sums
    # (and updates), a sender thread paces the pulls through the egress link. One waiter thread per
    # worker stamps when each of that worker's pushes arrives: gloo marks a receive complete only
    # inside ``wait``, so a single thread waiting in block order would stamp a fast worker's push only
    # once a slow worker's earlier push had come, and the slow worker's delay would land in the fast
    # worker's sample.
    with ExitStack() as stack:
        receiver = stack.enter_context(ThreadPoolExecutor(max_workers=1))
        sender = stack.enter_context(ThreadPoolExecutor(max_workers=1))
        waiters = [stack.enter_context(ThreadPoolExecutor(max_workers=1)) for _ in range(job.workers)]
        for k in range(job.iterations):
            new, stop = _plan(rank, job, k, [], control, marks)
            if stop:
                break
            if job.kill_at == (rank, k):  # a PS lost mid-run: no cleanup, no goodbye to its peers
                os.kill(os.getpid(), signal.SIGKILL)
            while steps and steps[0][0] <= time.monotonic() - started:
                _, what, value, rate = steps.pop(0)
                _step(what, rate, ingress, egress, cpu)
                if stats is not None:
                    stats.changes.append((time.monotonic(), what, value))
            if new is not None:
                released = time.perf_counter()
                if job.mode == "vanilla":
                    _migrate(rank, job, owners, new, held, ingress, egress)
                owners = list(new)
                resume()
                if stats is not None:
                    stats.migration_s.append((k, time.perf_counter() - released))
            mine = [b for b in job.blocks if owners[b.id] == rank]
            bufs = {
                (b.id, w): torch.empty(b.nbytes // job.itemsize, dtype=job.dtype)
                for b in mine
                for w in range(job.workers)
            }
            reqs = {
                (b.id, w): dist.irecv(bufs[(b.id, w)], job.ps_ranks + w, tag=b.id)
                for b in mine
                for w in range(job.workers)
            }
            posted = time.monotonic()  # no push of this iteration can arrive before this
            landed = {
                (b.id, w): waiters[w].submit(_landed, reqs[(b.id, w)])
                for b in mine
                for w in range(job.workers)
            }
            arrivals = [receiver.submit(_receive_pushes, job, b, landed, ingress, posted) for b in mine]
            pending, served = [], []
            for b, arrived in zip(mine, arrivals, strict=True):
                carried = arrived.result()
                start = time.monotonic()  # service starts: every push is in and the CPU is free
                cpu.take(b.nbytes * job.workers)  # a CPU straggler sums at its reduced rate
                t0 = time.perf_counter()
                total = bufs[(b.id, 0)].clone()
                for w in range(1, job.workers):
                    total += bufs[(b.id, w)]
                t1 = time.perf_counter()
                if job.mode == "vanilla":
                    p, m = held[b.id]
                    _sgd(p, m, total, job)
                    total = p.clone()
                if stats is not None:
                    stats.sum_bytes += b.nbytes * job.workers
                    stats.sum_s += t1 - t0
                    if job.mode == "vanilla":
                        stats.update_bytes += b.nbytes
                        stats.update_s += time.perf_counter() - t1
                ready = time.monotonic()  # service ends: the pull could leave now
                served.append((start, carried, ready))
                pending.append(sender.submit(_send_pulls, job, b, total, egress, ready))
            works, heads = [], []
            for future in pending:
                head, sent = future.result()
                heads.append(head)
                works += sent
            reports = []  # kept alive until their sends complete
            for w in range(job.workers if mine else 0):
                first = landed[(mine[0].id, w)].result()  # w's first push of the iteration to this PS
                reports.append(
                    torch.tensor(
                        [
                            held_s(first, begun, carried[w], head, ready)
                            for (begun, carried, ready), head in zip(served, heads, strict=True)
                        ],
                        dtype=torch.float64,
                    )
                )
                works.append(dist.isend(reports[-1], job.ps_ranks + w, tag=job.report_tag))
            for work in works:
                work.wait()
    return held, control


def _step(what: str, rate: float | None, ingress: Link, egress: Link, cpu: TokenBucket) -> None:
    """Apply a step change at an iteration boundary (no block is in flight there): the emulated NIC's
    two directions, or the CPU straggler's summing pace, get the new rate (None: no cap)."""
    if what == "bandwidth":
        ingress.rate = egress.rate = rate
    else:
        cpu.rate = rate
        cpu.tokens, cpu.last = cpu.burst, time.monotonic()


def held_s(first: float, start: float, carried: float, head: float, ready: float) -> float:
    """How long a PS held one worker's copy of a block for reasons the simulator's sample leaves out, on
    the PS's clock: from that worker's first push of the iteration to this PS (``first``) to the
    block's service ``start``, less the seconds the PS's ingress spent carrying the block's pushes from
    the moment this worker's was there (``carried``: the emulated NIC's transfer, which the sample
    keeps), plus the wait from the service's end (``ready``) to the egress starting the block's pulls
    (``head``).

    What is left out is then: the worker's later pushes queueing behind its earlier ones to this PS,
    the wait for the other workers' pushes (a slow worker's 10-30 ms in the GPU run), the wait for the
    PS's CPU behind earlier blocks, and the block's pulls queueing behind earlier pulls: none is in
    the simulator's sample (``sim.psld.engine``: each transfer from the moment it heads its
    connection, and the PS's CPU time for the block). Only durations on the PS's clock enter, so the
    worker never compares two processes' clocks."""
    return (start - first) - carried + (head - ready)


def _landed(req: dist.Work) -> float:
    """Wait for one push and return when it arrived (on the waiter's own thread: see ``run_server``)."""
    req.wait()
    return time.monotonic()


def _receive_pushes(job: Job, block: Block, landed: dict, ingress: Link, posted: float) -> list[float]:
    """Take one block's W pushes, in worker order, each once the ingress link has carried its bytes, and
    return, per worker, the seconds the link spent on the block's pushes from the moment that worker's
    push had arrived (0 on an unthrottled PS, whose transport the worker's round trip already holds).

    A push starts on the link when both the link is free and the push is there (``landed``: stamped by
    its worker's waiter thread, never before ``posted``); gloo fills the posted receive buffers at
    loopback speed, far above any cap, so the arrival of a push stands for the moment its sender
    started it. With all W pushes there at once the block takes W x bytes / rate for each of them, the
    simulator's fair share of a capped ingress; a push that came late (a slow worker) is charged only
    the link time after it came, never the wait for it."""
    arrived = [max(posted, landed[(block.id, w)].result()) for w in range(job.workers)]
    if ingress.rate is None:
        return [0.0] * job.workers
    spans = []
    for at in arrived:
        ingress.carry(block.nbytes, at)
        spans.append((ingress.free_at - block.nbytes / ingress.rate, ingress.free_at))
    return [sum(max(0.0, end - max(begin, at)) for begin, end in spans) for at in arrived]


def _send_pulls(
    job: Job, block: Block, total: torch.Tensor, egress: Link, ready: float
) -> tuple[float, list]:
    """Send one block's pull to every worker once the egress link has carried the W copies (the block
    was ready at ``ready``, when its sum, or update, was done); returns when the link started on them
    (the head of the queue) and the sends. The W pulls leave together, each having taken W x bytes /
    rate, as W flows sharing a capped link fairly do (the simulator's max-min share)."""
    head = max(egress.free_at, ready) if egress.rate is not None else time.monotonic()
    egress.carry(block.nbytes * job.workers, ready)
    return head, [dist.isend(total, job.ps_ranks + w, tag=block.id) for w in range(job.workers)]


def _migrate(
    rank: int,
    job: Job,
    owners: Sequence[int],
    new: Sequence[int],
    held: dict[int, tuple[torch.Tensor, torch.Tensor]],
    ingress: Link,
    egress: Link,
) -> None:
    """Vanilla re-sharding (§5.2): move the moved blocks' parameters and momentum, in one global block
    order so every blocking send meets its receive; the bytes cross the NICs' links like any other. A
    receive streams from the moment it is posted, so a capped sender and a capped receiver overlap
    (the pair runs at the slower cap, not at the sum of both times)."""
    for b, src, dst in migrations(owners, new):
        if src == rank:
            p, m = held.pop(b)
            state = torch.stack([p, m])
            egress.carry(state.numel() * job.itemsize, time.monotonic())
            dist.send(state, dst)
        elif dst == rank:
            buf = torch.empty(2, job.blocks[b].nbytes // job.itemsize, dtype=job.dtype)
            posted = time.monotonic()
            dist.recv(buf, src)
            ingress.carry(buf.numel() * job.itemsize, posted)
            held[b] = (buf[0].clone(), buf[1].clone())


def run_worker(
    rank: int,
    job: Job,
    marks: Marks | None = None,
    compute_s: list[float] | None = None,
    raw: list[Sample] | None = None,
    losses: list[float] | None = None,
) -> tuple[torch.Tensor, list[Sample]]:
    """Train; returns the final parameters and the block timing samples the scheduler gets (and appends
    each iteration's gradient computation time, host-to-device and device-to-host copies included, to
    ``compute_s``, every block's raw time from push issue to its own pull to ``raw``, and a model's
    minibatch loss of each iteration to ``losses``).

    A block's sample is the simulator's: push transfer + PS service + pull transfer (``shaped``). The
    worker times the round trip from its first push to the block's PS to the block's own pull, and the
    PS reports how long it held the worker's copy of the block without carrying or serving it
    (``held_s``); both are durations on one process's clock. The pulls are waited for by one thread per
    PS, in the order the PS sends them, each stamped as it completes (gloo's ``is_completed`` only turns
    true inside ``wait``): waiting in block order would time a fast PS's block queued behind a
    throttled PS's block as slow as that one.

    Every pull's receive is posted, and those threads started, before the gradient is computed and
    pushed, so a PS can send a block's pull as soon as it has served it, while the worker still pushes
    the blocks behind it (a full-duplex NIC, as in the simulator). *Why:* gloo sends a message only once
    the receiver's "ready to receive" notice has arrived, and that notice goes out on the same
    connection, after whatever the worker queued there before. Posted after the pushes, every receive
    notice to a PS trailed the worker's push bytes to it, so all of a PS's pulls to a worker left
    together once the PS had read that worker's last push, and the threads that stamp them started only
    after the last push was issued. A PS's first blocks, served early, then held most of the push phase
    and its last ones almost none: on 1 x H200 with ResNet-18 every block's raw time was about 25 ms, the
    scheduler's samples fell from 21 ms to 2-7 ms along a PS's blocks, and identical PSs read 6-8 ms or
    11-15 ms by which blocks they held (docs/algorithms/psld.md, "Known gaps").
    """
    w = rank - job.ps_ranks
    if job.device == "cuda":
        deterministic_cuda()
    device = worker_device(job, w)
    params = start_params(job)
    momentum = torch.zeros_like(params)
    owners = list(job.owners)
    samples: list[Sample] = []
    period: list[Sample] = []
    delay = (job.push_delay or {}).get(w, 0.0)
    with ThreadPoolExecutor(max_workers=job.ps_ranks) as pool:
        for k in range(job.iterations):
            new, stop = _plan(rank, job, k, period, None, marks)
            if stop:
                break
            if new is not None:
                owners = list(new)
                resume()  # blocked until the PSs have migrated: k*'s samples hold no migration
            # Every pull's receive is posted, and its PS's waiter thread started, before the gradient is
            # computed and pushed: a PS may send a block's pull the moment it has served it.
            pulled = {b.id: torch.empty(b.nbytes // job.itemsize, dtype=job.dtype) for b in job.blocks}
            by_server: dict[int, list] = {}
            for b in job.blocks:
                by_server.setdefault(owners[b.id], []).append(
                    (b.id, dist.irecv(pulled[b.id], owners[b.id], tag=b.id))
                )
            reports = {r: torch.empty(len(works), dtype=torch.float64) for r, works in by_server.items()}
            waits = [
                pool.submit(_wait_in_order, works, dist.irecv(reports[r], r, tag=job.report_tag))
                for r, works in by_server.items()
            ]
            t0 = time.perf_counter()
            grad = compute_gradient(params, w, k, job, device, losses)
            if compute_s is not None:
                compute_s.append(time.perf_counter() - t0)
            if delay > 0:
                time.sleep(delay)  # a straggling worker (tests): the other workers' pushes wait at the PS
            issued = {}
            sends = []
            for b in job.blocks:
                issued[b.id] = time.perf_counter()
                sends.append(dist.isend(grad[_slice(b, job.itemsize)].contiguous(), owners[b.id], tag=b.id))
            done: dict[int, float] = {}
            for future in waits:
                done.update(future.result())
            for r in sends:
                r.wait()
            held = {
                b: x
                for r, works in by_server.items()
                for (b, _), x in zip(works, reports[r].tolist(), strict=True)
            }
            times = shaped(job.blocks, owners, issued, done, held)
            for b, seconds in zip(job.blocks, times, strict=True):
                sample = Sample(w, owners[b.id], float(b.nbytes), seconds)
                samples.append(sample)
                period.append(sample)
                if raw is not None:
                    raw.append(Sample(w, owners[b.id], float(b.nbytes), done[b.id] - issued[b.id]))
            for b in job.blocks:
                if job.mode == "vanilla":
                    params[_slice(b, job.itemsize)] = pulled[b.id]
                else:
                    _sgd(
                        params[_slice(b, job.itemsize)], momentum[_slice(b, job.itemsize)], pulled[b.id], job
                    )
    return params, samples


def shaped(
    blocks: Sequence[Block],
    owners: Sequence[int],
    issued: dict[int, float],
    done: dict[int, float],
    held: dict[int, float],
) -> list[float]:
    """Each block's sample as the simulator takes it (``sim.psld.engine``: push transfer + the PS's
    service for the block + pull transfer, each with its message latency): the worker's round trip from
    its first push to the block's PS in the iteration (``issued``, the reference the PS's ``held_s``
    starts from) to the block's own pull (``done``), less what the PS reports it held the worker's copy
    without carrying or serving it (``held``, seconds on the PS's clock).

    What remains is the first push's transport to the PS (its latency and, on an unthrottled PS, its
    bytes through the real transport, standing for every push of the iteration to that PS: the PS sees
    only where a real transfer ends), the emulated NIC's carrying of the block's pushes, the PS's
    service (summing, the vanilla update, a CPU straggler's pace) and the pull's transfer to this
    worker. Left out: the wait for the slowest worker's push, and every queue behind earlier blocks (a
    pull no longer waits for the worker to post its receive: ``run_worker`` posts it before pushing).

    *Why:* before, a PS's first block of an iteration was timed from its push (so it held the wait for the
    slowest worker's push, 10-30 ms in the third GPU run) and every later one from the previous pull (the
    "de-queued" sample, about 0.8 ms of latency on a loaded PS). The line fitted to that differed from the
    simulator's, and in the third GPU run it made the real PSLD's first decision differ from its
    calibrated simulation's (docs/algorithms/psld.md, "Real runtime")."""
    first: dict[int, float] = {}
    for b in blocks:
        first.setdefault(owners[b.id], issued[b.id])
    return [done[b.id] - first[owners[b.id]] - held[b.id] for b in blocks]


def _wait_in_order(works: list, report: dist.Work) -> dict[int, float]:
    """Wait for one PS's pulls in the order it sends them, stamping each, then for its timing report."""
    stamps = {}
    for block, work in works:
        work.wait()
        stamps[block] = time.perf_counter()
    report.wait()
    return stamps


def reference(job: Job) -> torch.Tensor:
    """The same training computed serially, with no PS and no reassignment (what every worker must end
    with). Each worker's gradient is computed on that worker's device, so a GPU job's reference makes
    the same kernel calls on the same GPU models as its workers (call ``deterministic_cuda`` first).
    It runs on one intra-op thread, as the ranks do (``runtime.launch.join``): a model's CPU kernels
    may split their reductions by thread count, which would change the gradient's last bits."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        params = start_params(job)
        momentum = torch.zeros_like(params)
        devices = [worker_device(job, w) for w in range(job.workers)]
        for k in range(job.iterations):
            grads = [compute_gradient(params, w, k, job, devices[w]) for w in range(job.workers)]
            total = grads[0].clone()
            for g in grads[1:]:
                total += g
            _sgd(params, momentum, total, job)
    finally:
        torch.set_num_threads(threads)
    return params


def block_layout(sizes: Sequence[int], block_bytes: int) -> tuple[int, tuple[Block, ...]]:
    """Blocks over one flat float64 vector made of tensors of ``sizes`` elements."""
    from clustertwin.policies.psld.blocks import Tensor, split_blocks

    tensors = [Tensor(f"t{i}", n * 8) for i, n in enumerate(sizes)]
    blocks = split_blocks(tensors, block_bytes)
    starts = [0]
    for n in sizes:
        starts.append(starts[-1] + n * 8)
    flat = tuple(Block(b.id, b.tensor, starts[b.tensor] + b.offset, b.nbytes) for b in blocks)
    return sum(sizes), flat
