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
- ``"code"``: PipeDream's reference optimizer *adds* the sync time to compute,
  ``T = (ΣT_l + 4(m-1)Σ|w_l|/(m·B))/m``, and has no activation term (it is used only with activation
  compression, off by default).

The DP is vectorised over the start layer ``i``, the split ``s`` and the replica split ``m'``, so a
level costs ``O(N·m_k)`` numpy passes over ``N×N×m_k`` arrays instead of ``O(N³m_k²)`` Python steps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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
    compute: np.ndarray, weights: np.ndarray, m: int, bandwidth: float, convention: Convention
) -> np.ndarray:
    """T^k(i→j, m) for every (i, j) at once; ``compute`` and ``weights`` are (N, N) range sums."""
    if m == 1:
        return compute.copy()
    if convention == "dissertation":
        return np.maximum(compute, 2.0 * (m - 1) * weights / bandwidth) / m
    sync = 4.0 * (m - 1) * weights / (m * bandwidth)
    if convention == "arxiv":
        return np.maximum(compute, sync) / m
    return (compute + sync) / m


def _range_sums(values: Sequence[float]) -> np.ndarray:
    """(N, N) array of Σ values[i..j] for i <= j, +inf below the diagonal (no such range)."""
    prefix = np.concatenate([[0.0], np.cumsum(np.asarray(values, dtype=float))])
    sums = prefix[None, 1:] - prefix[:-1, None]
    n = len(values)
    sums[np.tril_indices(n, -1)] = np.inf
    return sums


@dataclass
class _LevelTable:
    """One level's DP table and back-pointers: ``best[i, j, m]`` and ``choice[i, j, m] = (s, m')``,
    with ``s = -1`` for a single stage of ``m`` replicas. Index ``m`` runs 1..count (0 unused)."""

    best: np.ndarray
    split: np.ndarray
    sub: np.ndarray


def _solve_level(
    below: np.ndarray,
    weights: np.ndarray,
    cut_bytes: np.ndarray,
    level: Level,
    convention: Convention,
    straight: bool,
) -> _LevelTable:
    n = below.shape[0]
    count = level.count
    stage = np.full((n, n, count + 1), np.inf)
    for m in range(1, count + 1):
        # A straight pipeline never replicates a stage.
        if m == 1 or not straight:
            stage[:, :, m] = _stage_time(below, weights, m, level.bandwidth, convention)
    comm = np.zeros(n) if convention == "code" else 2.0 * cut_bytes / level.bandwidth
    best = stage.copy()
    split = np.full((n, n, count + 1), -1, dtype=np.int64)
    sub = np.zeros((n, n, count + 1), dtype=np.int64)
    if straight:
        best[:, :, 2:] = np.inf  # a straight pipeline on m > 1 components must split
    for j in range(1, n):
        for m in range(2, count + 1):
            # cand[i, s, q] with q = m' - 1: max(A(i→s, m-m'), 2a_s/B, T(s+1→j, m')).
            left = best[:, :j, m - 1 : 0 : -1]  # m - m' for m' = 1..m-1
            right = stage[1 : j + 1, j, 1:m]  # T(s+1→j, m'), shape (j, m-1)
            cand = np.maximum(np.maximum(left, comm[None, :j, None]), right[None, :, :])
            flat = cand.reshape(n, -1)
            arg = np.argmin(flat, axis=1)
            value = flat[np.arange(n), arg]
            better = value < best[:, j, m]
            best[better, j, m] = value[better]
            split[better, j, m] = arg[better] // (m - 1)
            sub[better, j, m] = arg[better] % (m - 1) + 1
    return _LevelTable(best, split, sub)


def plan_partition(
    compute_s: Sequence[float],
    parameter_bytes: Sequence[float],
    cut_bytes: Sequence[float],
    levels: Sequence[Level],
    convention: Convention = "dissertation",
    straight: bool = False,
) -> PartitionPlan:
    """Solve the DP level by level from the bottom ([Narayanan] §2.4.1) and flatten the plan to devices.

    ``compute_s[l]`` is T_l (forward + backward of one input), ``parameter_bytes[l]`` is |w_l| and
    ``cut_bytes[l]`` is a_l, the bytes crossing a boundary after layer ``l``. ``levels`` go from the
    innermost (GPUs in a server) outwards. ``straight`` forbids replicated stages.
    """
    n = len(compute_s)
    if not (n == len(parameter_bytes) == len(cut_bytes)) or n == 0:
        raise ValueError("compute_s, parameter_bytes and cut_bytes need the same, non-zero length")
    if not levels or any(lv.count < 1 or not lv.bandwidth > 0 for lv in levels):
        raise ValueError(f"levels need count >= 1 and bandwidth > 0, got {list(levels)}")
    weights = _range_sums(parameter_bytes)
    cuts = np.asarray(cut_bytes, dtype=float)
    below = _range_sums(compute_s)  # A^0(i→j, 1)
    tables: list[_LevelTable] = []
    for level in levels:
        table = _solve_level(below, weights, cuts, level, convention, straight)
        tables.append(table)
        below = table.best[:, :, level.count]
    top = tables[-1].best[0, n - 1, levels[-1].count]
    if not math.isfinite(top):
        raise ValueError(
            f"no plan: a straight pipeline needs at least as many layers ({n}) as devices"
            f" ({math.prod(lv.count for lv in levels)})"
        )
    stages = _flatten(tables, levels, len(levels) - 1, 0, n - 1, levels[-1].count)
    noam = math.ceil(sum(s.replicas for s in stages) / stages[0].replicas)
    return PartitionPlan(tuple(stages), float(top), noam)


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
        m_right = int(tables[k].sub[i, j, m])
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
) -> float:
    """The flat (one-level) cost of a given plan: the slowest of its stages and boundaries. Used to
    compare candidate plans (and, in tests, as the brute-force objective)."""
    worst = 0.0
    for idx, st in enumerate(stages):
        comp = float(sum(compute_s[st.first : st.last + 1]))
        w = float(sum(parameter_bytes[st.first : st.last + 1]))
        t = _stage_time(np.array(comp), np.array(w), st.replicas, bandwidth, convention)
        worst = max(worst, float(t))
        if idx + 1 < len(stages) and convention != "code":
            worst = max(worst, 2.0 * cut_bytes[st.last] / bandwidth)
    return worst
