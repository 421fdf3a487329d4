"""Gavel's colocation throughput estimator: PMF completion + cosine nearest reference ([Narayanan] §5.3.3)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest
from clustertwin.policies.gavel.estimator import ThroughputEstimator, complete_matrix, cosine_distances

# The bundled copy of Gavel's simulation throughputs, read directly so this test depends on no loader.
TABLE = Path(__file__).resolve().parents[1] / "traces" / "data" / "gavel" / "simulation_throughputs.json"


def _low_rank(seed: int, references: int = 25, columns: int = 78, noise: float = 0.05):
    """References and a held-out row from rank-3 factors; the held-out job is a perturbed reference."""
    rng = np.random.default_rng(seed)
    u = rng.standard_normal((references + 1, 3))
    v = rng.standard_normal((columns, 3))
    u[-1] = u[seed % references] + noise * rng.standard_normal(3)
    full = u @ v.T
    full = (full - full.min()) / (full.max() - full.min())  # normalised throughputs live in [0, 1]
    return full[:-1], full[-1]


@pytest.mark.parametrize("seed", range(10))
def test_nearest_reference_matches_the_true_rows_closest(seed: int) -> None:
    reference, truth = _low_rank(seed)
    rng = np.random.default_rng(1000 + seed)
    estimator = ThroughputEstimator(reference)
    measured = estimator.profiling_plan(0.3, rng)
    estimate = estimator.estimate(np.where(measured, truth, np.nan), rng)
    assert estimate.nearest == int(np.argmin(cosine_distances(reference, truth)))
    np.testing.assert_array_equal(estimate.row, reference[estimate.nearest])


def test_completion_error_falls_as_more_is_measured() -> None:
    errors = {fraction: [] for fraction in (0.1, 0.3, 0.7)}
    for seed in range(8):
        reference, truth = _low_rank(seed)
        estimator = ThroughputEstimator(reference)
        for fraction, bucket in errors.items():
            rng = np.random.default_rng(seed)
            measured = estimator.profiling_plan(fraction, rng)
            completed = estimator.estimate(np.where(measured, truth, np.nan), rng).completed
            bucket.append(np.sqrt(np.mean((completed - truth)[~measured] ** 2)))
    means = [np.mean(bucket) for bucket in errors.values()]
    assert means[0] > means[1] > means[2]
    assert means[1] < 0.02  # 30% measured already pins a rank-3 row down


def test_measured_entries_are_kept_and_gaps_are_clipped() -> None:
    reference, truth = _low_rank(3)
    rng = np.random.default_rng(0)
    estimator = ThroughputEstimator(reference)
    measured = estimator.profiling_plan(0.3, rng)
    partial = np.where(measured, truth, np.nan)
    completed = estimator.estimate(partial, rng).completed
    np.testing.assert_array_equal(completed[measured], truth[measured])
    assert np.isfinite(completed).all() and completed.min() >= 0.0 and completed.max() <= 1.0


def test_deterministic_given_the_generator() -> None:
    reference, truth = _low_rank(4)
    partial = np.where(np.random.default_rng(9).random(truth.size) < 0.3, truth, np.nan)
    estimator = ThroughputEstimator(reference)
    a = estimator.estimate(partial, np.random.default_rng(5))
    b = estimator.estimate(partial, np.random.default_rng(5))
    assert a.nearest == b.nearest
    np.testing.assert_array_equal(a.completed, b.completed)


def test_nothing_measured_falls_back_to_a_random_reference() -> None:
    reference, truth = _low_rank(2)
    estimator = ThroughputEstimator(reference)
    picks = {
        estimator.estimate(np.full(truth.size, np.nan), np.random.default_rng(s)).nearest for s in range(12)
    }
    assert len(picks) > 1 and all(0 <= p < reference.shape[0] for p in picks)


def test_nearest_is_by_direction_not_magnitude() -> None:
    reference = np.array([[0.9, 0.9, 0.1, 0.1], [0.3, 0.3, 0.3, 0.3]])
    estimate = ThroughputEstimator(reference).estimate(0.3 * reference[0], np.random.default_rng(0))
    assert estimate.nearest == 0  # a slower copy of reference 0, though closer to reference 1 in L1


def test_completion_recovers_a_fully_low_rank_matrix() -> None:
    rng = np.random.default_rng(0)
    full = rng.random((30, 4)) @ rng.random((4, 40)) / 4
    holes = np.where(rng.random(full.shape) < 0.3, np.nan, full)
    recovered = complete_matrix(holes, rank=10, regularisation=1e-2, rng=rng)
    assert np.sqrt(np.mean((recovered - full)[np.isnan(holes)] ** 2)) < 0.02


def test_partial_row_must_match_the_reference_width() -> None:
    with pytest.raises(ValueError, match="entries"):
        ThroughputEstimator(np.ones((3, 6))).estimate(np.ones(5), np.random.default_rng(0))


def _gavel_table() -> np.ndarray:
    """Normalised colocated throughputs of the 26 single-GPU job types: rows × (type-major, partner)."""
    table = json.loads(TABLE.read_text())
    types = ("k80", "p100", "v100")
    jobs = [key for key in table["v100"] if ast.literal_eval(key)[1] == 1]
    matrix = np.zeros((len(jobs), len(types) * len(jobs)))
    for i, job in enumerate(jobs):
        for t, worker_type in enumerate(types):
            entry = table[worker_type][job]
            matrix[i, t * len(jobs) : (t + 1) * len(jobs)] = [entry[p][0] / entry["null"] for p in jobs]
    return matrix


@pytest.mark.skipif(not TABLE.exists(), reason="Gavel throughput table not available")
def test_leave_one_out_on_gavels_table_beats_a_random_reference() -> None:
    matrix = _gavel_table()
    n = matrix.shape[0]
    wins = 0
    for held in range(n):
        keep = np.delete(np.arange(n), held)
        columns = (np.arange(3)[:, None] * n + keep[None, :]).ravel()
        reference, truth = matrix[np.ix_(keep, columns)], matrix[held, columns]
        rng = np.random.default_rng(held)
        estimator = ThroughputEstimator(reference)
        measured = estimator.profiling_plan(0.3, rng)
        estimate = estimator.estimate(np.where(measured, truth, np.nan), rng)
        random_pick = np.abs(reference - truth).mean(axis=1).mean()
        wins += np.abs(estimate.row - truth).mean() < random_pick
    assert wins >= 0.8 * n
