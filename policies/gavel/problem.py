"""The values a Gavel allocation policy reads and returns ([Narayanan], §5.3.1).

A policy sees the active jobs as rows and the accelerator types as columns. ``throughputs[m, j]`` is
job m's throughput (steps/s of the whole job at its scale factor) on type j, 0 where the job cannot run
(out of memory, or no data). The policy returns the allocation matrix X: ``X[m, j]`` is the fraction of
wall-clock time job m should spend on type j between two allocation resets.

With space sharing (§5.3.1, "Space sharing") X gains one row per candidate job pair; the pair's
throughput on type j is a tuple (one value per member).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class PairCandidates:
    """Job pairs that may share an accelerator.

    ``members[p] = (a, b)`` are row indices into the single-job rows; ``throughputs[p, j] = (ta, tb)``
    are the two jobs' throughputs when they share type j (0 where the pair does not fit).
    """

    members: np.ndarray  # (p, 2) int
    throughputs: np.ndarray  # (p, k, 2) float

    def __len__(self) -> int:
        return int(self.members.shape[0])


@dataclass(frozen=True)
class AllocationInput:
    """Everything a Gavel policy may read at one allocation reset.

    All arrays are aligned with ``job_ids`` (rows) and ``worker_types`` (columns).
    """

    job_ids: np.ndarray  # (n,) int
    worker_types: tuple[str, ...]  # (k,)
    num_workers: np.ndarray  # (k,) int, N_j
    throughputs: np.ndarray  # (n, k) steps/s; 0 = cannot run there
    scale_factors: np.ndarray  # (n,) int, GPUs a job needs
    weights: np.ndarray | None = None  # (n,) priority weights w_m (default 1)
    remaining_steps: np.ndarray | None = None  # (n,) s_m
    arrival_times: np.ndarray | None = None  # (n,) seconds; FIFO order and FTF's t_m
    now: float = 0.0
    iso_elapsed: np.ndarray | None = None  # (n,) FTF's t^iso_m, accumulated by the caller
    slo_deadlines: np.ndarray | None = None  # (n,) absolute deadline in seconds, inf when none
    prices: np.ndarray | None = None  # (k,) $/hour of one accelerator of each type
    budget: float | None = None  # $ left for the remaining work (makespan under a budget, §6.4.3)
    entities: np.ndarray | None = None  # (n,) entity id per job (hierarchical policies)
    entity_weights: dict[int, float] = field(default_factory=dict)
    pairs: PairCandidates | None = None
    previous: Allocation | None = None  # last allocation: assignments to keep (FIFO), a solver's start (LAS)

    @property
    def n(self) -> int:
        return int(self.job_ids.shape[0])

    @property
    def k(self) -> int:
        return len(self.worker_types)

    def weights_or_ones(self) -> np.ndarray:
        return np.ones(self.n) if self.weights is None else np.asarray(self.weights, dtype=float)

    def require(self, *names: str) -> None:
        """Fail clearly when a policy needs an input the caller did not give."""
        missing = [name for name in names if getattr(self, name) is None]
        if missing:
            raise ValueError(f"this policy needs AllocationInput fields: {', '.join(missing)}")


@dataclass(frozen=True)
class Allocation:
    """The allocation matrix X over single jobs and, with space sharing, over job pairs."""

    job_ids: np.ndarray  # (n,)
    worker_types: tuple[str, ...]
    fractions: np.ndarray  # (n, k) time fraction of each job alone on each type
    pair_members: np.ndarray | None = None  # (p, 2) job ids (not row indices)
    pair_fractions: np.ndarray | None = None  # (p, k)
    # Solver state the policy that made X may start its next solve from (it reads it back from
    # ``AllocationInput.previous``), e.g. an LP basis; opaque to everyone else and never part of X.
    solver_state: object | None = field(default=None, compare=False, repr=False)

    def effective_throughput(self, inp: AllocationInput) -> np.ndarray:
        """τ_m(X) = Σ_j T[m,j]·X[m,j] plus the job's share of every pair it belongs to."""
        tau = (inp.throughputs * self.fractions).sum(axis=1)
        if self.pair_fractions is not None and inp.pairs is not None and len(inp.pairs):
            for side in (0, 1):
                contrib = (inp.pairs.throughputs[:, :, side] * self.pair_fractions).sum(axis=1)
                np.add.at(tau, inp.pairs.members[:, side], contrib)
        return tau

    def time_share(self) -> np.ndarray:
        """Σ_j X[m,j] including pairs: the fraction of time each job runs (≤ 1)."""
        share = self.fractions.sum(axis=1)
        if self.pair_fractions is not None and self.pair_members is not None:
            index = {int(j): i for i, j in enumerate(self.job_ids)}
            per_pair = self.pair_fractions.sum(axis=1)
            for (a, b), x in zip(self.pair_members, per_pair, strict=True):
                share[index[int(a)]] += x
                share[index[int(b)]] += x
        return share
