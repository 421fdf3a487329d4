"""Gandiva-style ad-hoc packing, the space-sharing baseline of [Narayanan] §5.7.

Gandiva packs jobs by trial and error rather than by modelling colocation: it pairs jobs at random, lets a
pair run, and keeps it only if packing paid off. The semantics follow the Gavel artifact's baseline:

1. If the jobs' scale factors add up to no more than the cluster's GPUs, nothing is packed: every job
   time-shares every type equally, ``N_j / (n·sf_m)``, each row divided by ``max(row sum, 1)``.
2. Otherwise a pair from the previous allocation stays while both jobs are active and its normalised packed
   throughput is at least ``threshold`` (1.0). That score is ``Σ_j Σ_side T_pair[j, side] / T[side, j]``
   summed over *all* worker types, and 0 if the pair cannot share some type at all; with several types
   summing makes the bar low, as in the artifact.
3. Every other job goes into a pool that is paired at random: as many draws as the pool had jobs, each
   picking two distinct unpaired jobs and pairing them when their scale factors match and they are a
   candidate in ``inp.pairs`` (the only pairs whose shared throughput is known); a failed draw is spent.
4. The combinations — pairs and the jobs left single — time-share the cluster equally as in 1, with their
   count C in place of n.

A fresh pair thus runs for one allocation period before its measured throughput decides whether it stays:
Gandiva's introspective explore-and-revert. The artifact keeps the pairing in the policy object; here it is
read back from ``inp.previous``, so a pairing is forgotten across a period in which everything fit.
Time on a type where a job (or pair) cannot run is withheld so the round mechanism never spends a slot there.
"""

from __future__ import annotations

import numpy as np
from clustertwin.policies.gavel.isolated import isolated_fractions
from clustertwin.policies.gavel.problem import Allocation, AllocationInput
from clustertwin.policies.registry import register


def packed_scores(inp: AllocationInput) -> np.ndarray:
    """Each candidate pair's normalised packed throughput, summed over types; 0 if some type can't host it."""
    assert inp.pairs is not None
    members = np.asarray(inp.pairs.members)
    shared = np.asarray(inp.pairs.throughputs, dtype=float)  # (p, k, 2)
    alone = np.stack([inp.throughputs[members[:, side]] for side in (0, 1)], axis=2)
    ratio = np.divide(shared, alone, out=np.zeros_like(shared), where=alone > 0)
    return np.where((shared > 0).all(axis=(1, 2)), ratio.sum(axis=(1, 2)), 0.0)


@register("gandiva")
class GandivaPolicy:
    """Random pairing kept only while it helps; everything else time-shares equally."""

    name = "gandiva"

    def __init__(self, threshold: float = 1.0) -> None:
        self.threshold = threshold

    def allocate(self, inp: AllocationInput, rng: np.random.Generator) -> Allocation:
        sf = np.asarray(inp.scale_factors)
        pairs = inp.pairs if inp.pairs is not None and len(inp.pairs) else None
        pair_members = None if pairs is None else np.asarray(inp.job_ids)[pairs.members]
        pair_fractions = None if pairs is None else np.zeros((len(pairs), inp.k))
        if pairs is None or sf.sum() <= np.sum(inp.num_workers):
            fractions = isolated_fractions(inp.num_workers, sf)
            return Allocation(
                inp.job_ids,
                inp.worker_types,
                np.where(inp.throughputs > 0, fractions, 0.0),
                pair_members,
                pair_fractions,
            )

        members = np.asarray(pairs.members)
        candidate = {(int(min(a, b)), int(max(a, b))): p for p, (a, b) in enumerate(members)}
        chosen, paired = self._kept_pairs(inp, candidate, packed_scores(inp))
        pool = [int(m) for m in np.flatnonzero(~paired)]
        for _ in range(len(pool)):
            if len(pool) < 2:
                break
            i, j = rng.choice(len(pool), size=2, replace=False)
            a, b = pool[i], pool[j]
            p = candidate.get((min(a, b), max(a, b)))
            if p is None or sf[a] != sf[b]:
                continue
            chosen.append(p)
            pool.remove(a)
            pool.remove(b)

        count = len(chosen) + len(pool)
        fractions = np.zeros((inp.n, inp.k))
        fractions[pool] = isolated_fractions(inp.num_workers, sf[pool], count)
        fractions = np.where(inp.throughputs > 0, fractions, 0.0)
        assert pair_fractions is not None
        pair_fractions[chosen] = isolated_fractions(inp.num_workers, sf[members[chosen, 0]], count)
        pair_fractions *= (np.asarray(pairs.throughputs) > 0).all(axis=2)
        return Allocation(inp.job_ids, inp.worker_types, fractions, pair_members, pair_fractions)

    def _kept_pairs(
        self, inp: AllocationInput, candidate: dict[tuple[int, int], int], scores: np.ndarray
    ) -> tuple[list[int], np.ndarray]:
        """Pairs of the previous allocation that are still active and whose packing paid off."""
        chosen: list[int] = []
        paired = np.zeros(inp.n, dtype=bool)
        previous = inp.previous
        if previous is None or previous.pair_members is None or previous.pair_fractions is None:
            return chosen, paired
        row = {int(job): i for i, job in enumerate(inp.job_ids)}
        for (a, b), x in zip(previous.pair_members, previous.pair_fractions, strict=True):
            ra, rb = row.get(int(a)), row.get(int(b))
            if x.sum() <= 0 or ra is None or rb is None or paired[ra] or paired[rb]:
                continue
            p = candidate.get((min(ra, rb), max(ra, rb)))
            if p is not None and scores[p] >= self.threshold:
                chosen.append(p)
                paired[[ra, rb]] = True
        return chosen, paired
