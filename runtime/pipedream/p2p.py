"""Point-to-point activation and gradient traffic between pipeline ranks, identical on gloo and NCCL.

NCCL ignores tags and runs the p2p ops of one communicator in issue order on one stream, so:

- every message has a fixed, known shape, one per chunk boundary (``workload.boundaries``); no shape
  header is sent;
- each (sender, receiver, kind) "channel" has its own process group, so activations and gradients,
  and the two directions of a pair, never queue behind each other on one NCCL stream;
- a receiver consumes each channel in the sender's op order: the schedule is data ([Narayanan] §2.4.2;
  ``policies.pipedream.ops``), so the receiver knows that order in advance; when it needs a message it
  posts ``irecv``s for every not-yet-posted message of that channel up to the one needed, then waits
  only for that one. Messages posted early simply wait in their buffers.

Sends are ``isend``s that never block the host; their handles are kept (with the tensor) until they
complete, and reaped as the run goes so sent activations are not kept alive longer than needed.
Communicators are created eagerly, one channel at a time in one global order (pairwise rendezvous in a
total order cannot deadlock), before any timed run. Gloo runs the very same code on CPU (the tests).
"""

from __future__ import annotations

from collections import deque

import torch
import torch.distributed as dist
from clustertwin.policies.pipedream.ops import Schedule

Key = tuple[str, int, int]  # ("act" | "grad", microbatch, chunk that consumes it)
Channel = tuple[int, int, str]  # (sender rank, receiver rank, kind)


def channel_orders(schedule: Schedule) -> dict[Channel, list[Key]]:
    """Every channel's messages in the sender's op order (one worker per rank)."""
    last = schedule.num_chunks - 1
    orders: dict[Channel, list[Key]] = {}
    for src, worker in enumerate(schedule.workers):
        for op in worker.ops:
            if op.kind == "F" and op.chunk < last:
                key: Key = ("act", op.microbatch, op.chunk + 1)
                dst = schedule.worker_for(op.chunk + 1, op.microbatch)
            elif op.kind == "B" and op.chunk > 0:
                key = ("grad", op.microbatch, op.chunk - 1)
                dst = schedule.worker_for(op.chunk - 1, op.microbatch)
            else:
                continue
            if dst != src:
                orders.setdefault((src, dst, key[0]), []).append(key)
    return orders


class Channels:
    """One rank's end of every channel (see the module docstring)."""

    def __init__(self, rank: int, world: int, device: torch.device) -> None:
        self.rank, self.device = rank, device
        # Every rank creates every group, in one order (new_group is collective over the world).
        self.groups = {}
        for src in range(world):
            for dst in range(world):
                if src != dst:
                    for kind in ("act", "grad"):
                        self.groups[(src, dst, kind)] = dist.new_group([src, dst])
        self.ready: set[Channel] = set()
        self.expected: dict[Channel, deque[Key]] = {}
        self.posted: dict[Key, tuple[object, torch.Tensor]] = {}
        self.sending: list[tuple[object, torch.Tensor]] = []
        self.shapes: list[tuple[tuple[int, ...], torch.dtype]] = []

    def connect(self, channels: list[Channel]) -> None:
        """Create the communicators of ``channels`` (the same list on every rank) with a one-element
        exchange per channel, in sorted order; a no-op for channels already connected."""
        for ch in sorted(set(channels) - self.ready):
            src, dst, _ = ch
            if self.rank in (src, dst):
                probe = torch.zeros(1, device=self.device)
                if self.rank == src:
                    dist.send(probe, dst, group=self.groups[ch])
                else:
                    dist.recv(probe, src, group=self.groups[ch])
            self.ready.add(ch)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def start(self, schedule: Schedule, shapes: list[tuple[tuple[int, ...], torch.dtype]]) -> None:
        """Prepare for one run of ``schedule``: ``shapes[b]`` is the shape and dtype of the activation
        from chunk ``b`` to chunk ``b + 1`` (and of its gradient)."""
        orders = channel_orders(schedule)
        self.connect(list(orders))
        if self.posted or self.sending:
            raise RuntimeError("a previous run left messages in flight")
        self.expected = {ch: deque(keys) for ch, keys in orders.items() if ch[1] == self.rank}
        self.shapes = shapes

    def boundary(self, key: Key) -> tuple[tuple[int, ...], torch.dtype]:
        """Shape and dtype of message ``key``: an activation consumed by chunk c crossed boundary c-1,
        a gradient consumed by chunk c crossed boundary c."""
        return self.shapes[key[2] - 1 if key[0] == "act" else key[2]]

    def send(self, key: Key, tensor: torch.Tensor, dst: int) -> None:
        shape, dtype = self.boundary(key)
        if tensor.shape != shape or tensor.dtype != dtype:
            raise RuntimeError(
                f"{key} is {tuple(tensor.shape)} {tensor.dtype}; the workload declared {shape} {dtype}"
                " for that chunk boundary (NCCL messages carry no shape)"
            )
        payload = tensor.detach().contiguous()
        work = dist.isend(payload, dst, group=self.groups[(self.rank, dst, key[0])])
        self.sending.append((work, payload))

    def recv(self, key: Key, src: int) -> torch.Tensor:
        """The payload of ``key`` from ``src``; posts earlier messages of the channel first."""
        ch = (src, self.rank, key[0])
        queue = self.expected.get(ch)
        while key not in self.posted:
            if not queue:
                raise RuntimeError(f"rank {self.rank} waits for {key} from rank {src}, which never sends it")
            nxt = queue.popleft()
            shape, dtype = self.boundary(nxt)
            buf = torch.empty(shape, dtype=dtype, device=self.device)
            self.posted[nxt] = (dist.irecv(buf, src, group=self.groups[ch]), buf)
        work, buf = self.posted.pop(key)
        work.wait()  # NCCL: the compute stream waits for the recv; the host does not block
        return buf

    def reap(self) -> None:
        """Forget sends that have completed (non-blocking)."""
        self.sending = [(w, t) for w, t in self.sending if not w.is_completed()]

    def finish(self) -> None:
        """Wait for every send of the run; every expected message must have been received."""
        for work, _ in self.sending:
            work.wait()
        self.sending = []
        left = [k for q in self.expected.values() for k in q] + list(self.posted)
        if left:
            raise RuntimeError(f"rank {self.rank} finished with unreceived messages {left[:4]}")

    def held_bytes(self) -> int:
        """Bytes of posted receive buffers and unfinished sends (the CPU memory accounting)."""
        return sum(t.numel() * t.element_size() for _, t in [*self.posted.values(), *self.sending])
