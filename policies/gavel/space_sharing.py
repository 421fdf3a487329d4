"""Space sharing: how candidate job pairs enter the allocation LP ([Narayanan] §5.3.1 "Space Sharing").

X gains one row per candidate pair k = (a, b) whose throughput on type j is a tuple (T^a[k,j], T^b[k,j]).
Job m's effective throughput sums its own row and every pair row in C_m (the pairs containing m):
τ_m(X) = Σ_j Σ_{k∈C_m} T^m[k,j]·X[k,j]; its time share Σ_{k∈C_m} Σ_j X[k,j] ≤ 1; and a pair counts
once, with its members' shared scale factor, against Σ_k sf_k·X[k,j] ≤ N_j.

Which pairs are candidates is the executor's choice (it owns the throughput estimator, §5.3.3); here a
candidate becomes LP columns only on types where both members have positive colocated throughput and
the pair fits, and only when both members have the same scale factor (Gavel's code forces a mixed
pair's allocation to 0). Every LP policy with ``space_sharing=True`` goes through `lp.build_layout`,
which adds these columns to the (5.2), (5.3) and τ maps as sparse entries.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from clustertwin.policies.gavel.problem import AllocationInput, PairCandidates


@dataclass(frozen=True)
class PairColumns:
    """The LP columns of the pair rows: pair index, type, members and their colocated throughputs."""

    pair: np.ndarray  # (c,) index into the candidate pairs
    col: np.ndarray  # (c,) accelerator type
    first: np.ndarray  # (c,) row index of member a
    second: np.ndarray  # (c,) row index of member b
    first_throughput: np.ndarray  # (c,) T^a on that type
    second_throughput: np.ndarray  # (c,) T^b on that type
    sf: np.ndarray  # (c,) the pair's shared scale factor

    def __len__(self) -> int:
        return int(self.pair.shape[0])


def pair_columns(
    members: np.ndarray, throughputs: np.ndarray, scale_factors: np.ndarray, num_workers: np.ndarray
) -> PairColumns:
    """Columns for every (pair, type) that can run: both members positive, equal sf, sf ≤ N_j."""
    a, b = members[:, 0], members[:, 1]
    sf = np.asarray(scale_factors, dtype=float)
    usable = (throughputs[:, :, 0] > 0) & (throughputs[:, :, 1] > 0)
    usable &= (sf[a] == sf[b])[:, None] & (sf[a][:, None] <= np.asarray(num_workers, dtype=float)[None, :])
    pair, col = np.nonzero(usable)
    return PairColumns(
        pair=pair,
        col=col,
        first=a[pair],
        second=b[pair],
        first_throughput=throughputs[pair, col, 0],
        second_throughput=throughputs[pair, col, 1],
        sf=sf[a[pair]],
    )


def active_pairs(inp: AllocationInput, space_sharing: bool) -> PairCandidates | None:
    """``inp.pairs`` when the policy space-shares and there is at least one candidate."""
    if space_sharing and inp.pairs is not None and len(inp.pairs):
        return inp.pairs
    return None


def relative_pair_throughputs(pairs: PairCandidates, throughputs: np.ndarray) -> np.ndarray:
    """Each member's colocated throughput divided by its throughput alone on the same type (0 where
    it cannot run alone): what a heterogeneity-agnostic policy knows about colocation."""
    alone = np.stack([throughputs[pairs.members[:, 0]], throughputs[pairs.members[:, 1]]], axis=2)
    return np.divide(pairs.throughputs, alone, out=np.zeros(alone.shape), where=alone > 0)
