"""The FlexRR scenario (seed 000, ch. 3): cluster, consistency mode, straggler model, RR parameters.

Loaded by ``scenarios.load.load_scenario`` like every scenario kind.
"""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from scenarios.schema import ScenarioBase, _Strict

Mode = Literal["bsp", "ssp", "bsp_rr", "flexrr"]
# slack and RapidReassignment of each mode (§3.4.1, "Systems Compared"; SSP's slack is 1)
MODE_SLACK: dict[str, int] = {"bsp": 0, "ssp": 1, "bsp_rr": 0, "flexrr": 1}
MODE_RR: dict[str, bool] = {"bsp": False, "ssp": False, "bsp_rr": True, "flexrr": True}


class FlexRRCluster(_Strict):
    """Machines of equal size, one worker per core (§3.2: "a worker thread for each core")."""

    machines: PositiveInt = 16
    workers_per_machine: PositiveInt = 8

    @property
    def workers(self) -> int:
        return self.machines * self.workers_per_machine


class RapidReassignment(_Strict):
    """Table 3.1's parameters (defaults are the paper's)."""

    helper_group_size: NonNegativeInt = 4
    initial_fraction: float = Field(0.025, ge=0.0, le=1.0)
    follow_up_fraction: float = Field(0.05, ge=0.0, le=1.0)
    trigger: float = Field(0.20, ge=0.0, le=1.0)
    progress_checkpoint: float = Field(0.75, gt=0.0, le=1.0)
    message_checks: PositiveInt = 100
    replication: float = Field(1.0, ge=0.0, le=1.0)
    avg_weight: float = Field(0.5, ge=0.0, le=1.0)


class Stragglers(_Strict):
    """Which straggler pattern of §3.4.1 is injected, and its knobs.

    * ``slow_worker``: ``delay`` (1.0 = 100%), ``probability`` per delay point, ``points_per_iteration``,
      ``max_duration`` (iterations of undelayed work).
    * ``disrupted_machine``: ``delay``, ``probability`` per machine per ``period_s``.
    * ``power_law``: ``alpha``.
    * ``uneven``: ``heavy_share`` of the items on the first half of the machines.
    * ``trace``: Alibaba PAI per-worker minibatch times (``trace_jobs``), cycled over the workers.
    """

    model: Literal["none", "slow_worker", "disrupted_machine", "power_law", "uneven", "trace"] = "none"
    delay: NonNegativeFloat = 0.0
    # per delay point (slow_worker, paper 1%) or per machine and period (disrupted_machine, paper 20%);
    # None: the paper's value for the model
    probability: float | None = Field(None, ge=0.0, le=1.0)
    points_per_iteration: PositiveInt = 10
    max_duration: NonNegativeFloat = 2.0
    period_s: PositiveFloat = 20.0
    alpha: float = Field(11.0, gt=2.0)
    heavy_share: float = Field(0.75, gt=0.0, lt=1.0)
    # which half of the machines is heavy (the paper does not say): machines 0..M/2-1, or the even ones
    heavy_machines: Literal["first_half", "alternate"] = "first_half"
    trace_jobs: list[Literal[1, 2, 3, 4]] = Field(default_factory=lambda: [1, 2, 3, 4])


class FlexRRScenario(ScenarioBase):
    """One data-parallel training job under a straggler pattern, in one FlexRR mode."""

    kind: Literal["flexrr"]
    cluster: FlexRRCluster = FlexRRCluster()
    mode: Mode = "flexrr"
    slack: NonNegativeInt | None = None  # None: the mode's (0 for BSP and BSP RR, 1 otherwise)
    iterations: PositiveInt = 20  # §3.4.3: "Each experiment ran for 20 iterations"
    items_per_worker: PositiveInt = 1000
    iteration_s: PositiveFloat = 6.0  # undelayed iteration time; §3.4.1's example is 6 s
    latency_s: NonNegativeFloat = 0.001  # one-way control message latency
    latency_jitter_s: NonNegativeFloat = 0.0  # plus an exponential delay of this mean
    ps_sync_s: NonNegativeFloat = 0.0  # extra delay before the SSP gate opens after an iteration
    rr: RapidReassignment = RapidReassignment()
    stragglers: Stragglers = Stragglers()
    record_messages: bool = True

    @model_validator(mode="after")
    def _consistent(self) -> FlexRRScenario:
        if self.items_per_worker < self.rr.message_checks:
            raise ValueError(
                f"items_per_worker={self.items_per_worker} must be >= rr.message_checks="
                f"{self.rr.message_checks} (a message check needs at least one item between checks)"
            )
        if self.stragglers.model == "uneven" and self.cluster.machines % 2:
            raise ValueError("stragglers.model=uneven needs an even number of machines")
        return self

    @property
    def straggler_probability(self) -> float:
        p = self.stragglers.probability
        if p is not None:
            return p
        return 0.2 if self.stragglers.model == "disrupted_machine" else 0.01

    @property
    def effective_slack(self) -> int:
        return MODE_SLACK[self.mode] if self.slack is None else self.slack

    @property
    def rr_enabled(self) -> bool:
        return MODE_RR[self.mode]
