"""Gavel's throughput estimator for colocated jobs ([Narayanan] §5.3.3, §5.6, Fig 5.8; evaluated in Fig 5.16).

Single-job throughputs need no estimator: they are measured as a job runs. What a new job's *pairings*
will do is estimated Quasar-style. The reference matrix holds pre-profiled reference job types as rows;
its columns are (worker type × partner reference type), worker type major, and an entry is the row job's
normalised throughput when it shares that worker type with that partner (``pair / isolated`` ∈ [0, 1]).
A new job is profiled against a few partners on dedicated workers (``profiling_plan``), which gives a
partial row. Matrix completion fills the rest of the row — its "fingerprint" — and the closest reference
row by cosine distance names the reference job whose measured row becomes the new job's initial estimate.

Following the Gavel artifact: completion is probabilistic matrix factorisation of rank k = 10 with
regularisation μ = 1e-2 over the reference rows plus the partial row; filled entries are clipped to
[0, 1] and measured entries kept as measured; when the fingerprint is all zeros (nothing was measured, or
nothing useful) a reference is drawn at random. The factorisation here is alternating least squares from
a random start drawn from ``rng``, so an estimate is deterministic given the generator.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Estimate(NamedTuple):
    """The estimator's answer for one new job."""

    row: np.ndarray  # the nearest reference's row: the initial estimate, as in Gavel
    nearest: int  # index of that reference row
    completed: np.ndarray  # the partial row with its gaps filled by matrix completion


def complete_matrix(
    matrix: np.ndarray,
    rank: int,
    regularisation: float,
    rng: np.random.Generator,
    max_iterations: int = 100,
    tolerance: float = 1e-5,
) -> np.ndarray:
    """PMF by alternating least squares: ``min Σ_observed (A − UVᵀ)² + μ(‖U‖² + ‖V‖²)``; NaN = unobserved.

    Each half-step solves one ridge regression per row (or column) in a batch; it stops when the objective
    improves by less than ``tolerance`` relative, and returns the dense product ``UVᵀ``.
    """
    observed = ~np.isnan(matrix)
    values = np.where(observed, matrix, 0.0)
    weight = observed.astype(float)
    ridge = regularisation * np.eye(rank)

    def fit(weights: np.ndarray, targets: np.ndarray, factors: np.ndarray) -> np.ndarray:
        gram = (factors.T[None, :, :] * weights[:, None, :]) @ factors + ridge
        rhs = (weights * targets) @ factors
        return np.linalg.solve(gram, rhs[:, :, None])[:, :, 0]

    # Only V needs a random start, at the data's magnitude so that UVᵀ starts on the entries' scale.
    scale = np.sqrt(max(float(values.sum() / max(weight.sum(), 1.0)), 1e-3) / rank)
    v = rng.standard_normal((matrix.shape[1], rank)) * scale
    u = fit(weight, values, v)
    previous = np.inf
    for _ in range(max_iterations):
        v = fit(weight.T, values.T, u)
        u = fit(weight, values, v)
        residual = weight * (values - u @ v.T)
        objective = float((residual**2).sum() + regularisation * ((u**2).sum() + (v**2).sum()))
        if previous - objective <= tolerance * max(objective, 1e-12):
            break
        previous = objective
    return u @ v.T


def cosine_distances(rows: np.ndarray, row: np.ndarray) -> np.ndarray:
    """``1 − cos`` between ``row`` and each of ``rows``; a zero row is at distance 1 from everything."""
    norms = np.linalg.norm(rows, axis=1) * np.linalg.norm(row)
    dots = rows @ row
    return 1.0 - np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)


class ThroughputEstimator:
    """Fingerprint a new job against pre-profiled reference jobs (§5.3.3)."""

    def __init__(self, reference: np.ndarray, rank: int = 10, regularisation: float = 1e-2) -> None:
        reference = np.asarray(reference, dtype=float)
        if reference.ndim != 2 or reference.shape[0] == 0:
            raise ValueError("the reference matrix must be 2-D with at least one row")
        self.reference = reference
        self.rank = rank
        self.regularisation = regularisation

    def profiling_plan(self, fraction: float, rng: np.random.Generator) -> np.ndarray:
        """Which (worker type, partner) entries to profile a new job on: each with probability ``fraction``.

        The caller measures those pairings and passes them to ``estimate`` (Gavel's profiling percentage).
        """
        return rng.random(self.reference.shape[1]) < fraction

    def estimate(self, partial_row: np.ndarray, rng: np.random.Generator) -> Estimate:
        """Complete ``partial_row`` (NaN = not measured) and return the nearest reference row."""
        partial_row = np.asarray(partial_row, dtype=float)
        if partial_row.shape != (self.reference.shape[1],):
            raise ValueError(
                f"partial row must have {self.reference.shape[1]} entries, got {partial_row.shape}"
            )
        stacked = np.vstack([self.reference, partial_row])
        filled = stacked
        if np.isnan(stacked).any():
            product = np.clip(complete_matrix(stacked, self.rank, self.regularisation, rng), 0.0, 1.0)
            filled = np.where(np.isnan(stacked), product, stacked)
        references, completed = filled[:-1], filled[-1]
        if not np.any(completed):
            nearest = int(rng.integers(references.shape[0]))
        else:
            nearest = int(np.argmin(cosine_distances(references, completed)))
        return Estimate(references[nearest].copy(), nearest, completed)
