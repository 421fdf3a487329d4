"""The straggler trigger ([PSLD], §2.3 and §4): PS speed and speed variation.

Speed of a PS = parameter bytes it handles / its communication time; speed variation = (best - worst) /
worst; PSLD recomputes the assignment when the variation exceeds 1 (the best PS is more than twice as fast
as the worst). With ``metric="paper"`` the speed is the PS's current load over its predicted time for
that load (§2.3's definition; PSs without load are left out). Because beta dominates for a lightly loaded
PS, this also fires after a recovered straggler has been left with a few exploration blocks, which is
how the recovery leads to a second reassignment. ``metric="reference"`` evaluates every PS at the common
reference load s_ref (the notes' de-biased alternative).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from clustertwin.policies.psld.profiling import PerfModel


def server_speeds(
    model: PerfModel, servers: Sequence[int], loads: Mapping[int, float], s_ref: float, metric: str = "paper"
) -> dict[int, float]:
    """Bytes per second of each server with a model (and, for ``paper``, with load)."""
    out: dict[int, float] = {}
    for r in servers:
        if r not in model:
            continue
        s = s_ref if metric == "reference" else loads.get(r, 0.0)
        if s <= 0:
            continue
        t = model[r].mean(s)
        out[r] = s / t if t > 0 else float("inf")
    return out


def speed_variation(speeds: Mapping[int, float]) -> float:
    """(Speed_best - Speed_worst) / Speed_worst; 0 with fewer than two servers."""
    if len(speeds) < 2:
        return 0.0
    best, worst = max(speeds.values()), min(speeds.values())
    if worst <= 0:
        return float("inf")
    return (best - worst) / worst
