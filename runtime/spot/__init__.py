"""AgileML (Proteus, [Proteus]) on real processes: an elastic parameter-server MLR job over a c10d store,
with reliable and transient processes, real evictions (warning, then SIGKILL), end-of-life flush and
partition migration or online roll-back, and the checkpoint/restart baseline. Entry: :func:`run_real`
(the ``real:`` section of a ``kind: spot`` scenario; ``analysis.spot_prediction`` adds the simulator's
prediction of the same schedule).
"""

from __future__ import annotations

from typing import Any


def run_real(*args: Any, **kwargs: Any):
    """See :func:`runtime.spot.run.run_real` (imported lazily: torch loads only when a run starts)."""
    from clustertwin.runtime.spot.run import run_real as _run_real

    return _run_real(*args, **kwargs)


def run_market_real(*args: Any, **kwargs: Any):
    """See :func:`runtime.spot.run.run_market_real` (a market-driven run: the acquisition policy decides)."""
    from clustertwin.runtime.spot.run import run_market_real as _run

    return _run(*args, **kwargs)


__all__ = ["run_market_real", "run_real"]
