"""The FlexRR scenario ([Harlap], ch. 3): cluster, consistency mode, straggler model, RR parameters.

Loaded by ``scenarios.load.load_scenario`` like every scenario kind.
"""

from __future__ import annotations

from typing import Literal

from clustertwin.policies.flexrr.modes import MODES, mode
from clustertwin.policies.flexrr.straggler_models import STRAGGLERS, straggler_model
from clustertwin.scenarios.gavel_schema import ScenarioBase, _Strict
from clustertwin.scenarios.registry_fields import registered
from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationInfo,
    field_validator,
    model_validator,
)


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


# Fields that name files, resolved relative to the scenario file by the loader.
FLEXRR_PATH_FIELDS: dict[str, tuple[str, ...]] = {"stragglers.trace_file": ()}


class Stragglers(_Strict):
    """Which straggler pattern of §3.4.1 is injected, and its knobs.

    * ``slow_worker``: ``delay`` (1.0 = 100%), ``probability`` per delay point, ``points_per_iteration``,
      ``max_duration`` (iterations of undelayed work).
    * ``disrupted_machine``: ``delay``, ``probability`` per machine per ``period_s``.
    * ``power_law``: ``alpha``.
    * ``uneven``: ``heavy_share`` of the items on the first half of the machines.
    * ``trace``: Alibaba PAI per-worker minibatch times (``trace_jobs``), cycled over the workers; or
      ``trace_file``, a CSV of the same format (columns ``worker``, ``time``, ``batch_time_norm``;
      ``traces/alibaba_minibatch.py``), relative to the scenario file.
    """

    model: str = "none"  # a name of the straggler registry (policies.flexrr.straggler_models.STRAGGLERS)
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
    trace_file: str | None = None  # a user's trace instead of the bundled jobs
    # the workers the model slows (None: every worker); the others run at nominal speed. E.g. one
    # persistently slow worker: ``{model: slow_worker, workers: [0], probability: 1.0}``
    workers: list[NonNegativeInt] | None = None

    _known_model = field_validator("model")(registered(STRAGGLERS))


class ParameterServer(_Strict):
    """The sharded parameter server's data plane (§3.2; simulated by ``sim/flexrr/ps.py``, run for real by
    ``runtime/flexrr/ps.py``: one shard process per shard, gloo point-to-point).

    * ``model_bytes``: size of the model, and of every worker's per-iteration update, in the simulation.
      0 (the default): no PS traffic is simulated and the SSP gate opens ``ps_sync_s`` after the slowest
      worker's completion. A real run always trains through its shards; a non-zero value must then be
      the real model's size (``clustertwin run --backend real`` names it when it differs).
    * ``shards``: how many shards (None: one per machine, as in the paper); shard j lives on machine
      j mod machines and owns a contiguous 1/shards slice of the model (simulated and real).
    * ``nic_gbps`` and ``latency_s`` describe the simulated network; a real run has the network it
      runs on (a calibration sets them from it).
    * ``nic_gbps``: each machine's NIC, per direction (full duplex), shared max-min fairly by the flows
      crossing it. 1 Gbps: the paper's clusters (§3.4.1, "1 GbE").
    * ``latency_s``: one-way latency a push or pull pays after its last byte (None: ``latency_s``, the
      control messages' latency; the same network carries both).
    """

    model_bytes: NonNegativeInt = 0
    shards: PositiveInt | None = None
    nic_gbps: PositiveFloat = 1.0
    latency_s: NonNegativeFloat | None = None


class FlexRRReal(_Strict):
    """How the real runtime (``runtime/flexrr``) trains; the simulator ignores this block.

    * ``device``: ``cpu`` (gloo processes, the default and what CI runs) or ``cuda``: worker ``w`` trains
      on ``cuda:<w mod gpus>`` (``gpus``: how many of the visible GPUs to use; None: all). The control
      plane (mailbox, parameter table, SSP gate) stays on the job's TCPStore either way.
    * ``pacing``: ``profile``: a chunk of items takes exactly what the straggler profile says (the real
      compute is hidden inside it; a sleep fills the rest). ``compute``: a chunk takes its real compute,
      and the profile's *excess* over nominal speed is slept on top (§3.4.1's "sleep d x t per part"), so
      ``iteration_s`` (per worker: ``iteration_s_per_worker``) must be the measured undelayed processing
      time (``experiments/flexrr_gpu.py`` calibrates it from a profiling run).
    * the training problem (``runtime/flexrr/model.py``): ``model`` (``mlr``, ``mlp``, ``cnn`` or a
      user's ``module:function``, ``runtime/flexrr/models.py``; ``hidden`` is its width) trained by SGD
      at rate ``lr`` on ``data`` (``synthetic``, ``synthetic_images`` or ``module:function``) of
      ``features`` inputs and ``classes`` labels; an item is a mini-batch of ``batch`` examples drawn
      cyclically from a pool of ``pool`` examples (None: one distinct example per item-batch, i.e.
      ``items x batch``).
    * ``emulated_hosts``: every machine of the cluster binds its parameter-server sockets to its own
      loopback address (127.0.0.<2+m>), so that worker-shard traffic crosses distinct endpoints as it
      would between hosts; false: all on 127.0.0.1.
    * ``record_loss``: evaluate the training loss of every iteration's model after the run (info
      ``loss_per_iteration``, metric ``iterations_to_target``).
    """

    device: Literal["cpu", "cuda"] = "cpu"
    gpus: PositiveInt | None = None
    dtype: Literal["float64", "float32"] = "float64"
    pacing: Literal["profile", "compute"] = "profile"
    features: PositiveInt = 16
    classes: PositiveInt = Field(4, ge=2)
    batch: PositiveInt = 1
    pool: PositiveInt | None = None
    lr: PositiveFloat = 0.5
    model: str = "mlr"
    data: str = "synthetic"
    hidden: PositiveInt = 32
    emulated_hosts: bool = True
    record_loss: bool = True
    # how often an idle worker (at the gate, or waiting for help) polls its mailbox and the gate
    poll_s: PositiveFloat = 0.002
    # mailbox round trips each adjacent pair of workers times before training (0: none); the profiling
    # step of experiments/flexrr_gpu.py uses them to calibrate ``latency_s``
    probe_round_trips: NonNegativeInt = 0


class Convergence(_Strict):
    """Statistical efficiency (§3.4.3's convergence tests; ``policies/flexrr/convergence.py``): how many
    iterations reach ``target_loss`` when every read is ``slack`` iterations stale,
    ``ceil(iterations * (1 + per_staleness * slack))``. With ``iterations`` set, both backends report
    ``iterations_to_target`` and ``time_to_target_s`` (time per iteration x iterations to target); a real
    run with ``target_loss`` set also measures its own (``measured_iterations_to_target``). Fit both
    from real runs with ``python -m experiments.flexrr_convergence``."""

    target_loss: PositiveFloat | None = None
    iterations: PositiveFloat | None = None
    per_staleness: NonNegativeFloat = 0.0


class FlexRRScenario(ScenarioBase):
    """One data-parallel training job under a straggler pattern, in one FlexRR mode."""

    kind: Literal["flexrr"]
    cluster: FlexRRCluster = FlexRRCluster()
    mode: str = "flexrr"  # a name of the mode registry (policies.flexrr.modes.MODES)
    slack: NonNegativeInt | None = None  # None: the mode's (0 for BSP and BSP RR, 1 otherwise)
    iterations: PositiveInt = 20  # §3.4.3: "Each experiment ran for 20 iterations"
    items_per_worker: PositiveInt = 1000
    iteration_s: PositiveFloat = 6.0  # undelayed iteration time; §3.4.1's example is 6 s
    # per-worker undelayed iteration time (e.g. measured by a profiling run); None: iteration_s for all
    iteration_s_per_worker: list[PositiveFloat] | None = None
    latency_s: NonNegativeFloat = 0.001  # one-way control message latency
    latency_jitter_s: NonNegativeFloat = 0.0  # plus an exponential delay of this mean
    # fixed delay before the SSP gate opens once the needed updates are in: after the slowest worker's
    # completion (ps.model_bytes 0), or after the worker's pull of every shard's slice (PS modelled)
    ps_sync_s: NonNegativeFloat = 0.0
    ps: ParameterServer = ParameterServer()
    rr: RapidReassignment = RapidReassignment()
    stragglers: Stragglers = Stragglers()
    record_messages: bool = True
    real: FlexRRReal = FlexRRReal()
    convergence: Convergence = Convergence()

    _known_mode = field_validator("mode")(registered(MODES))

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> FlexRRScenario:
        if self.items_per_worker < self.rr.message_checks:
            raise ValueError(
                f"items_per_worker={self.items_per_worker} must be >= rr.message_checks="
                f"{self.rr.message_checks} (a message check needs at least one item between checks)"
            )
        model = straggler_model(self.stragglers.model)
        if model.even_machines and self.cluster.machines % 2:
            raise ValueError(f"stragglers.model={self.stragglers.model} needs an even number of machines")
        n = self.cluster.workers
        if self.iteration_s_per_worker is not None and len(self.iteration_s_per_worker) != n:
            raise ValueError(
                f"iteration_s_per_worker has {len(self.iteration_s_per_worker)} entries, expected one per"
                f" worker ({n})"
            )
        given = (
            bool(info.context and info.context.get("user_input"))
            and "helper_group_size" in self.rr.model_fields_set
        )
        if given and self.rr.helper_group_size > n:
            # Equal to the cluster is allowed and means "every other worker" (policies/flexrr/groups.py
            # caps a group at workers - 1); larger, when a user wrote it, is a mistake, not a request.
            # The default (4) stays valid on smaller clusters, also after a round trip through JSON.
            raise ValueError(
                f"rr.helper_group_size={self.rr.helper_group_size} is larger than the cluster of {n} workers"
            )
        if self.stragglers.trace_file is not None and not model.replays_trace:
            readers = [e.name for e in STRAGGLERS.entries() if e.factory.replays_trace]
            raise ValueError(f"stragglers.trace_file is read only by stragglers.model={'|'.join(readers)}")
        bad = [w for w in self.stragglers.workers or [] if w >= n]
        if bad:
            raise ValueError(f"stragglers.workers {bad} out of range: there are {n} workers (0..{n - 1})")
        return self

    def worker_iteration_s(self, worker: int) -> float:
        """Undelayed iteration time of ``worker``."""
        per = self.iteration_s_per_worker
        return self.iteration_s if per is None else per[worker]

    @property
    def effective_slack(self) -> int:
        return mode(self.mode).slack if self.slack is None else self.slack

    @property
    def rr_enabled(self) -> bool:
        return mode(self.mode).reassigns
