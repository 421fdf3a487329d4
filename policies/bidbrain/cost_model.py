"""BidBrain's expected cost, expected work and cost per work (Proteus §4.1, Eqs. 1–4; [Proteus]).

Notation (paper's Table 2): β_i eviction probability of allocation i within its billing hour; φ scaling
efficiency; σ no-progress time after adding/removing resources; λ no-progress time after an eviction;
ν_i work per unit time of one instance (vCPUs in the paper); ω_i compute time left in i's billing hour.

* Eq. 1  ``C_A[x_i] = (1 − β_i)·P_i·k_i·t_r + β_i·0·k_i·t_r`` — an evicted hour is refunded, so it costs 0.
* Eq. 2  ``Δt_i = ω_i − p_ev·λ − σ`` with ``p_ev = 1 − Π_j (1 − β_j)``; σ only when resources change.
* Eq. 3  ``W_A = φ·Σ_i k_i·Δt_i·ν_i``.
* Eq. 4  ``E_A = C_A / W_A``.

Units here: seconds and $/h (so P_i/3600 is $/s). ω_i is shortened by the median time-to-eviction
when eviction is likely; the paper says only "reduces ω_i accordingly", so we use the expectation
``ω_i = β_i·min(t_r, TTE_i) + (1 − β_i)·t_r`` (one of the two readings in notes/003 §2.5). Δt_i is
clamped at 0: negative useful time is not negative work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from clustertwin.policies.bidbrain.history import Market

HOUR_S = 3600.0


@dataclass(frozen=True)
class Allocation:
    """Instances of one type acquired at the same time and price: the unit of acquisition and eviction.

    ``price`` is what this billing hour costs per instance ($/h): the spot price at the hour's start,
    or the on-demand price. ``bid`` is fixed once granted (2016 EC2 rules); inf for on-demand.
    """

    alloc_id: int
    market: Market
    count: int
    bid: float
    price: float
    hour_start_s: float
    work_rate: float
    on_demand: bool = False
    does_work: bool = True

    def remaining_s(self, now: float) -> float:
        """Seconds left in the current billing hour (t_r, and ω before eviction shortening)."""
        left = (now - self.hour_start_s) % HOUR_S
        return HOUR_S - left


@dataclass(frozen=True)
class Outlook:
    """The eviction outlook of one allocation right now: its β and median time-to-eviction."""

    beta: float
    tte_s: float


@dataclass(frozen=True)
class CostParams:
    """φ, σ, λ. The paper sets them "empirically" and gives no values; defaults are ours (documented)."""

    phi: float = 1.0
    sigma_s: float = 60.0
    lambda_s: float = 120.0


def expected_cost(allocs: Sequence[Allocation], outlooks: Sequence[Outlook], now: float) -> float:
    """Eq. 1 summed over the footprint, in $ over each allocation's remaining billing hour."""
    return float(
        sum(
            (1.0 - o.beta) * (a.price / HOUR_S) * a.count * a.remaining_s(now)
            for a, o in zip(allocs, outlooks, strict=True)
        )
    )


def expected_work(
    allocs: Sequence[Allocation],
    outlooks: Sequence[Outlook],
    now: float,
    params: CostParams,
    changing: bool,
) -> float:
    """Eqs. 2–3: φ·Σ k_i·max(ω_i − p_ev·λ − σ, 0)·ν_i, in work-rate·seconds."""
    survive = float(np.prod([1.0 - o.beta for o in outlooks])) if outlooks else 1.0
    p_ev = 1.0 - survive
    total = 0.0
    for a, o in zip(allocs, outlooks, strict=True):
        if not a.does_work:
            continue
        t_r = a.remaining_s(now)
        omega = o.beta * min(t_r, o.tte_s) + (1.0 - o.beta) * t_r
        dt = omega - p_ev * params.lambda_s - (params.sigma_s if changing else 0.0)
        total += a.count * max(dt, 0.0) * a.work_rate
    return params.phi * total


def cost_per_work(
    allocs: Sequence[Allocation],
    outlooks: Sequence[Outlook],
    now: float,
    params: CostParams,
    changing: bool,
) -> float:
    """Eq. 4, E_A = C_A / W_A; inf when the footprint is expected to do no work."""
    work = expected_work(allocs, outlooks, now, params, changing)
    if work <= 0:
        return float("inf")
    return expected_cost(allocs, outlooks, now) / work


def candidates_cost_per_work(
    allocs: Sequence[Allocation],
    outlooks: Sequence[Outlook],
    now: float,
    params: CostParams,
    cand_price: np.ndarray,
    cand_count: np.ndarray,
    cand_rate: np.ndarray,
    cand_beta: np.ndarray,
    cand_tte: np.ndarray,
) -> np.ndarray:
    """E_A of ``footprint ∪ {candidate c}`` for every candidate c at once (``changing=True``).

    Same arithmetic as :func:`cost_per_work` (tests check they agree), vectorised because BidBrain
    scores markets × deltas × counts candidates at every 2-minute decision point. A candidate is a new
    allocation, so its t_r is a full hour.
    """
    beta = np.array([o.beta for o in outlooks], dtype=float)
    tte = np.array([o.tte_s for o in outlooks], dtype=float)
    t_r = np.array([a.remaining_s(now) for a in allocs], dtype=float)
    k = np.array([a.count for a in allocs], dtype=float)
    nu = np.array([a.work_rate if a.does_work else 0.0 for a in allocs], dtype=float)
    price = np.array([a.price for a in allocs], dtype=float)
    base_cost = float(np.sum((1.0 - beta) * price / HOUR_S * k * t_r))
    survive = float(np.prod(1.0 - beta)) if len(beta) else 1.0
    p_ev = 1.0 - survive * (1.0 - cand_beta)  # per candidate
    omega = beta * np.minimum(t_r, tte) + (1.0 - beta) * t_r  # per existing allocation
    dt = omega[None, :] - p_ev[:, None] * params.lambda_s - params.sigma_s
    work_existing = np.sum(k * nu * np.maximum(dt, 0.0), axis=1)
    c_omega = cand_beta * np.minimum(HOUR_S, cand_tte) + (1.0 - cand_beta) * HOUR_S
    c_dt = np.maximum(c_omega - p_ev * params.lambda_s - params.sigma_s, 0.0)
    work = params.phi * (work_existing + cand_count * c_dt * cand_rate)
    cost = base_cost + (1.0 - cand_beta) * cand_price / HOUR_S * cand_count * HOUR_S
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(work > 0, cost / np.where(work > 0, work, 1.0), np.inf)
