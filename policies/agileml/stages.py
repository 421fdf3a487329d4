"""AgileML's stage choice (Proteus §3.2–3.3; [Proteus]): by the transient:reliable ratio r = T / R.

* stage 1 (r ≤ 1): ParamServs only on reliable machines, workers everywhere;
* stage 2 (1 < r ≤ 15): ActivePSs on transient machines, BackupPSs on reliable ones, workers everywhere;
* stage 3 (r > 15): as stage 2, but no workers on reliable machines (they would straggle behind the
  BackupPS traffic).

The thresholds are the paper's (1:1 and 15:1); it reports low sensitivity to them, so they are
parameters. With no reliable machine the job has nowhere to keep state: that is not a stage (None).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StageThresholds:
    """Ratios above which stage 2 and stage 3 are used."""

    stage2_above: float = 1.0
    stage3_above: float = 15.0


def choose_stage(
    n_reliable: int, n_transient: int, thresholds: StageThresholds = StageThresholds()
) -> int | None:
    """1, 2 or 3; None when there is no reliable machine (AgileML needs one for its state)."""
    if n_reliable <= 0:
        return None
    ratio = n_transient / n_reliable
    if ratio > thresholds.stage3_above:
        return 3
    if ratio > thresholds.stage2_above:
        return 2
    return 1


def workers_on_reliable(stage: int) -> bool:
    """Whether reliable machines run workers in ``stage`` (not in stage 3)."""
    return stage != 3


def has_active_ps(stage: int | None) -> bool:
    """Whether ``stage`` runs ActivePSs on transient machines (stages 2 and 3; in stage 1 the BackupPSs on
    the reliable machines serve as ParamServs and transient machines hold no state)."""
    return stage in (2, 3)
