"""The scenario schema of PipeDream-level runs (``kind: pipedream``): a model profile, a cluster, a
pipeline schedule and the planner's options. Units are in the field names (GB/s = 1e9 bytes/s)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from clustertwin.policies.pipedream.planners import PLANNERS
from clustertwin.policies.pipedream.schedules import SCHEDULES, names_where, schedule_spec
from clustertwin.scenarios.gavel_schema import ScenarioBase, _Strict
from clustertwin.scenarios.pipedream_real_section import PipeDreamReal
from clustertwin.scenarios.registry_fields import registered
from clustertwin.traces.pipedream_profile import BUNDLED_BATCH_SIZES
from pydantic import (
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

# For the scenario loader: fields holding a file path, with the words that are not paths (bundled
# model names), like ``scenarios.gavel_schema.PATH_FIELDS``.
PIPEDREAM_PATH_FIELDS: dict[str, tuple[str, ...]] = {"model.profile": tuple(BUNDLED_BATCH_SIZES)}


class PipeDreamMeasured(_Strict):
    """How a real run's folder (``model.profile``) is simulated: by default with the model the run
    simulates itself with (its ``own_sim_*``), each ingredient switchable (``sim.pipedream.measured``)."""

    # layers: a stage sums its layers' profiled times; whole: a stage whose layers the run timed whole
    # (its chunks table) takes those times; in_run: a stage the run's ranks timed inside the run (its
    # stage_times table) takes those, else as whole
    stage_times: Literal["layers", "whole", "in_run"] = "whole"
    # run: every transfer crosses the link the run probed and a replicated stage's all-reduce runs at the
    # bus bandwidth it measured (the run's processes share one host); cluster: the cluster section's links
    link: Literal["run", "cluster"] = "run"
    # a message leaves only once its receiver has reached the op that consumes it (NCCL's stream-ordered
    # receive); false: transfers are prefetched into the receiver's earlier ops
    rendezvous: bool = True
    # compute slows down while a transfer of its device runs, by the factor the run's ranks measured
    # for the same layers (stage_times)
    transfer_slowdown: bool = True


class PipeDreamModel(_Strict):
    """Which per-layer profile to plan and simulate."""

    # a bundled model name, a path to a PipeDream graph.txt, or a real run's folder (its measured profile)
    profile: str = "vgg16"
    profile_batch_size: PositiveInt | None = None  # samples per profiled minibatch (bundled: known)
    # Coarsen bigger graphs to this many blocks for the planners whose cost grows cubically in the layers
    # (hierarchical with replicated stages, brute_force) or whose stages name blocks (manual); coarsening
    # can change the plan, so every bundled profile (at most 347 layers) plans at full resolution.
    max_blocks: PositiveInt = 512
    # A real run's folder only: which of the run's measurements its simulation uses (null: all of them,
    # as the run's own simulation)
    measured: PipeDreamMeasured | None = None

    @model_validator(mode="after")
    def _profile_exists(self) -> PipeDreamModel:
        run_folder = (Path(self.profile) / "layers.parquet").exists()
        if self.measured is not None and not run_folder:
            raise ValueError("measured applies to a real run's folder as profile only")
        if self.profile in BUNDLED_BATCH_SIZES or run_folder:
            return self  # a run folder: the measured profile, at that run's microbatch size
        if not Path(self.profile).exists():
            raise ValueError(
                f"profile must be a bundled model ({', '.join(BUNDLED_BATCH_SIZES)}) or a graph.txt path;"
                f" not found: {self.profile}"
            )
        if self.profile_batch_size is None:
            raise ValueError(
                "profile_batch_size is required for a profile file (graph.txt does not record it)"
            )
        return self


class PipeDreamCluster(_Strict):
    """Identical servers of ``devices_per_server`` devices; two link classes ([Narayanan] Fig 2.6)."""

    servers: PositiveInt = 2
    devices_per_server: PositiveInt = 4
    memory_gib: PositiveFloat = 16.0  # per device
    intra_bandwidth_gbs: PositiveFloat = 10.0  # GB/s inside a server (PCIe ~10-15, NVLink ~30)
    inter_bandwidth_gbs: PositiveFloat = 1.25  # GB/s between servers (10 Gbps)
    intra_latency_us: NonNegativeFloat = 10.0
    inter_latency_us: NonNegativeFloat = 50.0
    # Relative speed per device (1.0 = the profiled GPU); None: all 1.0. Heterogeneous clusters.
    speeds: list[PositiveFloat] | None = None

    @property
    def num_devices(self) -> int:
        return self.servers * self.devices_per_server

    @model_validator(mode="after")
    def _speeds_match(self) -> PipeDreamCluster:
        if self.speeds is not None and len(self.speeds) != self.num_devices:
            raise ValueError(
                f"speeds needs one value per device ({self.num_devices}), got {len(self.speeds)}"
            )
        return self


class PipeDreamStage(_Strict):
    """A hand-written stage: layers ``first..last`` (inclusive, profile positions) on ``replicas``."""

    first: NonNegativeInt
    last: NonNegativeInt
    replicas: PositiveInt = 1


class PipeDreamPlanner(_Strict):
    """How stages are chosen: ``mode`` names a registered planner (``policies.pipedream.planners``).

    ``hierarchical``: the DP of [Narayanan] §2.4.1 over (devices per server, servers); ``flat``: one level
    of every device at the inter-server bandwidth ([PipeDream-arXiv]); ``straight``: no replicated stages, one
    stage per device; ``brute_force``: exhaustive search of flat plans (tiny models); ``manual``:
    ``stages`` as given; ``2bw``: PipeDream-2BW's planner (§3.3, Algorithm 1), which also picks how many
    pipeline copies run side by side. Schedules that do not replicate stages (all but ``1f1b``) run
    straight pipelines only, which every planner honours.
    """

    mode: str = "hierarchical"
    convention: Literal["dissertation", "arxiv", "code"] = "dissertation"
    stages: list[PipeDreamStage] | None = None
    # PipeDream's reference optimizer's --activation_compression_ratio (convention: code only): a split's
    # last stage also pays 2a/(B·replicas·ratio) for its input and output activations.
    activation_compression_ratio: PositiveFloat | None = None
    # Keep every stage within cluster.memory_gib (weights, gradients, optimizer state and the stashed
    # activations of its in-flight inputs, per the schedule); not for interleaved schedules.
    memory_aware: bool = True

    _known_mode = field_validator("mode")(registered(PLANNERS))

    @model_validator(mode="after")
    def _compression_needs_code(self) -> PipeDreamPlanner:
        if self.activation_compression_ratio is not None and self.convention != "code":
            raise ValueError("activation_compression_ratio is an option of convention: code")
        return self

    @model_validator(mode="after")
    def _manual_has_stages(self) -> PipeDreamPlanner:
        if PLANNERS.get(self.mode).given_stages != (self.stages is not None):
            modes = [e.name for e in PLANNERS.entries() if e.factory.given_stages]
            raise ValueError(f"give stages exactly when mode is {' or '.join(modes)}")
        return self


class PipeDreamMemory(_Strict):
    """Memory accounting: gradients and optimizer state per weight byte, activation recomputation."""

    recompute: bool = False
    gradient_factor: NonNegativeFloat = 1.0
    optimizer_factor: NonNegativeFloat = 2.0  # Adam: 2; SGD with momentum: 1
    # persistent: allocated once (DDP buckets); per_update: from the first backward after an update to
    # the update, as the real runtime does (sim.pipedream.model.MemoryModel)
    gradient_buffer: Literal["persistent", "per_update"] = "persistent"


class PipeDreamScenario(ScenarioBase):
    """One pipeline-parallel training run: plan stages for a profiled model, generate a schedule's op
    lists and execute them op by op."""

    kind: Literal["pipedream"]
    model: PipeDreamModel = PipeDreamModel()
    cluster: PipeDreamCluster = PipeDreamCluster()
    schedule: str = "1f1b"  # a registered pipeline schedule (policies.pipedream.schedules)
    microbatch_size: PositiveInt = 64  # samples per microbatch
    microbatches: PositiveInt = 64  # per minibatch (1f1b: inputs simulated, rounded up to a multiple of
    # every stage's replica count)
    num_batches: PositiveInt = 1
    chunks_per_device: PositiveInt = 1  # interleaved only
    in_flight: list[PositiveInt] | None = None  # 1f1b only: inputs in flight per stage replica
    # 1f1b only, straight pipelines: every stage uses the weight version the input stage used for an input
    # (PipeDream's vertical sync, §2.4.3) instead of its own newest (weight stashing alone).
    vertical_sync: bool = False
    data_parallel: PositiveInt = 1  # identical pipeline copies (sync schedules); devices split evenly
    optimizer_step_ms: NonNegativeFloat = 0.0
    # Wait-free backprop: gradient all-reduces overlap the backward that produces them (DDP buckets).
    overlap_allreduce: bool = True
    planner: PipeDreamPlanner = PipeDreamPlanner()
    memory: PipeDreamMemory = PipeDreamMemory()
    real: PipeDreamReal | None = None  # --backend real only

    _known_schedule = field_validator("schedule")(registered(SCHEDULES))

    @model_validator(mode="after")
    def _consistent(self) -> PipeDreamScenario:
        spec = schedule_spec(self.schedule)
        if self.chunks_per_device > 1 and not spec.interleaves:
            raise ValueError(
                f"chunks_per_device > 1 needs schedule: {' or '.join(names_where('interleaves'))}"
            )
        if self.in_flight is not None and not spec.takes_in_flight:
            raise ValueError(
                f"in_flight applies to schedule: {' or '.join(names_where('takes_in_flight'))} only"
            )
        if self.vertical_sync and not spec.takes_vertical_sync:
            raise ValueError(
                f"vertical_sync applies to schedule: {' or '.join(names_where('takes_vertical_sync'))} only"
            )
        if self.cluster.num_devices % self.data_parallel:
            raise ValueError(
                f"data_parallel={self.data_parallel} must divide the {self.cluster.num_devices} devices"
            )
        if self.data_parallel > 1 and spec.replicates_stages:
            raise ValueError(
                f"{self.schedule} replicates stages itself (planner); use data_parallel with a schedule that"
                " runs straight pipelines"
            )
        return self
