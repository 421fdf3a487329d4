"""Statistical efficiency: how many iterations training needs to reach a target loss when reads are stale
([Harlap], §3.4.3, "Convergence Tests" and footnote 4; Fig. 3.7).

SSP's slack lets a worker compute iteration t on a model missing up to ``slack`` iterations of updates;
the thesis measures the cost as extra iterations to converge (MF: 112 under BSP, 113 under SSP, 114-115
under FlexRR; LDA: 41 under BSP, 42-44 under FlexRR), "a (modest) increase ... e.g., 2-3 extra
iterations". The model here is linear in the staleness a read sees:

    iterations_to_target(s) = ceil(N0 * (1 + c * s))

with ``N0`` the iterations at staleness 0 (BSP) and ``c`` the relative extra iterations per iteration of
staleness. Under the exact read rule our executors implement (a read at t sees exactly the updates of
iterations <= t - slack - 1, §3.2.2), the staleness of every read is the mode's slack, and
RapidReassignment does not change which updates a read sees: FlexRR needs what SSP of the same slack
needs. ``fit`` estimates (N0, c) from measured iterations at several slacks (least squares through the
measured N0).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ConvergenceModel:
    iterations: float  # N0: iterations to the target at staleness 0
    per_staleness: float = 0.0  # c: relative extra iterations per iteration of staleness

    def iterations_to_target(self, staleness: float) -> int:
        """Iterations to reach the target loss when every read is ``staleness`` iterations stale."""
        if staleness < 0:
            raise ValueError(f"staleness must be >= 0, got {staleness}")
        # round before ceil: a product like 100 * 1.01 must not become 102 by floating-point excess
        return math.ceil(round(self.iterations * (1.0 + self.per_staleness * staleness), 9))


def fit(measured: Mapping[int, float]) -> ConvergenceModel:
    """The model through measured iterations-to-target by slack (slack 0 required): ``N0`` is slack 0's
    count, ``c`` the least-squares slope of ``measured(s) / N0 - 1`` against ``s``."""
    if 0 not in measured:
        raise ValueError("fit needs the iterations measured at slack 0 (BSP)")
    n0 = float(measured[0])
    others = [(s, m / n0 - 1.0) for s, m in measured.items() if s > 0]
    sxx = sum(s * s for s, _ in others)
    slope = sum(s * r for s, r in others) / sxx if sxx else 0.0
    return ConvergenceModel(n0, max(0.0, slope))
