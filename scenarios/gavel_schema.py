"""The scenario schema: what a scenario YAML file may say, with its defaults and consistency rules.

Every model forbids unknown fields, so a misspelt key is an error rather than a silently ignored
setting, and is strict, so YAML's loose typing (``yes`` for ``true``, ``1`` for ``true``) cannot slip
through as a number or a flag. Paths are stored absolute: the loader resolves them before validation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from clustertwin.scenarios.gavel_market_schema import MARKET_PATH_FIELDS, GavelMarket
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    PrivateAttr,
    Tag,
    field_validator,
    model_validator,
)

# Throughput tables bundled with traces/; any other value of ``throughputs`` is a path to a JSON table.
BUNDLED_THROUGHPUTS = ("simulation", "physical")

# Fields holding a file path, with the words that are not paths. The loader makes these absolute
# (relative to the scenario file, or to the working directory for a --set override).
PATH_FIELDS: dict[str, tuple[str, ...]] = {
    "throughputs": BUNDLED_THROUGHPUTS,
    "workload.trace": (),
    "mechanism.planned_throughputs": BUNDLED_THROUGHPUTS,
    "real.secret_file": (),
    **MARKET_PATH_FIELDS,
}


# One size for every type, or one per type. The discriminator validates only the branch the value's
# shape picks, so an error names the real problem instead of one complaint per union alternative.
ServerSize = Annotated[
    Annotated[PositiveInt, Tag("one")] | Annotated[dict[str, PositiveInt], Tag("per_type")],
    Discriminator(lambda value: "per_type" if isinstance(value, dict) else "one"),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ScenarioBase(_Strict):
    """What every scenario kind says (name, kind, seed, description), and where it was loaded from."""

    # The name becomes part of the default output folder, so it is kept to file-name characters.
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
    kind: str
    seed: NonNegativeInt = 0
    description: str = ""

    # The file it was loaded from, set by the loader; not a field, so it never reaches summary.json.
    _source: str = PrivateAttr(default="<scenario>")

    @property
    def source(self) -> str:
        """Where the scenario came from, to prefix errors found after loading (unknown policy, ...)."""
        return self._source


class Host(_Strict):
    """One machine whose CPU cores the worker slots of some types share (the real backend's CPU workers,
    and each GPU job's host thread, on one host). The simulator slows every job on it by the share of a
    core its processes get while the host is oversubscribed (``sim.gavel.host``)."""

    cores: PositiveFloat  # the host's cores (logical CPUs the slots may run on)
    types: list[str]  # worker types whose slots live on this host
    # What a busy core delivers when every core is busy, relative to one busy core alone (memory
    # bandwidth, caches, turbo): measured by `clustertwin profile --host`; 1.0: cores do not interfere.
    efficiency: Annotated[float, Field(gt=0, le=1)] = 1.0


class Cluster(_Strict):
    """Accelerators by worker type, packed into servers of equal size per type."""

    gpus: dict[str, NonNegativeInt]
    gpus_per_server: ServerSize = 4
    prices: dict[str, NonNegativeFloat] | None = None  # $ per GPU-hour, for cost metrics
    # The machine the slots of some worker types share (null: every slot has its own resources).
    host: Host | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Cluster:
        if not any(self.gpus.values()):
            raise ValueError(f"at least one worker type needs GPUs > 0 (got gpus={self.gpus})")
        if isinstance(self.gpus_per_server, dict):
            missing = sorted(set(self.gpus) - set(self.gpus_per_server))
            extra = sorted(set(self.gpus_per_server) - set(self.gpus))
            if missing or extra:
                raise ValueError(
                    f"gpus_per_server must name exactly the worker types of gpus ({', '.join(self.gpus)});"
                    f" missing: {missing or 'none'}, unknown: {extra or 'none'}"
                )
        for worker_type, count in self.gpus.items():
            per_server = self.server_size(worker_type)
            if count % per_server:
                raise ValueError(
                    f"gpus.{worker_type}={count} is not a multiple of gpus_per_server={per_server}"
                    " (servers are whole); change either value"
                )
        if self.host is not None:
            unknown = sorted(set(self.host.types) - set(self.gpus))
            if unknown or not self.host.types:
                raise ValueError(
                    f"host.types must name worker types of gpus ({', '.join(self.gpus)});"
                    f" unknown: {unknown or 'none given'}"
                )
        if self.prices is not None and set(self.prices) != set(self.gpus):
            raise ValueError(
                f"prices must give one price per worker type of gpus ({', '.join(self.gpus)});"
                f" got {', '.join(self.prices) or 'none'}"
            )
        return self

    def server_size(self, worker_type: str) -> int:
        """GPUs per server of ``worker_type``."""
        if isinstance(self.gpus_per_server, int):
            return self.gpus_per_server
        return self.gpus_per_server[worker_type]

    def servers(self) -> dict[str, int]:
        """Number of servers of each worker type."""
        return {t: n // self.server_size(t) for t, n in self.gpus.items()}


class Generate(_Strict):
    """A synthetic Gavel workload (Philly-like durations, Poisson arrivals)."""

    # auto (with a window): the simulator sizes the trace so that arrivals outlast the window's jobs.
    num_jobs: PositiveInt | Literal["auto"] = 300
    jobs_per_hour: PositiveFloat | None = 4.0  # None: a static trace, every job arrives at t=0
    scale_factors: Literal["single", "multiple"] = "single"
    priorities: bool = False  # 20% of jobs get weight 5
    slos: bool = False  # jobs get SLO deadlines
    # Durations in hours, drawn uniformly (the cost experiments of §5.7.3); null: Philly-like durations.
    durations_h: list[PositiveFloat] | None = None
    job_types: list[str] | None = None  # throughput-table job types to draw from; null: all of them


class Job(_Strict):
    """A job that is the user's own training program (written against ``clustertwin.runtime.job``)."""

    # Its name in the throughput table (the simulator's and the policy's view of it).
    job_type: str
    # The command, as words a shell would split (no shell runs it); a leading ``python`` or ``python3``
    # is the agent's interpreter, and a job of several ranks runs under torchrun.
    command: str
    working_dir: str | None = None  # relative to the scenario file's folder (default: that folder)
    env: dict[str, str] = Field(default_factory=dict)  # added to the agent's environment
    total_steps: PositiveInt
    scale_factor: PositiveInt = 1
    arrival_s: Annotated[NonNegativeFloat, Field(strict=False)] = 0.0
    priority_weight: Annotated[PositiveFloat, Field(strict=False)] = 1.0

    @field_validator("command")
    @classmethod
    def _words(cls, value: str) -> str:
        import shlex

        try:
            words = shlex.split(value)
        except ValueError as err:
            raise ValueError(f"cannot split the command into words: {err}") from None
        if not words:
            raise ValueError("the command is empty")
        return value


class Workload(_Strict):
    """Where jobs come from (a trace file, the generator, or a list of the user's own jobs) and which jobs
    the metrics measure."""

    trace: str | None = None
    trace_format: Literal["auto", "10col", "7col"] = "auto"
    generate: Generate | None = None
    jobs: list[Job] | None = None  # in arrival order
    # Job ids [first, last) whose completion times are measured (steady state); None: all jobs.
    window: Annotated[tuple[NonNegativeInt, NonNegativeInt], Field(strict=False)] | None = None
    # Entity weights for hierarchical policies (§5.4.3): jobs are split into len(entities) contiguous
    # blocks by job id, block i belonging to an entity of weight entities[i]. None: no entities.
    entities: list[PositiveFloat] | None = None

    @field_validator("trace")
    @classmethod
    def _trace_exists(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).is_file():
            raise ValueError(f"trace file not found: {value}")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> Workload:
        if sum(x is not None for x in (self.trace, self.generate, self.jobs)) != 1:
            raise ValueError(
                "give exactly one of trace (a file), generate (a synthetic workload) and jobs (a list)"
            )
        if self.jobs is not None:
            arrivals = [job.arrival_s for job in self.jobs]
            if arrivals != sorted(arrivals):
                raise ValueError("jobs must be listed in arrival order (arrival_s non-decreasing)")
        if self.window is not None:
            first, last = self.window
            if first >= last:
                raise ValueError(f"window [{first}, {last}) is empty; it needs first < last")
            n = None if self.generate is None else self.generate.num_jobs
            if isinstance(n, int) and last > n:
                raise ValueError(f"window ends at job {last} but generate makes only {n} jobs")
        if self.generate is not None and self.generate.num_jobs == "auto":
            if self.window is None or self.generate.jobs_per_hour is None:
                raise ValueError("generate.num_jobs: auto needs a window and a jobs_per_hour to size from")
        return self


def _table_exists(value: str) -> str:
    if value not in BUNDLED_THROUGHPUTS and not Path(value).is_file():
        raise ValueError(
            f"expected {' or '.join(BUNDLED_THROUGHPUTS)} or a throughput JSON file; not found: {value}"
        )
    return value


class Policy(_Strict):
    """A registered policy and the keyword arguments of its factory (checked when it is built)."""

    name: str
    params: dict[str, Any] = Field(default_factory=dict)
    # The run's total spend for makespan_budget ([Narayanan] §6.4.3): each allocation plans with what is
    # left of it after the rounds so far, at the prices in effect (cluster.prices or the market's).
    budget_usd: PositiveFloat | None = None


class Mechanism(_Strict):
    """Gavel's round-based mechanism ([Narayanan], §5.3.2)."""

    round_s: PositiveFloat = 360.0
    ideal: bool = False  # hand out exact time fractions instead of whole rounds
    # Seconds a job loses to checkpoint/restart: one number, or one per worker type (e.g. as profiled).
    preemption_overhead_s: NonNegativeFloat | dict[str, NonNegativeFloat] = 0.0
    # preemption: charged when a job resumes without its lease renewed (Gavel's simulator); restart: also
    # charged at a job's first start, when its process starts, loads and compiles (the real runtime).
    overhead_model: Literal["preemption", "restart"] = "preemption"
    min_reset_interval_s: NonNegativeFloat = 1920.0  # least time between two allocation recomputes
    # Space sharing plans with pair throughputs estimated from profiling this fraction of each new job
    # type's pairings (§5.3.3); null: the policy knows the true pair throughputs (an oracle).
    estimate_colocation: Annotated[float, Field(gt=0, le=1)] | None = None
    # The table the policy starts from when it differs from the truth (``throughputs``), e.g. a profile
    # against the rates a real run reached. The policy then learns each job's throughput online from
    # what its rounds measure, smoothed as the real backend does (§5.3.3); null: it knows the truth.
    planned_throughputs: str | None = None

    @field_validator("planned_throughputs")
    @classmethod
    def _planned_table_exists(cls, value: str | None) -> str | None:
        return None if value is None else _table_exists(value)


class RealWorker(_Strict):
    """How the real backend runs one worker type: on which device, and how much slower than it is."""

    device: Literal["cpu", "cuda"]
    # CUDA device ids of this type's GPUs (one per GPU of cluster.gpus); cpu types use processes.
    cuda_devices: list[NonNegativeInt] | None = None
    slowdown: Annotated[float, Field(ge=1.0)] = 1.0  # > 1 emulates a slower accelerator type


class Real(_Strict):
    """The real backend's side of the scenario. The simulator reads only what a busy slot asks of a
    shared host's cores (``threads_per_cpu_worker``, ``slowdown``) when the cluster has a ``host``."""

    workers: dict[str, RealWorker]
    threads_per_cpu_worker: PositiveInt = 1
    # Run each CPU worker slot on cores of its own (threads_per_cpu_worker each) and each GPU slot's host
    # thread on one, in the run and its profile alike, as a GPU slot is its device (runtime/cores.py).
    # Off, the OS places the jobs, and may put two on the SMT siblings of one physical core.
    pin_cores: bool = False
    grace_s: PositiveFloat = 30.0  # how long past a round's end a job or an agent may be late
    time_scale: PositiveFloat = 1.0  # divides trace arrival times (compress a trace into wall-clock time)
    # local: the scheduler starts one agent per server on this machine; remote: it waits for agents that
    # `clustertwin agent --scheduler HOST:PORT` started on the servers (each presenting the shared secret).
    agents: Literal["local", "remote"] = "local"
    # Where the scheduler listens for agents and jobs (HOST:PORT; port 0: any free port). Loopback unless
    # told otherwise: remote agents need an address other machines reach, e.g. 0.0.0.0:29400.
    listen: Annotated[str, Field(pattern=r"^[^\s:]+:[0-9]{1,5}$")] = "127.0.0.1:0"
    agent_timeout_s: PositiveFloat = 120.0  # how long to wait for the agents the cluster needs
    # The shared secret of remote agents and jobs, in a file (else the CLUSTERTWIN_SECRET variable; never
    # on a command line). Local agents get a fresh secret of the run's own.
    secret_file: str | None = None
    max_tries: PositiveInt = 3  # a job whose process fails this many times is marked failed
    # trace: run each job's own command; builtin: run the bundled stand-in of each job's type (for traces
    # whose commands need another code base, e.g. Gavel's published ones).
    commands: Literal["trace", "builtin"] = "trace"


class Scenario(ScenarioBase):
    """A Gavel experiment: a cluster, a workload, a policy and a mechanism, plus the seed."""

    def overhead_s(self, worker_type: str) -> float:
        """The checkpoint/restart overhead a job pays on ``worker_type`` (mechanism.preemption_overhead_s)."""
        overhead = self.mechanism.preemption_overhead_s
        return float(overhead.get(worker_type, 0.0) if isinstance(overhead, dict) else overhead)

    kind: Literal["gavel"]
    cluster: Cluster
    throughputs: str = "simulation"
    workload: Workload
    policy: Policy
    mechanism: Mechanism = Mechanism()
    real: Real | None = None
    # A cloud fleet replaying a spot-price trace ([Narayanan] §6, [Proteus]); null: a fixed cluster.
    market: GavelMarket | None = None

    @model_validator(mode="after")
    def _market_matches_cluster(self) -> Scenario:
        if self.market is None:
            return self
        types = {t for t, n in self.cluster.gpus.items() if n > 0}
        if set(self.market.types) != types:
            raise ValueError(
                "market.types must name exactly the worker types of cluster.gpus"
                f" ({', '.join(sorted(types))}); got {', '.join(sorted(self.market.types))}"
            )
        for name, spec in self.market.types.items():
            servers = self.cluster.servers()[name]
            if spec.on_demand + spec.spot != servers:
                raise ValueError(
                    f"market.types.{name}: on_demand + spot = {spec.on_demand} + {spec.spot} must equal the"
                    f" {servers} servers (instances) of cluster.gpus.{name}"
                )
        if self.cluster.prices is not None:
            raise ValueError("cluster.prices and market exclude each other: the market gives the prices")
        if self.mechanism.ideal:
            raise ValueError(
                "market needs the round mechanism (mechanism.ideal: false): evictions cut rounds"
            )
        return self

    @model_validator(mode="after")
    def _real_matches_cluster(self) -> Scenario:
        if self.real is None:
            return self
        types = set(self.cluster.gpus)
        if set(self.real.workers) != types:
            raise ValueError(
                "real.workers must name exactly the worker types of cluster.gpus"
                f" ({', '.join(sorted(types))}); got {', '.join(sorted(self.real.workers))}"
            )
        for name, worker in self.real.workers.items():
            if worker.device == "cuda" and len(worker.cuda_devices or ()) != self.cluster.gpus[name]:
                raise ValueError(
                    f"real.workers.{name}.cuda_devices must list {self.cluster.gpus[name]} CUDA device ids"
                    f" (one per GPU of cluster.gpus.{name})"
                )
        return self

    @field_validator("throughputs")
    @classmethod
    def _table_exists(cls, value: str) -> str:
        return _table_exists(value)
