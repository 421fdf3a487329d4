"""What the op-level executor is given: per-chunk costs, devices and the network (plain data)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class ChunkCost:
    """Costs of one model chunk (pipeline stage) for one microbatch on a device of speed 1."""

    forward_s: float
    backward_s: float
    parameter_bytes: float
    activation_bytes: float  # outputs of the chunk's layers kept for backward (without recomputation)
    input_bytes: float  # the activation received from the previous chunk (also kept for backward)
    output_bytes: float  # sent to the next chunk; the gradient sent back has the same size
    # The optimizer step of this chunk at each W, on the device's compute engine (the real runtime
    # applies it on its compute stream before the next op); 0 leaves W to ``optimizer_step_s`` alone.
    update_s: float = 0.0


@dataclass(frozen=True)
class Device:
    """A device: ``speed`` divides compute times (heterogeneity); ``server`` decides which link a
    transfer crosses; ``memory_bytes`` is its capacity (inf: unchecked)."""

    speed: float = 1.0
    memory_bytes: float = math.inf
    server: int = 0


@dataclass(frozen=True)
class Network:
    """Two link classes: inside a server and between servers. A transfer of ``n`` bytes takes
    ``latency + n / bandwidth``; inter-server transfers also queue on the sending server's NIC."""

    intra_bandwidth: float = math.inf
    intra_latency: float = 0.0
    inter_bandwidth: float = math.inf
    inter_latency: float = 0.0
    # Measured all-reduce bus bandwidth per group size, ((members, bytes/s), ...): the collective's own
    # rate at the size it was measured, its per-call and latency costs included
    # (``runtime.pipedream.probe.probe_sync``); a group size not listed is a ring over the links above.
    collective: tuple[tuple[int, float], ...] = ()

    def link(self, a: Device, b: Device) -> tuple[float, float]:
        """(bandwidth, latency) between two devices."""
        if a.server == b.server:
            return self.intra_bandwidth, self.intra_latency
        return self.inter_bandwidth, self.inter_latency

    def transfer_s(self, a: Device, b: Device, nbytes: float) -> float:
        bandwidth, latency = self.link(a, b)
        return latency + (nbytes / bandwidth if nbytes else 0.0)

    def allreduce_s(self, group: Sequence[Device], nbytes: float, extra_members: int = 1) -> float:
        """Ring all-reduce: 2(r-1)/r · bytes at the measured bus bandwidth of groups of that size
        (``collective``), else over the slowest link with 2(r-1) latency steps. ``group``
        are the devices simulated; ``extra_members`` multiplies the group size by whole parallel
        pipelines that are not simulated (equi-replicated pipelines, whose links are inter-server)."""
        r = len(group) * extra_members
        if r <= 1 or nbytes == 0:
            return 0.0
        measured = dict(self.collective).get(r)
        if measured is not None and extra_members == 1:
            return 2 * (r - 1) / r * nbytes / measured
        links = [self.link(a, b) for a in group for b in group if a is not b]
        if extra_members > 1:
            links.append((self.inter_bandwidth, self.inter_latency))
        bandwidth = min(bw for bw, _ in links)
        latency = max(lat for _, lat in links)
        return 2 * (r - 1) / r * nbytes / bandwidth + 2 * (r - 1) * latency


@dataclass(frozen=True)
class MemoryModel:
    """Bytes kept per device beyond weights and activations.

    ``gradient_factor``: gradient buffers per weight byte (1: one accumulation buffer).
    ``optimizer_factor``: optimizer state per weight byte (Adam in fp32: 2; SGD with momentum: 1).
    ``recompute``: keep only each chunk's input per in-flight microbatch and rebuild the rest during
    the backward (GPipe's and Ch. 3's activation recomputation; the backward then also pays a forward).
    ``gradient_buffer``: when the gradient buffers exist.

    - ``"persistent"``: allocated once and kept (a contiguous grad buffer, DDP buckets).
    - ``"per_update"``: what ``runtime.pipedream.distributed`` does (and ``zero_grad(set_to_none=True)``):
      the first backward after an update returns a full gradient that becomes the buffer; every later
      backward returns a full gradient that sits next to the buffer until it is added (a transient of
      one gradient at the end of that backward); the update consumes the buffer and frees it once the
      new weights exist. Between an update and the next backward a chunk holds no gradient at all,
      so PipeDream's last stage (backward, then update, per input) never holds one next to a stash.
    """

    gradient_factor: float = 1.0
    optimizer_factor: float = 2.0
    recompute: bool = False
    gradient_buffer: Literal["persistent", "per_update"] = "persistent"
