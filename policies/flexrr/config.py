"""RapidReassignment's tunables, with the paper's defaults ([Harlap], Table 3.1 and §3.3.3)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RRConfig:
    """Parameters of RapidReassignment; the defaults are Table 3.1's (and the 75% checkpoint of §3.3.3).

    ``helper_group_size = 0`` or ``follow_up_fraction = 0`` turns RapidReassignment off (§3.4.6: "zero
    helpers, which is equivalent to running in SSP mode").
    """

    helper_group_size: int = 4  # Table 3.1: range 2-16, default 4
    initial_fraction: float = 0.025  # Table 3.1: first do-this, fraction of the helpee's iteration
    follow_up_fraction: float = 0.05  # Table 3.1: each further do-this (the paper keeps it 2x initial)
    trigger: float = 0.20  # Table 3.1: straggler trigger threshold, fraction of an iteration
    progress_checkpoint: float = 0.75  # §3.3.3: a progress-report is sent at 75% of an iteration
    message_checks: int = 100  # Table 3.1: message checks per iteration
    # §3.4.5: helpers cache only this tail fraction of a helpee's items; work is carved from the tail, so
    # a range may be handed out only inside the cached tail.
    replication: float = 1.0
    # Weight of the newest iteration in the "weighted average" iteration time of Algorithm 1 (line 2);
    # the paper does not give it [interp]: an EWMA.
    avg_weight: float = 0.5

    def __post_init__(self) -> None:
        if self.helper_group_size < 0:
            raise ValueError(f"helper_group_size must be >= 0, got {self.helper_group_size}")
        for name in ("initial_fraction", "follow_up_fraction", "trigger", "replication", "avg_weight"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1], got {value}")
        if not 0.0 < self.progress_checkpoint <= 1.0:
            raise ValueError(f"progress_checkpoint must lie in (0, 1], got {self.progress_checkpoint}")
        if self.message_checks < 1:
            raise ValueError(f"message_checks must be >= 1, got {self.message_checks}")

    @property
    def enabled(self) -> bool:
        """Whether any work can be reassigned at all."""
        return self.helper_group_size > 0 and self.initial_fraction > 0 and self.follow_up_fraction > 0
