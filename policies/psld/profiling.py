"""PS performance profiling ([PSLD], §4.1): Pred(r, s) = alpha_r * s + beta_r with confidence bounds.

Workers time each block's round trip with each PS (push issue to pull completion of that block, size s)
and report (server, bytes, seconds) samples. ``alpha_r`` is the per-byte transmission time and ``beta_r``
the latency term (update and ACK time). Following [PSLD] §4.1 (what gets profiled),
we fit one least-squares line per (server, worker) and take the mean over workers of the per-worker
predictions as Pred_mean(r, s) and their standard error of the mean as Pred_SEM(r, s). The bounds of
Algorithm 1 are Pred_mean -/+ z * Pred_SEM with z = 1.645 (footnote 4, a two-sided 90% interval).

A (server, worker) pair whose samples all have one size cannot separate alpha from beta; it is fitted through
the origin (beta = 0), i.e. all of its time is charged per byte. So is a pair whose least-squares slope comes
out negative (ours; the paper does not say): its samples show no per-byte cost above their noise, typically a
PS holding only a few small exploration blocks, whose times are all latency. Reading that as alpha = 0 would
extrapolate the small blocks' time to any load, and on the GPU testbed it made the scheduler pick the 1 Gbit/s
PS as the only superior PS and move the whole model onto it (docs/algorithms/psld.md, "Modelling choices"). No
link moves bytes for free, so the line through the origin, which charges the time per byte and overestimates
the PS's time at a larger load, is the conservative reading; exploration keeps sending the PS blocks, and
larger ones restore a proper fit.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

Z_90 = 1.645


@dataclass(frozen=True)
class Sample:
    """One timed block transfer: ``seconds`` for ``nbytes`` between ``worker`` and ``server``."""

    worker: int
    server: int
    nbytes: float
    seconds: float


@dataclass(frozen=True)
class ServerModel:
    """Per-worker fitted lines of one PS: Pred_w(s) = alphas[w] * s + betas[w]."""

    alphas: tuple[float, ...]
    betas: tuple[float, ...]

    def mean(self, s: float) -> float:
        return float(np.mean(np.asarray(self.alphas) * s + np.asarray(self.betas)))

    def sem(self, s: float) -> float:
        n = len(self.alphas)
        if n < 2:
            return 0.0
        preds = np.asarray(self.alphas) * s + np.asarray(self.betas)
        return float(np.std(preds, ddof=1) / np.sqrt(n))

    def lower(self, s: float, z: float = Z_90) -> float:
        return self.mean(s) - z * self.sem(s)

    def upper(self, s: float, z: float = Z_90) -> float:
        return self.mean(s) + z * self.sem(s)

    @staticmethod
    def average(models: Iterable[ServerModel]) -> ServerModel:
        """The model of a PS nobody has measured yet: the mean line of ``models`` (§5.1 step 2), keeping
        one line per position so the SEM is the mean models' spread."""
        ms = list(models)
        if not ms:
            raise ValueError("cannot average zero server models")
        width = min(len(m.alphas) for m in ms)
        alphas = tuple(float(np.mean([m.alphas[i] for m in ms])) for i in range(width))
        betas = tuple(float(np.mean([m.betas[i] for m in ms])) for i in range(width))
        return ServerModel(alphas, betas)


PerfModel = Mapping[int, ServerModel]


def fit_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares (alpha, beta) of y = alpha x + beta; through the origin when x has one value."""
    if len(x) == 0:
        raise ValueError("cannot fit a line to zero samples")
    xm = float(x.mean())
    sxx = float(((x - xm) ** 2).sum())
    if sxx <= 1e-12 * max(1.0, xm * xm) * len(x):
        alpha = float(y.mean() / xm) if xm > 0 else 0.0
        return max(alpha, 0.0), 0.0 if xm > 0 else float(y.mean())
    alpha = float(((x - xm) * (y - y.mean())).sum() / sxx)
    beta = float(y.mean() - alpha * xm)
    if alpha < 0.0 or beta < 0.0:  # no visible per-byte cost, or negative latency: through the origin
        return float((x * y).sum() / (x * x).sum()), 0.0
    return alpha, beta


def fit_model(samples: Iterable[Sample]) -> dict[int, ServerModel]:
    """One ``ServerModel`` per server that has samples (per-worker lines, workers in id order)."""
    groups: dict[int, dict[int, tuple[list[float], list[float]]]] = defaultdict(dict)
    for s in samples:
        xs, ys = groups[s.server].setdefault(s.worker, ([], []))
        xs.append(s.nbytes)
        ys.append(s.seconds)
    out: dict[int, ServerModel] = {}
    for server, per_worker in groups.items():
        lines = [fit_line(np.asarray(xs), np.asarray(ys)) for _, (xs, ys) in sorted(per_worker.items())]
        out[server] = ServerModel(tuple(a for a, _ in lines), tuple(b for _, b in lines))
    return out
