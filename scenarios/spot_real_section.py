"""The ``real:`` section of a ``kind: spot`` scenario: AgileML (or checkpoint/restart) on real processes.

Proteus's runtime half ([Proteus] §1): R reliable and T transient training processes on this
host, an MLR job (the paper's MLR app, on synthetic data), and an eviction schedule — an explicit list
(at ``at_s`` kill these transient processes, warning ``warning_s`` before) or a replayed spot-price trace
(a transient process is evicted when the price rises above its bid), time-compressed by
``trace.real_s_per_trace_h``. The simulator's prediction for the same schedule uses ``real_s_per_sim_h``.

Process names: ``r0 … r{R-1}`` (reliable), ``t0 … t{T-1}`` (transient; ``t0`` started first, so it is the
"longest-running" one AgileML prefers for ActivePSs). Every cross-field error names the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from clustertwin.scenarios.gavel_schema import _Strict
from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

REAL_SPOT_SCENARIO = Path(__file__).with_name("spot-real-schedule-cpu.yaml")
REAL_MARKET_SCENARIO = Path(__file__).with_name("spot-real-cpu.yaml")


class Processes(_Strict):
    """How many processes of each tier (one worker, and possibly a PS role, per process)."""

    reliable: PositiveInt = 2
    transient: Annotated[int, Field(ge=0)] = 6


class MLRJob(_Strict):
    """Multinomial logistic regression on synthetic data ([Proteus] §3: the MLR app, here tiny).

    One clock = one SGD step on a global batch of ``batch`` examples split over the live workers
    (strong scaling with a constant global batch, as AgileML keeps it: dissertation ch. 4).
    ``step_s`` emulates a machine: a worker's step takes at least ``step_s × its share / its initial
    share``, so on a small host the processes behave like machines of one speed (0: no pacing).
    """

    features: PositiveInt = 128
    classes: PositiveInt = 10
    examples: PositiveInt = 4096
    batch: PositiveInt = 512
    lr: PositiveFloat = 0.5
    step_s: NonNegativeFloat = 0.05


class Eviction(_Strict):
    """At ``at_s`` (real seconds from the job's start) kill ``processes``; warn ``warning_s`` before
    (0: no warning — a failure)."""

    at_s: PositiveFloat
    processes: list[str] = Field(min_length=1)
    warning_s: NonNegativeFloat = 2.0


class TraceReplay(_Strict):
    """Evictions from a spot-price trace: transient process ``t{i}`` bids ``bids[i]`` ($/h) at ``start``
    and is evicted when the price of (``instance_type``, ``zone``) first exceeds it. ``real_s_per_trace_h``
    real seconds stand for one trace hour."""

    file: str = "aws-p2-p3-us-east-1-2020"
    instance_type: str = "p3.2xlarge"
    zone: str | None = None  # null: the trace's first zone for this type
    start: str | None = None  # ISO time; null: the trace's first timestamp
    bids: list[PositiveFloat] = Field(min_length=1)
    warning_s: NonNegativeFloat = 2.0
    real_s_per_trace_h: PositiveFloat = 60.0


class AgileMLRuntime(_Strict):
    """The real run's AgileML timing ([Proteus] §1.2–1.6); its stage thresholds are the
    scenario's ``agileml.stage2_above`` / ``stage3_above``."""

    poll_s: PositiveFloat = 0.1  # the elasticity controller's warning poll (paper: 5 s, compressed)
    backup_every: PositiveInt = 5  # clocks between an ActivePS's coalesced pushes to its BackupPS
    flush_bandwidth_mbps: PositiveFloat = 100.0  # what the recovery plan assumes for the end-of-life push


class CheckpointRuntime(_Strict):
    """Checkpoint/restart baseline ([Proteus] §6.3): every ``interval_s`` real seconds."""

    interval_s: PositiveFloat = 6.0


# What a market-driven real run (``market: true``) takes from the market instead of the file.
MARKET_FIXED = ("processes", "evictions", "trace", "agileml.poll_s", "checkpoint.interval_s")


def _given(model: _Strict, dotted: str) -> bool:
    head, _, rest = dotted.partition(".")
    if head not in model.model_fields_set:
        return False
    return not rest or rest in getattr(model, head).model_fields_set


class RealRun(_Strict):
    """A real run: processes, job, eviction schedule, timing, and the time compression of its prediction.

    The simulator's prediction of the run (``analysis/spot_prediction.py``) replays the same schedule in
    the spot engine: ``real_s_per_sim_h`` real seconds stand for one simulated hour. The real run's own
    timing (eviction times, warnings, poll, checkpoint interval) is divided by that factor into simulated
    time; the costs the real run *measures* instead take the scenario's simulator constants, in simulated
    seconds (``agileml.eviction_stall_s``, ``agileml.consistent_lag_s``, ``checkpoint.overhead``,
    ``checkpoint.restart_s``).

    With ``market: true`` nothing is fixed in advance: the scenario's acquisition policy (BidBrain)
    decides at its decision points, on the scenario's replayed market, what to acquire and release; each
    acquired instance is one training process (spawned when it has booted), each eviction a warning and
    then a SIGKILL, and the simulation of the same file is the prediction (``clustertwin compare``).
    ``duration_s`` is then only a wall-clock cap.
    """

    processes: Processes = Processes()
    job: MLRJob = MLRJob()
    duration_s: PositiveFloat = 30.0
    evictions: list[Eviction] = Field(default_factory=list)
    trace: TraceReplay | None = None
    agileml: AgileMLRuntime = AgileMLRuntime()
    checkpoint: CheckpointRuntime = CheckpointRuntime()
    real_s_per_sim_h: PositiveFloat = 60.0
    device: Literal["cpu", "cuda"] = "cpu"
    # True: the scenario's acquisition policy buys emulated instances (one process each) from its replayed
    # market, with wall-clock time at real_s_per_sim_h; no fixed processes or schedule (see MARKET_FIXED).
    market: bool = False

    @property
    def reliable_names(self) -> list[str]:
        return [f"r{i}" for i in range(self.processes.reliable)]

    @property
    def transient_names(self) -> list[str]:
        return [f"t{i}" for i in range(self.processes.transient)]

    @model_validator(mode="after")
    def _consistent(self) -> RealRun:
        if self.market:
            given = [f for f in MARKET_FIXED if _given(self, f)]
            if given:
                raise ValueError(
                    f"{given[0]}: with market: true the acquisition policy chooses the processes and the"
                    " market evicts them, and the timing comes from the scenario's agileml.poll_s and"
                    " checkpoint.interval_s (scaled by real_s_per_sim_h); remove " + ", ".join(given)
                )
            return self
        transient = set(self.transient_names)
        reliable = set(self.reliable_names)
        seen: dict[str, int] = {}
        for i, ev in enumerate(self.evictions):
            for name in ev.processes:
                if name in reliable:
                    raise ValueError(
                        f"evictions[{i}].processes: {name} is a reliable process; only transient ones"
                        f" ({', '.join(sorted(transient)) or 'none'}) can be evicted"
                    )
                if name not in transient:
                    raise ValueError(
                        f"evictions[{i}].processes: no process {name!r}; transient processes are"
                        f" {', '.join(sorted(transient)) or 'none'}"
                    )
                if name in seen:
                    raise ValueError(
                        f"evictions[{i}].processes: {name} is already evicted by evictions[{seen[name]}]"
                    )
                seen[name] = i
            if ev.at_s >= self.duration_s:
                raise ValueError(
                    f"evictions[{i}].at_s: {ev.at_s} s is not before the end of the run"
                    f" (duration_s {self.duration_s} s)"
                )
            if ev.warning_s > ev.at_s:
                raise ValueError(
                    f"evictions[{i}].warning_s: a {ev.warning_s} s warning before at_s {ev.at_s} s would"
                    " come before the job starts"
                )
        if self.trace is not None:
            if self.evictions:
                raise ValueError("trace: give either an eviction list (evictions) or a trace, not both")
            if len(self.trace.bids) != self.processes.transient:
                raise ValueError(
                    f"trace.bids: one bid per transient process expected ({self.processes.transient}),"
                    f" got {len(self.trace.bids)}"
                )
        return self
