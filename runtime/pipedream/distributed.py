"""Multi-process execution of a schedule's op lists with torch.distributed: gloo on CPU or NCCL on
``cuda:rank``, one process per worker, writing the same ``ops`` event table as the simulator.

Each rank runs its worker's op list in order, exactly as ``sim.pipedream`` and
``runtime.pipedream.local`` do ([Narayanan] §2.4.2: a schedule is data). Activations and gradients travel
over ``runtime.pipedream.p2p`` channels (fixed shapes, one process group per direction and kind,
received in the sender's order), so the same code runs on NCCL and, in the tests, on gloo. A ``W`` op
all-reduces the accumulated gradients over the chunk's replicas where they lie (``sync_gradients``; the
replicas' mean is folded into the SGD step) and applies SGD, creating a new weight
version ([Narayanan] §2.4.3, weight stashing; Table 7.1's update rules follow from which version each op
names). A version is freed as soon as no later op of the rank names it, as in the simulator; when the
version an update starts from is not needed any more (the flush schedules) the update is in place, so
those schedules hold one copy of the weights. Nothing else pins a version: the chunk modules hold
meta tensors only, and no loop variable outlives its op. A chunk's gradient buffer is its first
backward's gradient after an update and is freed by the update (``MemoryModel.gradient_buffer =
"per_update"`` in the simulator).

Timing: on CUDA every op is bracketed by CUDA events on the compute stream (no per-op synchronize),
converted to seconds from the run's starting barrier once the run has finished; on CPU by
``perf_counter``. A run is bracketed by synchronize + barrier, so its wall time is the step time of the
window. Peak memory is ``torch.cuda.max_memory_allocated`` over the run (on CPU, an accounting of the
tensors the executor's tables hold: weights, gradients, stashed inputs/outputs, messages in flight;
``runtime.pipedream.memtrace`` gives the allocator's ground truth on CPU).
"""

from __future__ import annotations

import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from clustertwin.policies.pipedream.ops import Schedule
from clustertwin.runtime.launch import Member, join, launch
from clustertwin.runtime.pipedream.p2p import Channels
from clustertwin.runtime.pipedream.workload import Workload
from torch.func import functional_call

Params = dict[str, torch.Tensor]
# One ops-table row: device, worker, stage, replica, kind, microbatch, version, start_s, end_s, bytes.
Row = tuple[int, int, int, int, str, int, int, float, float, float]


def init_rank(backend: str) -> Member:
    """Join the launch's process group (``runtime.launch``): NCCL ranks use ``cuda:<local rank>``, gloo
    ranks the CPU with one thread each (ranks share the host's cores)."""
    if backend == "nccl":
        return join("cuda", backend, threads=None)
    return join("cpu", backend)


def barrier(device: torch.device) -> None:
    """A barrier whose completion the host has seen (synchronize before and after on CUDA)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        dist.barrier(device_ids=[device.index])
        torch.cuda.synchronize(device)
    else:
        dist.barrier()


class OpClock:
    """Op timestamps: CUDA events on the current stream (resolved after the run) or ``perf_counter``."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.origin: object = None

    def start(self) -> None:
        """Mark time zero (call right after the starting barrier)."""
        self.origin = self.mark()

    def mark(self) -> object:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def seconds(self, mark: object) -> float:
        """Seconds from the origin; on CUDA only valid after the stream has passed ``mark``."""
        if self.cuda:
            return self.origin.elapsed_time(mark) / 1000.0  # type: ignore[union-attr]
        return mark - self.origin  # type: ignore[operator]


@dataclass
class RunRecord:
    """What one rank measured over one run of a schedule."""

    rows: list[Row]
    wall_s: float  # barrier to barrier
    peak_bytes: float  # max_memory_allocated on CUDA; held-tensor accounting on CPU


def boundaries(workload: Workload, chunks: int) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """Shape and dtype of the activation after each chunk but the last: the workload's own list where
    its boundaries differ (``boundaries``), else its one ``boundary`` for all."""
    per_boundary = getattr(workload, "boundaries", None)
    if per_boundary is not None:
        return list(per_boundary(chunks))
    return [workload.boundary(chunks)] * max(chunks - 1, 0)


# A gradient tensor at least this large is all-reduced where it lies; smaller ones share one flat bucket
# (a collective per bias or norm weight would be latency-bound; copying the large ones would cost a pass
# over the stage's gradients before and after the collective).
BUCKET_BYTES = 1 << 20


def sync_gradients(grads: list[torch.Tensor], group: object) -> None:
    """Sum ``grads`` over ``group``'s members in place: every contiguous tensor of at least
    ``BUCKET_BYTES`` by its own all-reduce, the rest flattened into one bucket per dtype and copied
    back. Members must pass tensors of the same shapes in the same order."""
    small: dict[torch.dtype, list[torch.Tensor]] = defaultdict(list)
    for g in grads:
        if g.is_contiguous() and g.numel() * g.element_size() >= BUCKET_BYTES:
            dist.all_reduce(g, group=group)
        else:
            small[g.dtype].append(g)
    for tensors in small.values():
        flat = torch.cat([g.reshape(-1) for g in tensors])
        dist.all_reduce(flat, group=group)
        parts = flat.split([g.numel() for g in tensors])
        torch._foreach_copy_(tensors, [part.view_as(g) for part, g in zip(parts, tensors, strict=True)])


def _nbytes(tensors) -> int:
    seen: dict[int, int] = {}
    for t in tensors:
        if t is not None:
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


class StageExecutor:
    """One rank's executor; keeps its chunks' weights across runs so warm-up and timed runs of one
    schedule continue the same training."""

    def __init__(self, rank: int, world: int, device: torch.device, workload: Workload, lr: float) -> None:
        self.rank, self.world, self.device = rank, world, device
        self.workload, self.lr = workload, lr
        self.channels = Channels(rank, world, device)
        self.modules: dict[int, torch.nn.Module] = {}
        self.weights: dict[int, Params] = {}
        self.layout: tuple | None = None
        self.replica_groups: dict[int, object] = {}

    def load(self, schedule: Schedule) -> None:
        """Build fresh chunk modules (from the workload's seed) for this rank's chunks of ``schedule``."""
        worker = schedule.workers[self.rank]
        self.modules = {}
        self.weights = {}
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        for c in worker.chunks:
            module = self.workload.chunk(c, schedule.num_chunks, self.device)
            # Version 0 takes the module's storage; the module itself becomes a storage-free function
            # (meta tensors) for ``functional_call``, so it does not pin the first version's weights
            # after an out-of-place update has replaced them (one weight copy per chunk otherwise).
            self.weights[c] = {n: p.detach() for n, p in module.named_parameters()}
            if any(True for _ in module.buffers()):
                raise ValueError("chunk modules with buffers are not supported (weights only)")
            self.modules[c] = module.to("meta")
        self.layout = (schedule.num_chunks, schedule.placement)
        # Replicated chunks (1F1B-RR) all-reduce over their replicas; new_group is collective.
        self.replica_groups = {
            c: dist.new_group(list(members))
            for c, members in enumerate(schedule.placement)
            if len(members) > 1
        }

    def run(self, schedule: Schedule, fresh: bool = False) -> RunRecord:
        """Execute this rank's op list of ``schedule`` once (barrier to barrier)."""
        if len(schedule.workers) != self.world:
            raise ValueError(f"schedule has {len(schedule.workers)} workers for {self.world} ranks")
        worker = schedule.workers[self.rank]
        # Decided from the schedule alone, so every rank reloads (and creates groups) together.
        if fresh or self.layout != (schedule.num_chunks, schedule.placement):
            self.load(schedule)
        last = schedule.num_chunks - 1
        scale = 1.0 / schedule.batch_microbatches
        self.channels.start(schedule, boundaries(self.workload, schedule.num_chunks))
        data = {
            op.microbatch: self.workload.microbatch(op.microbatch, self.device)
            for op in worker.ops
            if op.kind == "F" and op.chunk in (0, last)
        }
        # The weights move into ``versions`` for the run (``self.weights`` would otherwise pin version 0
        # until the end, after it is freed); they come back when the run ends.
        versions: dict[int, dict[int, Params]] = {c: {0: self.weights.pop(c)} for c in worker.chunks}
        layout, self.layout = self.layout, None  # a run that fails midway forces a fresh load
        newest = dict.fromkeys(worker.chunks, 0)
        future: dict[tuple[int, int], int] = defaultdict(int)
        for op in worker.ops:
            if op.kind in ("F", "B"):
                future[(op.chunk, op.version)] += 1
        grads: dict[int, Params] = {}
        stash: dict[tuple[int, int], tuple[torch.Tensor, Params, torch.Tensor]] = {}
        local: dict[tuple[str, int, int], torch.Tensor] = {}
        marks: list[tuple[int, str, int, int, object, object]] = []
        clock = OpClock(self.device)
        cpu_peak = 0

        def release(c: int) -> None:
            for v in [v for v in versions[c] if v != newest[c] and future[(c, v)] == 0]:
                del versions[c][v]

        def take(kind: str, k: int, c: int, src: int) -> torch.Tensor:
            return local.pop((kind, k, c)) if src == self.rank else self.channels.recv((kind, k, c), src)

        def give(kind: str, k: int, c: int, dst: int, tensor: torch.Tensor) -> None:
            if dst == self.rank:
                local[(kind, k, c)] = tensor.detach()
            else:
                self.channels.send((kind, k, c), tensor, dst)

        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        barrier(self.device)
        began = time.perf_counter()
        clock.start()
        for op in worker.ops:
            c, k = op.chunk, op.microbatch
            if op.kind == "F":
                x = data[k][0] if c == 0 else take("act", k, c, schedule.worker_for(c - 1, k))
                start = clock.mark()
                if c > 0:
                    x = x.detach().requires_grad_()
                params = {n: t.detach().requires_grad_() for n, t in versions[c][op.version].items()}
                out = functional_call(self.modules[c], params, (x,))
                if c == last:
                    out = self.workload.loss(out, data[k][1]) * scale
                else:
                    give("act", k, c + 1, schedule.worker_for(c + 1, k), out)
                stash[(k, c)] = (x, params, out)
                future[(c, op.version)] -= 1
            elif op.kind == "B":
                grad_out = None if c == last else take("grad", k, c, schedule.worker_for(c + 1, k))
                start = clock.mark()
                x, params, out = stash.pop((k, c))
                wrt = list(params.values()) + ([x] if c > 0 else [])
                got = torch.autograd.grad(out, wrt, grad_out)
                del out
                acc = grads.get(c)
                if acc is None:  # the first gradient becomes the accumulator (0 + g == g exactly)
                    # ... unless autograd handed back the incoming or outgoing gradient itself
                    # (e.g. ``x + p``): accumulating into it would corrupt a message.
                    shared = {t.data_ptr() for t in (grad_out, got[-1] if c > 0 else None) if t is not None}
                    grads[c] = {
                        n: g.clone() if g.data_ptr() in shared else g
                        for n, g in zip(params, got, strict=False)
                    }
                else:  # one multi-tensor kernel per few tensors, like torch's own optimizers
                    torch._foreach_add_([acc[n] for n in params], list(got[: len(params)]))
                if c > 0:
                    give("grad", k, c - 1, schedule.worker_for(c - 1, k), got[-1])
                # Drop every loop-local reference: ``wrt`` would keep this version's weights, and
                # ``acc`` the gradient buffer an update is about to consume, alive until the next B.
                del got, params, x, wrt, acc, grad_out
                future[(c, op.version)] -= 1
                release(c)
            else:
                start = clock.mark()
                self._update(c, op.version, versions, newest, grads, future)
                release(c)
            marks.append((c, op.kind, k, op.version, start, clock.mark()))
            self.channels.reap()
            if self.device.type == "cpu":
                held = _nbytes(
                    [t for vs in versions.values() for p in vs.values() for t in p.values()]
                    + [t for p in grads.values() for t in p.values()]
                    + [t for x, _, o in stash.values() for t in (x, o)]
                )
                cpu_peak = max(cpu_peak, held + self.channels.held_bytes())
        self.channels.finish()
        barrier(self.device)
        wall = time.perf_counter() - began
        for c in worker.chunks:
            self.weights[c] = versions[c][newest[c]]
        self.layout = layout
        rows: list[Row] = [
            (worker.device, self.rank, c, worker.replica, kind, k, v, clock.seconds(s), clock.seconds(e), 0.0)
            for c, kind, k, v, s, e in marks
        ]
        peak = torch.cuda.max_memory_allocated(self.device) if self.device.type == "cuda" else cpu_peak
        return RunRecord(rows, wall, float(peak))

    def _update(
        self,
        c: int,
        version: int,
        versions: dict[int, dict[int, Params]],
        newest: dict[int, int],
        grads: dict[int, Params],
        future: dict[tuple[int, int], int],
    ) -> None:
        """SGD from the newest version: W^(new) = W^(newest) − lr · (replica-mean accumulated gradient)."""
        base_v = newest[c]
        base = versions[c][base_v]
        acc = grads.pop(c, None) or {n: torch.zeros_like(t) for n, t in base.items()}
        names = list(base)
        weights, steps = [base[n] for n in names], [acc[n] for n in names]
        lr = self.lr
        if c in self.replica_groups:
            group = self.replica_groups[c]
            sync_gradients(steps, group)
            lr /= dist.get_world_size(group)  # the replicas' mean, folded into the step (no extra pass)
        if future[(c, base_v)] == 0:
            # Nothing will run on the base version again: update in place (one copy of the weights).
            torch._foreach_sub_(weights, steps, alpha=lr)
            versions[c][version] = base
        else:
            versions[c][version] = dict(zip(names, torch._foreach_sub(weights, steps, alpha=lr), strict=True))
        newest[c] = version

    def final(self) -> dict[int, Params]:
        """The newest weights of this rank's chunks, on CPU."""
        return {c: {n: t.detach().cpu() for n, t in p.items()} for c, p in self.weights.items()}


def _worker(
    rank: int, schedules: list[Schedule], workload: Workload, lr: float, backend: str, out_dir: str
) -> None:
    member = init_rank(backend)
    executor = StageExecutor(rank, member.world, member.device, workload, lr)
    results = []
    for schedule in schedules:
        record = executor.run(schedule, fresh=True)
        worker = schedule.workers[rank]
        final = executor.final() if worker.replica == 0 else {}
        results.append({"rows": record.rows, "final": final})
    torch.save(results, Path(out_dir) / f"rank{rank}.pt")
    barrier(member.device)
    dist.destroy_process_group()


def run_many(
    schedules: list[Schedule], workload: Workload, lr: float = 0.1, backend: str = "gloo"
) -> list[tuple[list[Row], dict[int, Params]]]:
    """Start one process per worker once and run each schedule (all with the same number of workers)
    from fresh weights; per schedule, the op rows of every rank (the ``ops`` table columns, times from
    a common barrier) and the final weights of every chunk."""
    world = len(schedules[0].workers)
    if any(len(s.workers) != world for s in schedules):
        raise ValueError("every schedule of one launch needs the same number of workers")
    with tempfile.TemporaryDirectory(prefix="pipedream-") as tmp:
        launch(_worker, world, (schedules, workload, lr, backend, tmp))
        per_rank = [torch.load(Path(tmp) / f"rank{r}.pt") for r in range(world)]
    out = []
    for i in range(len(schedules)):
        rows: list[Row] = []
        final: dict[int, Params] = {}
        for r in range(world):
            rows += per_rank[r][i]["rows"]
            final.update(per_rank[r][i]["final"])
        out.append((rows, final))
    return out


def run_distributed(
    schedule: Schedule, workload: Workload, lr: float = 0.1, backend: str = "gloo"
) -> tuple[list[Row], dict[int, Params]]:
    """``run_many`` for one schedule."""
    return run_many([schedule], workload, lr, backend)[0]
