"""PipeDream's hierarchical partitioning DP ([Narayanan] §2.4.1; flat form in [PipeDream-arXiv] §3.1).

Level ``k`` of the topology is ``m_k`` components of level ``k-1`` joined by links of bandwidth ``B_k``
(level 0 is one device). With ``A^k(i→j, m)`` the slowest stage of the best pipeline for layers
``i..j`` on ``m`` level-``k`` components:

    T^k(i→j, m) = (1/m) · max( A^{k-1}(i→j, m_{k-1}),  2(m-1) Σ_{l=i..j} |w_l| / B_k )
    A^k(i→j, m) = min{ T^k(i→j, m),
                       min_{i≤s<j} min_{1≤m'<m} max[ A^k(i→s, m-m'), 2 a_s / B_k, T^k(s+1→j, m') ] }

with ``A^0(i→j, 1) = Σ T_l`` and ``A^k(i→j, 1) = A^{k-1}(i→j, m_{k-1})``. The single-stage term
``T^k(i→j, m)`` is explicit only in the arXiv version ([PipeDream-arXiv], eq. for A(j, m)); we include it,
since otherwise a pipeline could never be purely data-parallel.

The three sources disagree on the communication terms, so ``convention`` picks one:

- ``"dissertation"`` (default): as above; compute and weight sync overlap (max), activations ``2a_s/B``.
- ``"arxiv"``: a parameter server moves ``4(m-1)/m · |w|`` bytes per worker ([PipeDream-arXiv] §3.1), still
  overlapped: ``T = (1/m)·max(ΣT_l, 4(m-1)Σ|w_l|/(m·B))``; activations ``2a_s/B``.
- ``"code"``: PipeDream's reference optimizer (``optimizer_graph_hierarchical.py``) *adds* the sync time
  to compute, ``T = (ΣT_l + 4(m-1)Σ|w_l|/(m·B))/m``, and has no activation term. At a level ``k ≥ 2`` it
  divides a *single* stage's sync term by the components of the level below (``m_{k-1}``, the GPUs per
  server), but not the sync of a split's last stage. Its ``--activation_compression_ratio`` option
  (``activation_compression_ratio=``) charges a split's last stage ``2a/(B·m'·ratio)`` for its input and
  for its output (but the model's last layer's).

The DP runs over the split ``s`` in ascending order and compares every (start, end, m, m') of one
split at once, as (start, end) planes; a level below the top costs ``N³/6·Σ(m-1)`` comparisons, and the
top level, which only needs the model's prefixes (start 0), ``N²/2·Σ(m-1)``. That makes full resolution
fast: ResNet-101's 347 layers on 2×8 GPUs plan in well under a second (``clustertwin bench pipedream``).

``memory`` (:class:`StageMemory`) makes a one-level DP memory-aware: a stage that does not fit one
device's memory (weights, gradients and optimizer state, and the activations its in-flight inputs stash)
is never chosen. At the top level the prefix DP knows how many devices follow a stage (those the prefix
does not use), hence its in-flight count.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

Convention = Literal["dissertation", "arxiv", "code"]


@dataclass(frozen=True)
class Level:
    """``count`` components of the level below, joined by links of ``bandwidth`` bytes/s."""

    count: int
    bandwidth: float


@dataclass(frozen=True)
class StagePlan:
    """Layers ``first..last`` (inclusive) on ``replicas`` devices (data parallel within the stage)."""

    first: int
    last: int
    replicas: int


@dataclass(frozen=True)
class PartitionPlan:
    """The planner's answer, flattened to devices.

    ``time_per_input`` is the predicted time of the slowest stage per input (``A^L(0→N, m_L)``), so the
    predicted throughput is ``1 / time_per_input`` inputs (profiled minibatches) per second.
    ``noam`` is the number of inputs the input stage admits per replica before its first backward
    ([Narayanan] §2.4.1: ⌈#workers / #replicas of the input stage⌉).
    """

    stages: tuple[StagePlan, ...]
    time_per_input: float
    noam: int
    # Whole copies of this pipeline that run side by side (data parallelism over pipelines, [Narayanan]
    # §3.2.3), on top of the scenario's own ``data_parallel``; a planner that chooses the width sets it.
    data_parallel: int = 1

    @property
    def config(self) -> str:
        """The paper's notation: replicas per stage joined by dashes ("15-1"); pure data parallelism
        is one stage replicated over every device."""
        return "-".join(str(s.replicas) for s in self.stages)

    @property
    def num_devices(self) -> int:
        return sum(s.replicas for s in self.stages)

    @property
    def is_data_parallel(self) -> bool:
        return len(self.stages) == 1 and self.stages[0].replicas > 1

    @property
    def is_straight(self) -> bool:
        return len(self.stages) > 1 and all(s.replicas == 1 for s in self.stages)


def _stage_time(
    compute: np.ndarray,
    weights: np.ndarray,
    m: int,
    bandwidth: float,
    convention: Convention,
    inner_count: int = 1,
) -> np.ndarray:
    """T^k(i→j, m) for every (i, j) at once; ``compute`` and ``weights`` are (N, N) range sums.

    ``inner_count`` divides the ``code`` convention's sync term: PipeDream's reference optimizer divides
    a *single-stage* replication's synchronisation by the number of components of the level below (the
    GPUs per server at level 2), but not that of the last stage of a split (``inner_count = 1``).
    """
    if m == 1:
        return compute.copy()
    if convention == "dissertation":
        return np.maximum(compute, 2.0 * (m - 1) * weights / bandwidth) / m
    sync = 4.0 * (m - 1) * weights / (m * bandwidth)
    if convention == "arxiv":
        return np.maximum(compute, sync) / m
    return (compute + sync / inner_count) / m


def _range_sums(values: Sequence[float]) -> np.ndarray:
    """(N, N) array of Σ values[i..j] for i <= j, +inf below the diagonal (no such range)."""
    prefix = np.concatenate([[0.0], np.cumsum(np.asarray(values, dtype=float))])
    sums = prefix[None, 1:] - prefix[:-1, None]
    n = len(values)
    sums[np.tril_indices(n, -1)] = np.inf
    return sums


@dataclass(frozen=True)
class StageMemory:
    """What the memory-aware DP needs to keep every stage within one device's memory.

    A stage of layers ``i..j`` on ``r`` replicas, with ``D`` devices from it to the end of the pipeline
    (itself included), holds per device ``Σ|w|·(versions + state_factor)`` for its weights, gradients and
    optimizer state, plus ``stashes`` copies of what one in-flight input keeps: the stage's input
    ``a_{i-1}`` and, without ``recompute``, every layer's output ``Σ stash_bytes``; with ``recompute`` the
    backward rebuilds one input's layer outputs next to the stashes. ``counts(D, r)`` gives
    ``(versions, stashes)``: for 1F1B ``⌈D/r⌉`` each ([Narayanan] §2.4.1's NOAM and §2.4.3's weight
    stashing); for the straight schedules Table 7.1's per-stage counts.
    """

    capacity_bytes: float
    stash_bytes: Sequence[float]
    state_factor: float
    counts: Callable[[int, int], tuple[float, float]]
    recompute: bool = False

    def stage_bytes(self, weights: float, stash: float, input_bytes: float, downstream: int, r: int) -> float:
        """Bytes per device of one stage (see the class docstring)."""
        versions, stashes = self.counts(downstream, r)
        if self.recompute:
            return weights * (versions + self.state_factor) + input_bytes * stashes + stash
        return weights * (versions + self.state_factor) + (input_bytes + stash) * stashes


@dataclass
class _LevelTable:
    """One level's DP table and back-pointers: ``best[i, j, m]`` and ``split[i, j, m] = s`` (-1 for a
    single stage of ``m`` replicas). Only ``i = 0`` is solved at the top level (``rows = 1``). The
    replicas of a split's last stage are recovered on the way back (``_replicas_of_last``). Index ``m``
    runs 1..count (0 unused)."""

    best: np.ndarray
    split: np.ndarray
    left: np.ndarray  # max(best[i, s, q], comm_s): the left part of a split, as the DP compared it
    right: np.ndarray  # right[s, j, m']: the last stage s+1..j on m' components, as the DP compared it
    memory: _MemoryArrays | None = None


def _pairs(count: int, straight: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(m, m') pairs the DP compares, m ascending then m' ascending, and where each m's group starts."""
    ms, mps = [], []
    for m in range(2, count + 1):
        for mp in (1,) if straight else range(1, m):
            ms.append(m)
            mps.append(mp)
    m_arr, mp_arr = np.array(ms, dtype=np.int64), np.array(mps, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, m_arr[1:] != m_arr[:-1]])
    return m_arr, mp_arr, starts


def _solve_level(
    below: np.ndarray,
    weights: np.ndarray,
    cut_bytes: np.ndarray,
    level: Level,
    inner_count: int,
    convention: Convention,
    straight: bool,
    rows: int,
    compression: float | None,
    memory: _MemoryArrays | None,
) -> _LevelTable:
    """A^k for start layers ``0..rows-1`` (``rows = 1`` at the top level, where only the whole model's
    prefixes are needed).

    The loop runs over the split point ``s`` in ascending order: every ``A^k(i→s, ·)`` is final once the
    splits before ``s`` are in, so each step compares all ``(i, j, m, m')`` of one split at once,
    ``(s+1)·(N-s-1)·Σ(m-1)`` candidates, and in all ``N³/6·Σ(m-1)`` at a lower level and ``N²/2·Σ(m-1)``
    at the top. Ties keep the single stage, then the smallest ``s``, then the smallest ``m'``.
    """
    n = below.shape[0]
    count = level.count
    bw = level.bandwidth
    single = np.full((n, n, count + 1), np.inf)
    right_stage = np.full((n, n, count + 1), np.inf)
    for m in range(1, count + 1):
        if m == 1 or not straight:  # a straight pipeline never replicates a stage
            single[:, :, m] = _stage_time(below, weights, m, bw, convention, inner_count)
            right_stage[:, :, m] = (
                single[:, :, m] if inner_count == 1 else _stage_time(below, weights, m, bw, convention)
            )
    if straight:
        single[:, :, 2:] = np.inf  # a straight pipeline on m > 1 components must split
    # right[s, j, m']: the last stage s+1..j of a split, with the reference's transfer terms (code).
    right = right_stage[1:].copy()
    if compression is not None:
        reps = np.arange(count + 1, dtype=float)
        reps[0] = np.inf
        xfer_in = 2.0 * cut_bytes[:-1, None] / (bw * reps[None, :] * compression)  # (n-1, count+1)
        xfer_out = 2.0 * cut_bytes[:, None] / (bw * reps[None, :] * compression)  # (n, count+1)
        xfer_out[-1] = 0.0  # the model's output goes nowhere
        right = np.maximum(np.maximum(right, xfer_in[:, None, :]), xfer_out[None, :, :])
    comm = np.zeros(n) if convention == "code" else 2.0 * cut_bytes / bw
    best = single[:rows].copy()
    if memory is not None:
        best[0][~memory.single_fits(count)] = np.inf
    split = np.full((rows, n, count + 1), -1, dtype=np.int64)
    m_arr, mp_arr, starts = _pairs(count, straight)
    if len(m_arr) == 0:
        return _LevelTable(best, split, np.maximum(best, comm[None, :, None]), right, memory)
    bounds = [*starts.tolist(), len(m_arr)]
    for s in range(n - 1):
        top = min(rows, s + 1)
        left = np.maximum(best[:top, s, m_arr - mp_arr], comm[s])  # (top, P)
        rgt = right[s, s + 1 :, :][:, mp_arr]  # (n-s-1, P)
        if memory is not None:
            rgt = np.where(memory.right_fits(s, m_arr, mp_arr), rgt, np.inf)
        left_t, rgt_t = left.T.copy(), rgt.T.copy()  # one contiguous row per (m, m') pair
        for g in range(len(bounds) - 1):
            lo, hi = bounds[g], bounds[g + 1]
            # min over m' of max(A(i→s, m-m') ∨ comm_s, T(s+1→j, m')) as (i, j) planes
            acc = np.maximum.outer(left_t[lo], rgt_t[lo])
            for k in range(lo + 1, hi):
                np.minimum(acc, np.maximum.outer(left_t[k], rgt_t[k]), out=acc)
            m = int(m_arr[lo])
            block = best[:top, s + 1 :, m]
            better = acc < block
            block[better] = acc[better]
            split[:top, s + 1 :, m][better] = s
    return _LevelTable(best, split, np.maximum(best, comm[None, :, None]), right, memory)


@dataclass(frozen=True)
class _MemoryArrays:
    """``StageMemory`` over the range sums of one top level of ``count`` devices."""

    spec: StageMemory
    weights: np.ndarray  # (N, N) Σ|w|
    stash: np.ndarray  # (N, N) Σ stash_bytes
    cut_bytes: np.ndarray
    count: int

    def single_fits(self, count: int) -> np.ndarray:
        """(N, count+1): the prefix 0..j as the first stage on m replicas (all devices downstream)."""
        out = np.zeros((self.weights.shape[0], count + 1), dtype=bool)
        for m in range(1, count + 1):
            need = self._bytes(self.weights[0], self.stash[0], 0.0, self.count, m)
            out[:, m] = need <= self.spec.capacity_bytes
        return out

    def right_fits(self, s: int, m_arr: np.ndarray, mp_arr: np.ndarray) -> np.ndarray:
        """(N-s-1, P): the last stage s+1..j on m' replicas of a prefix on m devices, whose downstream
        devices are the ``count - m`` after the prefix plus its own ``m'``."""
        w = self.weights[s + 1, s + 1 :]
        a = self.stash[s + 1, s + 1 :]
        out = np.empty((len(w), len(m_arr)), dtype=bool)
        for k, (m, mp) in enumerate(zip(m_arr.tolist(), mp_arr.tolist(), strict=True)):
            need = self._bytes(w, a, float(self.cut_bytes[s]), self.count - m + mp, mp)
            out[:, k] = need <= self.spec.capacity_bytes
        return out

    def _bytes(self, w: np.ndarray, a: np.ndarray, input_bytes: float, downstream: int, r: int) -> np.ndarray:
        return self.spec.stage_bytes(w, a, input_bytes, downstream, r)  # type: ignore[arg-type]


def plan_partition(
    compute_s: Sequence[float],
    parameter_bytes: Sequence[float],
    cut_bytes: Sequence[float],
    levels: Sequence[Level],
    convention: Convention = "dissertation",
    straight: bool = False,
    *,
    activation_compression_ratio: float | None = None,
    memory: StageMemory | None = None,
) -> PartitionPlan:
    """Solve the DP level by level from the bottom ([Narayanan] §2.4.1) and flatten the plan to devices.

    ``compute_s[l]`` is T_l (forward + backward of one input), ``parameter_bytes[l]`` is |w_l| and
    ``cut_bytes[l]`` is a_l, the bytes crossing a boundary after layer ``l``. ``levels`` go from the
    innermost (GPUs in a server) outwards. ``straight`` forbids replicated stages.

    ``activation_compression_ratio`` (``code`` convention only) is the reference optimizer's option of
    the same name: the last stage of every split also pays ``2a/(B·m'·ratio)`` for its input and (but for
    the model's last layer) its output, with ``m'`` its replicas. ``memory`` (one level only) drops every
    stage that does not fit a device (:class:`StageMemory`); a ``ValueError`` says when nothing fits.
    """
    n = len(compute_s)
    if not (n == len(parameter_bytes) == len(cut_bytes)) or n == 0:
        raise ValueError("compute_s, parameter_bytes and cut_bytes need the same, non-zero length")
    if not levels or any(lv.count < 1 or not lv.bandwidth > 0 for lv in levels):
        raise ValueError(f"levels need count >= 1 and bandwidth > 0, got {list(levels)}")
    if activation_compression_ratio is not None and (
        convention != "code" or not activation_compression_ratio > 0
    ):
        raise ValueError("activation_compression_ratio needs convention 'code' and a ratio > 0")
    if memory is not None and (len(levels) != 1 or len(memory.stash_bytes) != n):
        raise ValueError("the memory-aware DP takes one level and one stash size per layer")
    weights = _range_sums(parameter_bytes)
    cuts = np.asarray(cut_bytes, dtype=float)
    below = _range_sums(compute_s)  # A^0(i→j, 1)
    mem = None
    if memory is not None:
        mem = _MemoryArrays(memory, weights, _range_sums(memory.stash_bytes), cuts, levels[0].count)
    tables: list[_LevelTable] = []
    inner = 1
    for k, level in enumerate(levels):
        rows = 1 if k == len(levels) - 1 else n
        table = _solve_level(
            below, weights, cuts, level, inner, convention, straight, rows, activation_compression_ratio, mem
        )
        tables.append(table)
        below = table.best[:, :, level.count]
        inner = level.count
    top = tables[-1].best[0, n - 1, levels[-1].count]
    if not math.isfinite(top):
        if memory is not None:
            raise ValueError(
                f"no plan fits {memory.capacity_bytes / 2**30:.2f} GiB per device on"
                f" {levels[0].count} devices{' as a straight pipeline' if straight else ''}"
            )
        raise ValueError(
            f"no plan: a straight pipeline needs at least as many layers ({n}) as devices"
            f" ({math.prod(lv.count for lv in levels)})"
        )
    stages = _flatten(tables, levels, len(levels) - 1, 0, n - 1, levels[-1].count)
    noam = math.ceil(sum(s.replicas for s in stages) / stages[0].replicas)
    return PartitionPlan(tuple(stages), float(top), noam)


def _replicas_of_last(table: _LevelTable, i: int, j: int, m: int, s: int) -> int:
    """The m' the DP chose for the last stage s+1..j of ``best[i, j, m]``: the first that attains it."""
    target = table.best[i, j, m]
    for mp in range(1, m):
        if table.memory is not None:
            fits = table.memory.right_fits(s, np.array([m]), np.array([mp]))
            if not fits[j - s - 1, 0]:
                continue
        if max(table.left[i, s, m - mp], table.right[s, j, mp]) == target:
            return mp
    raise AssertionError(f"no replica split reproduces best[{i}, {j}, {m}] at split {s}")


def _flatten(
    tables: list[_LevelTable], levels: Sequence[Level], k: int, i: int, j: int, m: int
) -> list[StagePlan]:
    """Walk back-pointers at level ``k`` for layers i..j on m components, then expand every stage into
    its level ``k-1`` plan, multiplying replica counts (each replica is a whole component)."""
    top: list[tuple[int, int, int]] = []
    while True:
        s = int(tables[k].split[i, j, m])
        if s < 0:
            top.append((i, j, m))
            break
        m_right = _replicas_of_last(tables[k], i, j, m, s)
        top.append((s + 1, j, m_right))
        j, m = s, m - m_right
    top.reverse()
    if k == 0:
        return [StagePlan(a, b, r) for a, b, r in top]
    out: list[StagePlan] = []
    for a, b, r in top:
        for inner in _flatten(tables, levels, k - 1, a, b, levels[k - 1].count):
            out.append(StagePlan(inner.first, inner.last, inner.replicas * r))
    return _merge_equal(out)


def _merge_equal(stages: list[StagePlan]) -> list[StagePlan]:
    # A component-level stage whose inner plan is one stage shows up once; nothing to merge, but two
    # adjacent flattened stages over the same layers cannot occur, so this only validates contiguity.
    for prev, nxt in zip(stages, stages[1:], strict=False):
        if nxt.first != prev.last + 1:
            raise AssertionError(f"non-contiguous plan {stages}")
    return stages


def pipeline_time(
    stages: Sequence[StagePlan],
    compute_s: Sequence[float],
    parameter_bytes: Sequence[float],
    cut_bytes: Sequence[float],
    bandwidth: float,
    convention: Convention = "dissertation",
    *,
    activation_compression_ratio: float | None = None,
) -> float:
    """The flat (one-level) cost of a given plan: the slowest of its stages and boundaries. Used to
    compare candidate plans (and, in tests, as the brute-force objective). With
    ``activation_compression_ratio`` (``code``) every stage but the first also pays its input's and, but
    for the last, its output's ``2a/(B·r·ratio)`` (``r`` its replicas), as ``plan_partition`` charges."""
    worst = 0.0
    last = len(compute_s) - 1
    for idx, st in enumerate(stages):
        comp = float(sum(compute_s[st.first : st.last + 1]))
        w = float(sum(parameter_bytes[st.first : st.last + 1]))
        t = _stage_time(np.array(comp), np.array(w), st.replicas, bandwidth, convention)
        worst = max(worst, float(t))
        if idx + 1 < len(stages) and convention != "code":
            worst = max(worst, 2.0 * cut_bytes[st.last] / bandwidth)
        if activation_compression_ratio is not None and idx > 0:
            scale = bandwidth * st.replicas * activation_compression_ratio
            worst = max(worst, 2.0 * cut_bytes[st.first - 1] / scale)
            if st.last < last:
                worst = max(worst, 2.0 * cut_bytes[st.last] / scale)
    return worst
