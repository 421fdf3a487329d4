"""Per-combination bookkeeping of Gavel's round mechanism, as aligned arrays ([Narayanan], §5.5).

A combination is one job or a pair sharing GPUs. For each the mechanism needs its allocation row X, the
time it received on each type and the time elapsed since the last reset (its priority is their ratio), its
deficit (the tie-breaker), and where it ran last round (for lease renewal). Keeping them as arrays lets a
round's priorities be one vectorised expression; rows change only when jobs come and go or X is recomputed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Key = tuple[int, ...]


class ComboTable:
    def __init__(self, k: int, round_s: float) -> None:
        self.k = k
        self.half_round = round_s / 2  # new and reset rows start as if half a round had passed
        self.keys: list[Key] = []
        self.index: dict[Key, int] = {}
        self.scale_factors = np.zeros(0, dtype=np.int64)
        self.allocation = np.zeros((0, k))
        self.received = np.zeros((0, k))
        self.elapsed = np.zeros(0)
        self.deficit = np.zeros((0, k))
        self.last_type = np.zeros(0, dtype=np.int64)
        self.last_consolidated = np.zeros(0, dtype=bool)
        self.last_gpus: list[tuple[int, ...]] = []

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, key: Key, scale_factor: int, allocation: np.ndarray) -> None:
        """A new job: no allocation until the next reset, fresh bookkeeping."""
        self.index[key] = len(self.keys)
        self.keys.append(key)
        self.last_gpus.append(())
        self.scale_factors = np.append(self.scale_factors, scale_factor)
        self.allocation = np.vstack([self.allocation, allocation[None, :]])
        self.received = np.vstack([self.received, np.full((1, self.k), self.half_round)])
        self.elapsed = np.append(self.elapsed, self.half_round)
        self.deficit = np.vstack([self.deficit, np.zeros((1, self.k))])
        self.last_type = np.append(self.last_type, -1)
        self.last_consolidated = np.append(self.last_consolidated, False)

    def renumber(self, gpu_maps: Sequence[dict[int, int]]) -> None:
        """The cluster's GPUs were renumbered per worker type (``gpu_maps[t]``: old index → new index of
        every GPU still there). A combination that last ran on a GPU that is gone loses its lease: a lease
        cannot be renewed on a machine that no longer exists (§5.5)."""
        for row in np.flatnonzero(self.last_type >= 0).tolist():
            mapping = gpu_maps[int(self.last_type[row])]
            if all(g in mapping for g in self.last_gpus[row]):
                self.last_gpus[row] = tuple(mapping[g] for g in self.last_gpus[row])
            else:
                self._ran_nowhere(row)

    def forget_placement(self, job_id: int) -> None:
        """Every combination of the job last ran nowhere: its next placement is not a renewal."""
        for row, key in enumerate(self.keys):
            if job_id in key:
                self._ran_nowhere(row)

    def _ran_nowhere(self, row: int) -> None:
        self.last_type[row] = -1
        self.last_gpus[row] = ()

    def drop_job(self, job_id: int) -> None:
        """Remove every combination the job belongs to."""
        keep = np.array([job_id not in key for key in self.keys], dtype=bool)
        if keep.all():
            return
        self._select(keep)

    def reset(self, entries: Sequence[tuple[Key, int, np.ndarray]]) -> None:
        """Install a new allocation. Deficits carry over: each adds ``X·elapsed − received`` of its period."""
        carried = self.deficit + self.allocation * self.elapsed[:, None] - self.received
        old = {
            key: (carried[row], self.last_type[row], self.last_gpus[row], self.last_consolidated[row])
            for key, row in self.index.items()
        }
        n = len(entries)
        self.keys = [key for key, _, _ in entries]
        self.index = {key: row for row, key in enumerate(self.keys)}
        self.scale_factors = np.array([sf for _, sf, _ in entries], dtype=np.int64)
        self.allocation = np.array([x for _, _, x in entries], dtype=float).reshape(n, self.k)
        self.received = np.full((n, self.k), self.half_round)
        self.elapsed = np.full(n, self.half_round)
        self.deficit = np.zeros((n, self.k))
        self.last_type = np.full(n, -1, dtype=np.int64)
        self.last_consolidated = np.zeros(n, dtype=bool)
        self.last_gpus = [()] * n
        for row, key in enumerate(self.keys):
            if key in old:
                (self.deficit[row], self.last_type[row], self.last_gpus[row], self.last_consolidated[row]) = (
                    old[key]
                )

    def record_round(
        self,
        rows: np.ndarray,
        types: np.ndarray,
        gpus: Sequence[tuple[int, ...]],
        consolidated: np.ndarray,
        seconds: np.ndarray,
        duration_s: float,
    ) -> None:
        """Combinations ``rows`` ran ``seconds`` on ``types``; every combination's clock moved ``duration_s``.

        Call before removing the jobs that finished in the round, so ``rows`` still index this table.
        """
        self.received[rows, types] += seconds
        self.last_type[:] = -1
        self.last_type[rows] = types
        self.last_consolidated[rows] = consolidated
        for row, held in zip(rows.tolist(), gpus, strict=True):
            self.last_gpus[row] = held
        self.elapsed += duration_s

    def _select(self, keep: np.ndarray) -> None:
        rows = np.flatnonzero(keep)
        self.keys = [self.keys[r] for r in rows]
        self.index = {key: i for i, key in enumerate(self.keys)}
        self.last_gpus = [self.last_gpus[r] for r in rows]
        self.scale_factors = self.scale_factors[keep]
        self.allocation = self.allocation[keep]
        self.received = self.received[keep]
        self.elapsed = self.elapsed[keep]
        self.deficit = self.deficit[keep]
        self.last_type = self.last_type[keep]
        self.last_consolidated = self.last_consolidated[keep]
