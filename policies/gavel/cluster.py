"""The accelerators a Gavel scheduler places jobs on: worker types, servers of k GPUs, GPU ids."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class ClusterLayout:
    """Per worker type: how many GPUs, packed into servers of ``gpus_per_server`` each.

    GPU ids are numbered per type, ``0 .. N_j-1``; GPU ``g`` of type j sits on server ``g // k_j``. Type order
    matters: heterogeneity-aware scheduling fills types in this order, so list the fastest first.
    """

    worker_types: tuple[str, ...]
    gpus: tuple[int, ...]
    gpus_per_server: tuple[int, ...]

    def __post_init__(self) -> None:
        if not (len(self.worker_types) == len(self.gpus) == len(self.gpus_per_server)):
            raise ValueError("worker_types, gpus and gpus_per_server must have the same length")
        if any(g < 0 for g in self.gpus) or any(k < 1 for k in self.gpus_per_server):
            raise ValueError("GPU counts must be >= 0 and servers must hold >= 1 GPU")

    @property
    def num_workers(self) -> np.ndarray:
        return np.asarray(self.gpus, dtype=float)

    @cached_property
    def gpu_counts(self) -> np.ndarray:
        """``gpus`` as an int64 array (built once: rounds read it every time)."""
        return np.asarray(self.gpus, dtype=np.int64)

    @cached_property
    def server_sizes(self) -> np.ndarray:
        """``gpus_per_server`` as an int64 array."""
        return np.asarray(self.gpus_per_server, dtype=np.int64)

    def type_index(self, worker_type: str) -> int:
        return self.worker_types.index(worker_type)

    def servers_needed(self, j: int, scale_factor: int) -> int:
        """The fewest servers a job of this scale factor can occupy: its consolidated placement."""
        k = self.gpus_per_server[j]
        return -(-scale_factor // k)

    def server_of(self, j: int, gpu: int) -> int:
        return gpu // self.gpus_per_server[j]
