"""The PSLD scenario ([PSLD]): a synchronous PS job, its placement policy, PS stragglers and costs.

Loaded by ``scenarios.load.load_scenario`` like every scenario kind. Defaults follow the paper's
Cluster-A (§6.1: 10 Gbps links, 4-core PS containers, 1:1 workers:PSs, BytePS) and the PSLD defaults; the
per-message and CPU costs and the reassignment-time model are ours.
"""

from __future__ import annotations

import math
import re
from typing import Literal

from clustertwin.policies.psld.policies import PLACEMENT, Placement, placement
from clustertwin.scenarios.gavel_schema import ScenarioBase, _Strict
from clustertwin.scenarios.registry_fields import registered
from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

MODELS = ("alexnet", "vgg16", "resnet18", "resnet50", "resnet101")  # traces.psld_models.PSLD_MODELS
PSLD_PATH_FIELDS: dict[str, tuple[str, ...]] = {"calibration": ()}


class PSLDCluster(_Strict):
    """Workers (one GPU each) and PSs; ``standby`` PSs are pre-launched for scale-out."""

    workers: PositiveInt = 8
    servers: PositiveInt = 8
    standby: NonNegativeInt = 0
    worker_gbps: PositiveFloat = 10.0  # §6.1: links capped at 10 Gbps with tc
    server_gbps: PositiveFloat = 10.0
    colocate: bool = False  # PS r shares worker (r mod W)'s NIC (not stated in the paper)
    server_cores: PositiveFloat = 4.0  # §6.1: 4-core PS containers


class PSCosts(_Strict):
    """Costs the paper does not give (ours)."""

    message_latency_s: NonNegativeFloat = 100e-6  # one-way, per block message
    message_cpu_s: NonNegativeFloat = 50e-6  # PS CPU per received message (RPC, dispatch, ACK)
    sum_gbytes_per_core_s: PositiveFloat = 2.0  # gradient summing, GB/s per core
    update_gbytes_per_core_s: PositiveFloat = 1.0  # vanilla PS optimizer, GB/s per core
    state_factor: PositiveFloat = 2.0  # vanilla migration: parameters + momentum
    control_rtt_s: NonNegativeFloat = 0.001  # scheduler <-> worker/PS round trip
    reassign_fixed_s: NonNegativeFloat = 0.3  # worker synchronisation and map broadcast
    algo_s_per_block_server: NonNegativeFloat = 1e-4  # Alg. 3 runtime per block per PS
    timing_noise: NonNegativeFloat = 0.2  # lognormal sigma of each block timing sample (RPC jitter)
    # None: the model's per-layer profile, each layer's blocks pushed as its backward pass ends. A value:
    # every worker computes this long, then pushes every block at once, as the real runtime's workers
    # do (a calibration sets it from a profiling run's measured compute; docs/algorithms/psld.md).
    worker_compute_s: NonNegativeFloat | None = None


class PSLDReal(_Strict):
    """How ``--backend real`` runs the workers (the simulator ignores this section)."""

    device: Literal["cpu", "cuda"] = "cpu"  # cuda: worker w computes on cuda:(w mod #GPUs); PSs stay CPU
    # toy: a closed-form elementwise gradient; linear: the gradient of a linear layer whose weights are the
    # model's parameters, over a synthetic minibatch of batch_size samples (real matmul work for a GPU)
    gradient: Literal["toy", "linear"] = "toy"
    # a real network instead of the gradient stand-ins: a built-in of runtime.models (mlr, resnet_small,
    # resnet18, vgg_small, lstm_small) or a user's ``module:function`` returning a torch.nn.Module; its
    # float32 tensors are the blocks (cut at block_mb). The simulator then simulates these tensors too.
    model: str | None = None
    # its data set: images | features | tokens (synthetic) or ``module:function`` giving (x, y) from
    # (seed, examples); None: the built-in model's own
    data: str | None = None
    lr: PositiveFloat = 0.1  # SGD step on the workers' mean gradient (momentum 0.9), real.model only

    @field_validator("model", "data")
    @classmethod
    def _entry(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z_][\w.]*(:[A-Za-z_]\w*)?", value):
            raise ValueError(f"{value!r} is neither a name nor module:function")
        return value


class PSLDParams(_Strict):
    """PSLD's knobs (paper defaults) and ours (report period, history, cooldown, gain)."""

    epsilon: float = Field(0.1, ge=0.0, le=1.0)
    theta_ratio: NonNegativeFloat = 1.0
    z: NonNegativeFloat = 1.645
    straggler_threshold: NonNegativeFloat = 1.0
    scale_threshold: float = Field(0.5, ge=0.0, le=1.0)
    scale_out: bool = True
    report_every: PositiveInt = 5  # iterations per reporting period (ours)
    history_reports: PositiveInt = 4
    cooldown_reports: NonNegativeInt = 2
    min_gain: float = Field(0.05, ge=0.0, lt=1.0)
    speed_metric: Literal["paper", "reference"] = "paper"
    strict_superior: bool = False
    order: Literal["descending", "given"] = "descending"
    recheck: bool = True  # ours: rerun Algs. 1 and 3 below the threshold too, apply only a clear gain
    # ours (policies.psld.stability): significant applies a new map only when its gain clears the
    # profiles' uncertainty over workers and over reporting periods; point compares the means only
    gain_test: Literal["significant", "point"] = "significant"


class Straggler(_Strict):
    """A step change of one PS: its NIC to ``value`` Gbit/s, or its CPU to ``value`` cores, from
    ``start_s`` until ``end_s`` (then back to the cluster's value; None: never)."""

    server: NonNegativeInt
    what: Literal["bandwidth", "cpu"] = "bandwidth"
    value: PositiveFloat = 1.0  # §6.1: the default straggler is capped at 1 Gbps
    start_s: NonNegativeFloat = 0.0
    end_s: PositiveFloat | None = None

    @model_validator(mode="after")
    def _order(self) -> Straggler:
        if self.end_s is not None and self.end_s <= self.start_s:
            raise ValueError(f"end_s={self.end_s} must be after start_s={self.start_s}")
        return self


class Regimes(_Strict):
    """Markov-modulated PS capacity ("real-world" pattern): each listed PS (all when
    empty) stays in a level for an exponential time of mean ``mean_dwell_s``, then jumps to a level drawn
    uniformly from ``levels`` (Gbit/s for bandwidth, cores for cpu)."""

    servers: list[NonNegativeInt] = Field(default_factory=list)
    what: Literal["bandwidth", "cpu"] = "bandwidth"
    levels: list[PositiveFloat] = Field(default_factory=lambda: [10.0, 5.0, 2.0, 1.0], min_length=1)
    mean_dwell_s: PositiveFloat = 30.0


class Removal(_Strict):
    """A planned PS shutdown (DEL_SERVER, §5.1) at ``time_s``."""

    time_s: NonNegativeFloat
    server: NonNegativeInt


class PSLDScenario(ScenarioBase):
    """One synchronous data-parallel job on parameter servers under one placement policy."""

    kind: Literal["psld"]
    model: str = "resnet50"
    batch_size: PositiveInt | None = None  # per GPU; None: the paper's (32 / 32 / 64, §6.1)
    compute_scale: PositiveFloat = 1.0  # multiplies the profiled GPU compute times
    policy: str = "psld"  # a name of the placement registry (policies.psld.policies.PLACEMENT)
    mode: Literal["byteps", "vanilla"] = "byteps"  # §6.1: results are BytePS unless stated
    block_mb: PositiveFloat = 4.0  # partition size (Fig. 19c); MXNet's split threshold too
    mxnet_small: Literal["random", "hash"] = "random"  # MXNet's small tensors: paper's words | its code
    duration_s: PositiveFloat = 120.0
    warmup_s: NonNegativeFloat = 20.0
    cluster: PSLDCluster = PSLDCluster()
    costs: PSCosts = PSCosts()
    psld: PSLDParams = PSLDParams()
    stragglers: list[Straggler] = Field(default_factory=list)
    regimes: Regimes | None = None
    removals: list[Removal] = Field(default_factory=list)
    real: PSLDReal = PSLDReal()
    # a calibration file written by ``clustertwin profile`` (scenarios.psld_calibration): the simulation
    # takes the cluster.* and costs.* values a real profiling run of this set-up measured, the real
    # network's compute per iteration among them; the real backend measures itself and ignores it
    calibration: str | None = None

    _known_policy = field_validator("policy")(registered(PLACEMENT))

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if value not in MODELS:
            raise ValueError(f"unknown model {value!r}; known: {', '.join(MODELS)}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> PSLDScenario:
        total = self.cluster.servers + self.cluster.standby
        for i, s in enumerate(self.stragglers):
            if s.server >= total:
                raise ValueError(
                    f"stragglers[{i}].server={s.server} names a missing PS (servers are 0..{total - 1})"
                )
        for i, r in enumerate(self.removals):
            if r.server >= total:
                raise ValueError(f"removals[{i}].server={r.server} names a missing PS (0..{total - 1})")
        if self.removals and not self.placement.adaptive:
            adaptive = [e.name for e in PLACEMENT.entries() if e.factory().adaptive]
            raise ValueError(f"removals need an adaptive policy ({', '.join(adaptive)}), not {self.policy}")
        if self.regimes is not None:
            for s in self.regimes.servers:
                if s >= total:
                    raise ValueError(f"regimes.servers names a missing PS {s} (0..{total - 1})")
        if self.warmup_s >= self.duration_s:
            raise ValueError(f"warmup_s={self.warmup_s} must be below duration_s={self.duration_s}")
        from clustertwin.traces.psld_models import psld_model

        tensors = psld_model(self.model).tensors
        blocks = sum(max(1, math.ceil(t.nbytes / self.block_bytes)) for t in tensors)
        if self.cluster.servers > blocks:
            raise ValueError(
                f"cluster.servers={self.cluster.servers} exceeds the {blocks} blocks of {self.model} at "
                f"block_mb={self.block_mb}: a PS would hold nothing"
            )
        return self

    @property
    def placement(self) -> Placement:
        """The entry of the placement registry that ``policy`` names."""
        return placement(self.policy)

    @property
    def block_bytes(self) -> int:
        return max(1, round(self.block_mb * 1024 * 1024))
