"""The ``kind: spot`` scenario: a training job acquiring spot/on-demand machines from a replayed market
(``--backend sim``), or, with a ``real:`` section, AgileML on real processes with real evictions
(``--backend real``, ``scenarios/spot_real_section.py``).

The two backends share ``fault_tolerance``, the AgileML stage thresholds and the simulator's costs of an
eviction (the real run's prediction uses them); the rest of each side is its own, and a backend refuses,
by name, a section it cannot honour (:meth:`SpotScenario.sim_only_fields`, and ``real`` in a simulation).

Validated like every scenario (unknown fields are errors; strict types) and loaded by
``scenarios.load.load_scenario``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from clustertwin.policies.agileml import StageThresholds
from clustertwin.policies.bidbrain.history import HORIZON_S
from clustertwin.policies.flexrr.modes import MODES
from clustertwin.policies.spot import ACQUISITION, FAULT_TOLERANCE, FaultTolerance, FaultToleranceSettings
from clustertwin.scenarios.flexrr_schema import Stragglers
from clustertwin.scenarios.gavel_schema import ScenarioBase, _Strict
from clustertwin.scenarios.price_fields import BUNDLED_TRACE_NAMES, iso_text, on_demand_table, price_trace
from clustertwin.scenarios.registry_fields import registered
from clustertwin.scenarios.spot_real_section import RealRun
from pydantic import (
    BaseModel,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

DEFAULT_SPOT_SCENARIO = Path(__file__).with_name("spot-default.yaml")


SPOT_PATH_FIELDS: dict[str, tuple[str, ...]] = {
    "market.trace": BUNDLED_TRACE_NAMES,
    "market.on_demand": ("bundled",),
    "real.trace.file": BUNDLED_TRACE_NAMES,
}

# What a real run honours besides ``real:`` (the rest describes a market the real run does not replay).
_SHARED_FIELDS = {
    "name",
    "kind",
    "seed",
    "description",
    "fault_tolerance",
    "real",
    "agileml.stage2_above",
    "agileml.stage3_above",
    "agileml.consistent_lag_s",
    "agileml.eviction_stall_s",
    "checkpoint.overhead",
    "checkpoint.restart_s",
}


class Synthetic(_Strict):
    """Replace the trace by one generated from a model fitted to it (traces/spot_generator.py).

    ``spikes_per_h`` etc. override the fitted spike process (a what-if: post-2017 prices have almost no
    spikes, the 2016 auction market had many); null keeps the fitted values.
    """

    spikes_per_h: NonNegativeFloat | None = None
    spike_multiple: PositiveFloat | None = None
    spike_mean_s: PositiveFloat | None = None


class MarketSpec(_Strict):
    """Which prices and markets the job may use, and how the trace is split."""

    trace: str = "aws-p2-p3-us-east-1-2020"
    on_demand: str = "bundled"  # on-demand price table (instance_type,vcpus,gpus,price), or "bundled"
    instance_types: list[str] = Field(default_factory=lambda: ["p2.xlarge", "p3.2xlarge"], min_length=1)
    zones: list[str] | None = None  # null: every zone in the trace for these types
    train_days: PositiveFloat = 60.0  # BidBrain's β window: the first train_days of the trace
    start: str | None = None  # ISO time of the job's start; null: a seeded random start after training
    # A run may go at most this far past a market's last price row (AWS records only changes; the
    # bundled trace has a row at least every ~34 h); further is an error, not the last price forever.
    max_stale_h: PositiveFloat = 48.0
    synthetic: Synthetic | None = None

    _iso = field_validator("start", mode="before")(iso_text)

    @field_validator("train_days")
    @classmethod
    def _covers_the_horizon(cls, days: float) -> float:
        if days * 86400.0 < HORIZON_S:
            raise ValueError(
                f"the training window ({days:g} days) must cover BidBrain's {HORIZON_S / 3600:g} h horizon"
            )
        return days

    _trace_exists = field_validator("trace")(price_trace)
    _table_exists = field_validator("on_demand")(on_demand_table)


class Job(_Strict):
    """The job's size: the work a reference on-demand cluster does in ``reference_hours``."""

    reference_type: str = "p2.xlarge"
    reference_count: PositiveInt = 64
    reference_hours: PositiveFloat = 2.0
    work: PositiveFloat | None = None  # work units (ν·hours); null: reference_count × ν × reference_hours
    max_scale: Annotated[float, Field(ge=1.0)] = 3.0  # BidBrain may hold up to this × the reference ν
    work_rate: dict[str, PositiveFloat] = Field(default_factory=dict)  # ν per type; default: vCPUs


class Billing(_Strict):
    model: Literal["hourly_refund", "per_second", "fixed_preemptible"] = "hourly_refund"
    warning_s: NonNegativeFloat | None = None  # null: the provider's (EC2 120 s, GCE 30 s)
    preemptions_per_h: NonNegativeFloat = 0.0  # fixed_preemptible: exponential preemption rate


class BidBrainSpec(_Strict):
    period_s: PositiveFloat = 120.0
    renewal_lead_s: PositiveFloat = 300.0
    phi: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    sigma_s: NonNegativeFloat = 60.0
    lambda_s: NonNegativeFloat = 120.0
    table_step_s: PositiveFloat = 60.0  # start-time spacing of the β estimate


class AgileMLSpec(_Strict):
    reliable_type: str = "p2.xlarge"
    reliable_count: PositiveInt = 3
    stage2_above: PositiveFloat = 1.0
    stage3_above: PositiveFloat = 15.0
    poll_s: NonNegativeFloat = 5.0
    partition_mb: NonNegativeFloat = 64.0
    nic_gbps: PositiveFloat = 1.0
    consistent_lag_s: NonNegativeFloat = 10.0
    eviction_stall_s: NonNegativeFloat = 5.0


class CheckpointSpec(_Strict):
    interval_s: PositiveFloat = 1800.0
    overhead: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.17  # Proteus §6.3: 17% measured
    restart_s: NonNegativeFloat = 300.0


class Provisioning(_Strict):
    request_delay_s: NonNegativeFloat = 60.0
    boot_s: NonNegativeFloat = 120.0


class SpotStragglers(Stragglers):
    """Stragglers among the job's workers, and what the workers do about them (FlexRR, [Harlap] ch. 3,
    on transient machines: the combination [Harlap] §6.2.1 proposes).

    The straggler pattern is FlexRR's (``model`` and its knobs, as in a ``kind: flexrr`` scenario).
    ``mode`` is how the workers run, a FlexRR mode: ``bsp`` (AgileML as is: every clock waits for its
    slowest worker), ``bsp_rr`` (RapidReassignment inside AgileML's workers), ``flexrr`` (SSP plus
    RapidReassignment). The simulator runs the FlexRR engine (``sim/flexrr``, the policies' own
    RapidReassignment state machines) on each worker count the job reaches, ``iterations`` iterations of
    ``items_per_worker`` items, and slows the job's work rate by the iteration time it measures.
    """

    mode: str = "bsp"
    iterations: PositiveInt = 10
    items_per_worker: PositiveInt = 100

    _mode_known = field_validator("mode")(registered(MODES))


class SpotScenario(ScenarioBase):
    """One spot-market run: market, job, acquisition policy, fault tolerance, billing."""

    kind: Literal["spot"]
    market: MarketSpec = MarketSpec()
    job: Job = Job()
    # a name of policies.spot.ACQUISITION: bidbrain (Proteus) | standard (cheapest, bid on demand) |
    # just_above (cheapest, bid price + $0.0001) | on_demand (the reference cluster, all on demand)
    policy: str = "bidbrain"
    fault_tolerance: str = "agileml"  # a name of policies.spot.FAULT_TOLERANCE: agileml | checkpoint
    billing: Billing = Billing()
    bidbrain: BidBrainSpec = BidBrainSpec()
    agileml: AgileMLSpec = AgileMLSpec()
    checkpoint: CheckpointSpec = CheckpointSpec()
    provisioning: Provisioning = Provisioning()
    max_runtime_h: PositiveFloat = 720.0
    real: RealRun | None = None  # the real run (--backend real); a simulation refuses it
    stragglers: SpotStragglers | None = None  # null: workers run at their machines' speed

    _policy_known = field_validator("policy")(registered(ACQUISITION))
    _fault_tolerance_known = field_validator("fault_tolerance")(registered(FAULT_TOLERANCE))

    @model_validator(mode="after")
    def _consistent(self) -> SpotScenario:
        if self.billing.model == "fixed_preemptible" and self.policy in ("bidbrain", "just_above"):
            raise ValueError(
                f"policy {self.policy} needs a price-driven market; with billing.model fixed_preemptible "
                "use standard or on_demand"
            )
        return self

    def fault_tolerance_scheme(
        self, *, reliable_count: int, poll_s: float, checkpoint_interval_s: float
    ) -> FaultTolerance:
        """The registered scheme ``fault_tolerance`` names. Its stage thresholds and the costs of an
        eviction come from the ``agileml`` and ``checkpoint`` sections; the machines and the timing, which
        differ between a simulated market and a real run, from the caller."""
        a, c = self.agileml, self.checkpoint
        settings = FaultToleranceSettings(
            thresholds=StageThresholds(a.stage2_above, a.stage3_above),
            reliable_count=reliable_count,
            poll_s=poll_s,
            consistent_lag_s=a.consistent_lag_s,
            eviction_stall_s=a.eviction_stall_s,
            checkpoint_interval_s=checkpoint_interval_s,
            checkpoint_overhead=c.overhead,
            restart_s=c.restart_s,
        )
        return FAULT_TOLERANCE.get(self.fault_tolerance)(settings)

    def sim_only_fields(self) -> list[str]:
        """The fields given in the file (or by --set) that only a simulation honours, dotted."""
        given = []
        for name in sorted(self.model_fields_set):
            value = getattr(self, name)
            if isinstance(value, BaseModel):
                given += [f"{name}.{sub}" for sub in sorted(value.model_fields_set)]
            else:
                given.append(name)
        return [f for f in given if f not in _SHARED_FIELDS and f.split(".")[0] not in _SHARED_FIELDS]
