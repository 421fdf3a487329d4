"""Per-device memory accounting with a clear out-of-memory error."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


class PipelineOutOfMemory(RuntimeError):
    """A device needed more memory than it has; the message says which, when and on what."""


@dataclass
class DeviceMemory:
    """Running totals by category (bytes); ``peak`` and the breakdown at the peak are kept."""

    device: int
    capacity: float
    static: float = 0.0  # optimizer state, plus gradient buffers when they persist
    gradients: float = 0.0  # gradient buffers that live from a backward to the update (``per_update``)
    weights: float = 0.0  # weight bytes x live versions
    stashes: float = 0.0  # stashed activations
    transient: float = 0.0  # recomputed activations during a backward
    peak: float = 0.0
    peak_time: float = 0.0
    trace: list[tuple[float, float]] = field(default_factory=list)

    @property
    def total(self) -> float:
        return self.static + self.gradients + self.weights + self.stashes + self.transient

    def change(self, now: float, what: str, delta: float, context: str) -> None:
        """Add ``delta`` bytes to category ``what``; raise :class:`PipelineOutOfMemory` past capacity."""
        setattr(self, what, getattr(self, what) + delta)
        total = self.total
        self.trace.append((now, total))
        if total > self.peak:
            self.peak, self.peak_time = total, now
        if total > self.capacity * (1 + 1e-12) and math.isfinite(self.capacity):
            gib = 2.0**30
            raise PipelineOutOfMemory(
                f"device {self.device} out of memory at t={now:.6g}s ({context}): needs {total / gib:.2f} GiB"
                f" of {self.capacity / gib:.2f} GiB (weights {self.weights / gib:.2f}, stashed activations"
                f" {self.stashes / gib:.2f}, transient {self.transient / gib:.2f}, gradients"
                f" {self.gradients / gib:.2f}, static (optimizer and persistent gradients)"
                f" {self.static / gib:.2f}); use fewer microbatches in flight, recomputation, or more stages"
            )
