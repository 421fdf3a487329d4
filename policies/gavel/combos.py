"""Per-combination bookkeeping of Gavel's round mechanism, as aligned arrays ([Narayanan], §5.5).

A combination is one job or a pair sharing GPUs. For each the mechanism needs its allocation row X, the
time it received on each type and the time elapsed since the last reset (its priority is their ratio), its
deficit (the tie-breaker), and where it ran last round (for lease renewal). Keeping them as arrays lets a
round's priorities be one vectorised expression; rows change only when jobs come and go or X is recomputed.

Rows live in buffers that grow by doubling, and a departed job's rows are only marked dead (their
allocation is zeroed, so they never run) until dead rows outnumber live ones: a cluster of thousands of jobs
then pays O(1) amortised per arrival and departure instead of copying every array each time. Live rows
keep their relative order, which is all the mechanism's tie-breaks read.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

import numpy as np
from clustertwin.policies.compiled import compiled

Key = tuple[int, ...]

# Compact once dead rows outnumber live ones and there are at least this many.
_MIN_COMPACT = 64


class ComboTable:
    def __init__(self, k: int, round_s: float) -> None:
        self.k = k
        self.half_round = round_s / 2  # new and reset rows start as if half a round had passed
        self._buf: dict[str, np.ndarray] = {}
        self._install([], np.zeros(0, dtype=np.int64), np.zeros((0, k)), np.full((0, 2), -1, dtype=np.int64))

    def __len__(self) -> int:
        """Live combinations."""
        return len(self.index)

    @property
    def has_pairs(self) -> bool:
        return self._pairs > 0

    @property
    def one_gpu_each(self) -> bool:
        """Every live combination holds one GPU."""
        return self._wide == 0

    # --- storage ------------------------------------------------------------------------------------

    def _install(
        self, keys: list[Key], scale_factors: np.ndarray, allocation: np.ndarray, members: np.ndarray
    ) -> None:
        """Fresh rows for ``keys`` (``members``: their job ids, -1 padded) with empty bookkeeping."""
        n = len(keys)
        if not self._buf or n > len(self._buf["alive"]):
            cap = max(16, 1 << max(n - 1, 0).bit_length())
            self._buf = {
                "scale_factors": np.zeros(cap, dtype=np.int64),
                "allocation": np.zeros((cap, self.k)),
                "received": np.zeros((cap, self.k)),
                "elapsed": np.zeros(cap),
                "deficit": np.zeros((cap, self.k)),
                "last_type": np.zeros(cap, dtype=np.int64),
                "last_gpu": np.zeros(cap, dtype=np.int64),
                "last_consolidated": np.zeros(cap, dtype=bool),
                "members": np.zeros((cap, 2), dtype=np.int64),
                "alive": np.zeros(cap, dtype=bool),
            }
        # The buffers are reused while they are large enough: rows past n are rewritten before they are read.
        b = self._buf
        b["received"][:n] = self.half_round
        b["elapsed"][:n] = self.half_round
        b["deficit"][:n] = 0.0
        b["last_type"][:n] = -1
        b["last_gpu"][:n] = -1
        b["last_consolidated"][:n] = False
        self.keys: list[Key] = list(keys)
        self.index: dict[Key, int] = {key: row for row, key in enumerate(keys)}
        self._last_gpus: list[tuple[int, ...]] = [()] * n
        self._one_gpu_rounds = False
        self._n = n
        self._views()
        self.scale_factors[:] = scale_factors
        self.allocation[:] = allocation
        self.members[:] = members
        self.alive[:] = True
        self._pairs = int(np.count_nonzero(members[:, 1] >= 0))
        self._wide = int(np.count_nonzero(self.scale_factors > 1))
        self._dead = 0

    def _views(self) -> None:
        n = self._n
        b = self._buf
        self.scale_factors = b["scale_factors"][:n]
        self.allocation = b["allocation"][:n]
        self.received = b["received"][:n]
        self.elapsed = b["elapsed"][:n]
        self.deficit = b["deficit"][:n]
        self.last_type = b["last_type"][:n]
        self.last_gpu = b["last_gpu"][:n]  # the first of `last_gpus`, where last_type >= 0
        self.last_consolidated = b["last_consolidated"][:n]
        self.members = b["members"][:n]  # (n, 2) job ids, -1 for a single job's second slot
        self.alive = b["alive"][:n]

    def add(self, key: Key, scale_factor: int, allocation: np.ndarray) -> None:
        """A new job: no allocation until the next reset, fresh bookkeeping."""
        row = self._n
        if row == len(self._buf["alive"]):
            self._buf = {name: _grown(buf) for name, buf in self._buf.items()}
        b = self._buf
        b["scale_factors"][row] = scale_factor
        b["allocation"][row] = allocation
        b["received"][row] = self.half_round
        b["elapsed"][row] = self.half_round
        b["deficit"][row] = 0.0
        b["last_type"][row] = -1
        b["last_gpu"][row] = -1
        b["last_consolidated"][row] = False
        b["members"][row] = -1
        b["members"][row, : len(key)] = key
        b["alive"][row] = True
        self._n = row + 1
        self._views()
        self.index[key] = row
        self.keys.append(key)
        if not self._one_gpu_rounds:  # else the new row's () follows from its last_type when read
            self._last_gpus.append(())
        self._pairs += len(key) == 2
        self._wide += scale_factor > 1

    @property
    def last_gpus(self) -> list[tuple[int, ...]]:
        """The GPUs each combination held in the last round it ran (read where last_type >= 0). After
        rounds of one-GPU combinations only (``record_round`` given ``first_gpus``), built when read."""
        if self._one_gpu_rounds:
            self._last_gpus = [
                (g,) if t >= 0 else ()
                for t, g in zip(self.last_type.tolist(), self.last_gpu.tolist(), strict=True)
            ]
            self._one_gpu_rounds = False
        return self._last_gpus

    def _forget_gpus(self, row: int) -> None:
        if not self._one_gpu_rounds:  # else the row's () follows from its last_type (-1) when read
            self._last_gpus[row] = ()

    def _set_last_gpus(self, last_gpus: list[tuple[int, ...]]) -> None:
        self._last_gpus = last_gpus
        self._one_gpu_rounds = False

    # --- events -------------------------------------------------------------------------------------

    def renumber(self, gpu_maps: Sequence[dict[int, int]]) -> None:
        """The cluster's GPUs were renumbered per worker type (``gpu_maps[t]``: old index → new index of
        every GPU still there). A combination that last ran on a GPU that is gone loses its lease: a lease
        cannot be renewed on a machine that no longer exists (§5.5)."""
        for row in np.flatnonzero(self.last_type >= 0).tolist():
            mapping = gpu_maps[int(self.last_type[row])]
            if all(g in mapping for g in self.last_gpus[row]):
                self.last_gpus[row] = tuple(mapping[g] for g in self.last_gpus[row])
                self.last_gpu[row] = self.last_gpus[row][0] if self.last_gpus[row] else -1
            else:
                self._ran_nowhere(row)

    def forget_placement(self, job_id: int) -> None:
        """Every combination of the job last ran nowhere: its next placement is not a renewal."""
        for row in self._rows_of(job_id).tolist():
            self._ran_nowhere(row)

    def _ran_nowhere(self, row: int) -> None:
        self.last_type[row] = -1
        self._forget_gpus(row)

    def _rows_of(self, job_id: int) -> np.ndarray:
        """Live rows the job belongs to."""
        if not self._pairs:
            row = self.index.get((job_id,))
            return np.zeros(0, dtype=np.int64) if row is None else np.array([row])
        return np.flatnonzero((self.members == job_id).any(axis=1) & self.alive)

    def drop_job(self, job_id: int) -> None:
        """Remove every combination the job belongs to."""
        if self._pairs:
            rows = self._rows_of(job_id).tolist()
        else:  # its one row, if any (a departure per round, on average, in a busy cluster)
            row = self.index.get((job_id,))
            rows = [] if row is None else [row]
        for row in rows:
            key = self.keys[row]
            del self.index[key]
            self._pairs -= len(key) == 2
            self._wide -= int(self.scale_factors[row] > 1)
            self._forget_gpus(row)
            self.alive[row] = False
            self.allocation[row] = 0.0  # a dead row's priority is 0: it is never chosen
            self.last_type[row] = -1
        self._dead += len(rows)
        if rows and self._dead > max(len(self.index), _MIN_COMPACT):
            self._compact()

    def reset(
        self, keys: list[Key], members: np.ndarray, scale_factors: np.ndarray, allocation: np.ndarray
    ) -> None:
        """Install a new allocation: row i is combination ``keys[i]`` (``members[i]``: its job ids, -1
        padded) with its scale factor and X row. Deficits carry over: each adds ``X·elapsed − received``
        of its period."""
        carried = self.deficit + self.allocation * self.elapsed[:, None] - self.received
        members = np.asarray(members, dtype=np.int64).reshape(len(keys), 2)
        if not self._pairs and not (members[:, 1] >= 0).any():
            old = self._single_rows(members[:, 0])
        else:
            old = np.fromiter((self.index.get(key, -1) for key in keys), np.int64, len(keys))
        kept = old >= 0
        src = old[kept]
        # Gathered before the rows are rewritten in place.
        carried = carried[src]
        last_type, last_gpu = self.last_type[src], self.last_gpu[src]
        last_consolidated = self.last_consolidated[src]
        # After one-GPU rounds the tuples follow from last_type and last_gpu, which are carried below.
        one_gpu_rounds = self._one_gpu_rounds
        last_gpus = None if one_gpu_rounds else [self.last_gpus[r] if r >= 0 else () for r in old.tolist()]
        self._install(
            list(keys),
            np.asarray(scale_factors, dtype=np.int64),
            np.asarray(allocation, dtype=float).reshape(len(keys), self.k),
            members,
        )
        self.deficit[kept] = carried
        self.last_type[kept] = last_type
        self.last_gpu[kept] = last_gpu
        self.last_consolidated[kept] = last_consolidated
        if last_gpus is None:
            self._one_gpu_rounds = True
        else:
            self._set_last_gpus(last_gpus)

    def _single_rows(self, job_ids: np.ndarray) -> np.ndarray:
        """The live row of each job's single combination, -1 where it has none (no pairs in the table)."""
        live = np.flatnonzero(self.alive)
        ids = self.members[live, 0]
        if not ids.size:
            return np.full(len(job_ids), -1, dtype=np.int64)
        order = np.argsort(ids, kind="stable")
        at = np.minimum(np.searchsorted(ids[order], job_ids), ids.size - 1)
        return np.where(ids[order][at] == job_ids, live[order][at], -1)

    def record_round(
        self,
        rows: np.ndarray,
        types: np.ndarray,
        gpus: Sequence[tuple[int, ...]] | None,
        consolidated: np.ndarray,
        seconds: np.ndarray,
        duration_s: float,
        first_gpus: np.ndarray | None = None,
    ) -> None:
        """Combinations ``rows`` ran ``seconds`` on ``types``, on ``gpus``; every combination's clock moved
        ``duration_s``. ``first_gpus``: when every combination in the round held one GPU, those GPUs as an
        array, in place of ``gpus``.

        Call before removing the jobs that finished in the round, so ``rows`` still index this table.
        """
        placed = first_gpus if gpus is None else gpus
        if placed is None or len(placed) != len(rows):
            given = "no" if placed is None else len(placed)
            raise ValueError(f"{len(rows)} rows ran but {given} placements were given")
        if first_gpus is None:
            assert gpus is not None
            held = self.last_gpus  # built from last round's types, before they are overwritten
            # One C-level pass instead of a Python loop over the round's ~100 rows.
            collections.deque(map(held.__setitem__, rows.tolist(), gpus), maxlen=0)
            first_gpus = np.fromiter((g[0] if g else -1 for g in gpus), np.int64, len(gpus))
        else:
            self._one_gpu_rounds = True  # `last_gpus` follows from last_type and last_gpu until read
        _record(
            self.received,
            self.elapsed,
            self.last_type,
            self.last_gpu,
            self.last_consolidated,
            rows,
            types,
            first_gpus,
            consolidated,
            seconds,
            duration_s,
        )

    def _compact(self) -> None:
        rows = np.flatnonzero(self.alive)
        keep = {name: buf[: self._n][rows] for name, buf in self._buf.items()}
        keys = [self.keys[r] for r in rows.tolist()]
        last_gpus = self.last_gpus
        last_gpus = [last_gpus[r] for r in rows.tolist()]
        self._install(keys, keep["scale_factors"], keep["allocation"], keep["members"])
        for name, values in keep.items():
            getattr(self, name)[:] = values
        self._set_last_gpus(last_gpus)


@compiled
def _record(
    received: np.ndarray,
    elapsed: np.ndarray,
    last_type: np.ndarray,
    last_gpu: np.ndarray,
    last_consolidated: np.ndarray,
    rows: np.ndarray,
    types: np.ndarray,
    first_gpus: np.ndarray,
    consolidated: np.ndarray,
    seconds: np.ndarray,
    duration_s: float,
) -> None:
    """A round's time and placements, written into the table's arrays (`ComboTable.record_round`)."""
    last_type[:] = -1
    for i in range(rows.size):
        c = rows[i]
        received[c, types[i]] += seconds[i]
        last_type[c] = types[i]
        last_gpu[c] = first_gpus[i]
        last_consolidated[c] = consolidated[i]
    for c in range(elapsed.size):
        elapsed[c] += duration_s


def _grown(buf: np.ndarray) -> np.ndarray:
    """``buf`` with twice the rows (the new ones are overwritten before they are read)."""
    out = np.empty((2 * buf.shape[0], *buf.shape[1:]), dtype=buf.dtype)
    out[: buf.shape[0]] = buf
    return out
