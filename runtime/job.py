"""The job API: a user's own training loop, schedulable by a cluster scheduler (the role of Gavel's
``GavelIterator``, [Narayanan] §5.5).

A training loop iterates over a :class:`Job` and trains one step per iteration::

    from clustertwin.runtime.job import Job, device

    model, optimizer = ..., ...           # on device(): the worker type's device (cpu or this rank's GPU)
    job = Job(total_steps=args.steps, state={"model": model, "optimizer": optimizer})
    for step in job:                      # resumes at the checkpoint's step
        loss = model(batch(step)).mean()  # the step's data is the loop's business
        optimizer.zero_grad(); loss.backward(); optimizer.step()

Run by hand, the loop trains all its steps (resuming from ``--checkpoint``/``CLUSTERTWIN_CHECKPOINT``
when given, and saving there at the end). Started by a ``clustertwin agent``, the environment names a
lease (at most so many steps and seconds), the checkpoint and the control channel: at each lease's end the
job reports its steps and throughput and waits for the scheduler's verdict, a new lease (train on from
memory: Gavel's lease renewal) or stop (save the checkpoint and leave the loop). A job that reaches its
total steps saves and leaves the loop by itself. A verdict that comes before the lease is over ends the
lease at once: that is how the scheduler asks for a checkpoint now (a spot instance's eviction warning).

State is either objects with ``state_dict``/``load_state_dict`` (a model, an optimizer, a scheduler, by
name) or a pair of callables (``save() -> dict``, ``load(dict)``). The checkpoint is one file holding the
step and that state, written to a temporary name and renamed, so a job killed mid-save keeps its previous
checkpoint: no step is counted twice or lost.

Under torchrun every rank iterates the same steps: rank 0's clock decides when a lease is over and the
decision reaches every rank at the same step (an all-reduce); rank 0 alone talks to the scheduler and its
verdict is broadcast; rank 0 alone writes the checkpoint, which every rank loads (a multi-host job needs
the checkpoint folder on a shared file system).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
from clustertwin.runtime.gavel.control import POLL_S, ControlClient, job_client

from clustertwin.atomic import write_atomically, write_text

ENV_CHECKPOINT = "CLUSTERTWIN_CHECKPOINT"
ENV_TOTAL_STEPS = "CLUSTERTWIN_TOTAL_STEPS"
ENV_LEASE_STEPS = "CLUSTERTWIN_LEASE_STEPS"
ENV_LEASE_SECONDS = "CLUSTERTWIN_LEASE_SECONDS"
ENV_SLOWDOWN = "CLUSTERTWIN_SLOWDOWN"
ENV_REPORT = "CLUSTERTWIN_REPORT"
ENV_DEVICE = "CLUSTERTWIN_DEVICE"
ENV_READY = "CLUSTERTWIN_READY"
# A job given a ready file writes it once it has trained this many steps: its one-time costs are behind
# it and it loads the host as it will go on doing (the profiler's background jobs).
READY_STEPS = 2
CUT_POLL_S = 0.25  # how often a lease looks whether the scheduler has ended it early


class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any], /) -> Any: ...


@dataclass(frozen=True)
class LeaseSummary:
    """What one lease did; the scheduler's throughput estimates come from it."""

    start_step: int
    end_step: int
    seconds: float  # training time, excluding checkpoint load and save
    load_s: float
    save_s: float
    # The lease's second half: the steps that began after half its seconds had passed, and their time.
    # Its rate is the process's steady one, free of the first steps' one-time costs: the profiler's
    # throughput (``runtime.gavel.profile.measure``).
    window_steps: int = 0
    window_seconds: float = 0.0

    @property
    def steps(self) -> int:
        return self.end_step - self.start_step

    @property
    def throughput(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else 0.0

    def as_report(self, saved: bool) -> dict[str, Any]:
        return {**asdict(self), "throughput": self.throughput, "saved": saved}


@dataclass(frozen=True)
class Session:
    """How the job is run: by hand (no scheduler) or by an agent; read from the environment."""

    checkpoint: Path | None = None
    total_steps: int | None = None  # the scheduler's count wins over the program's own
    lease_steps: int | None = None
    lease_seconds: float = math.inf
    slowdown: float = 1.0  # > 1 emulates a slower device: each step is followed by (slowdown - 1) x its time
    report: Path | None = None  # one lease, then save and write its report here (a profiler's measurement)
    ready: Path | None = None  # written once READY_STEPS steps are trained (a profiler's background job)
    control: tuple[ControlClient, str] | None = None  # the scheduler's channel and this job's key prefix
    job_key: str | None = None  # set on every rank of a job an agent started (rank 0 alone connects)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, connect: bool = True) -> Session:
        env = os.environ if environ is None else environ

        def get(name: str, convert: Callable[[str], Any]) -> Any:
            value = env.get(name)
            return None if value in (None, "") else convert(value)

        return cls(
            checkpoint=get(ENV_CHECKPOINT, Path),
            total_steps=get(ENV_TOTAL_STEPS, int),
            lease_steps=get(ENV_LEASE_STEPS, int),
            lease_seconds=get(ENV_LEASE_SECONDS, float) or math.inf,
            slowdown=get(ENV_SLOWDOWN, float) or 1.0,
            report=get(ENV_REPORT, Path),
            ready=get(ENV_READY, Path),
            control=job_client(env) if connect and _rank() == 0 else None,
            job_key=env.get("CLUSTERTWIN_JOB_KEY") or None,
        )

    @property
    def scheduled(self) -> bool:
        return self.control is not None or self.job_key is not None


def device(environ: Mapping[str, str] | None = None) -> torch.device:
    """The device a job's loop trains on: the one its worker type runs on (``CLUSTERTWIN_DEVICE``, cpu or
    cuda, set by the agent and the profiler), else cuda when this machine has a GPU; on cuda, this rank's
    local GPU (``LOCAL_RANK``) among those the agent made visible."""
    env = os.environ if environ is None else environ
    kind = env.get(ENV_DEVICE) or ("cuda" if torch.cuda.is_available() else "cpu")
    if kind == "cuda":
        return torch.device("cuda", int(env.get("LOCAL_RANK", "0")))
    if kind != "cpu":
        raise ValueError(f"{ENV_DEVICE} must be cpu or cuda, not {kind!r}")
    return torch.device("cpu")


def _synchronize() -> None:
    """Wait for the GPU's queued work, so that a step's time is its device's, not its launches'."""
    if torch.cuda.is_initialized():  # a flag: no driver call on a CPU job's every step
        torch.cuda.synchronize()


def _rank() -> int:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0"))


class Job:
    """A training job's steps, leases and checkpoint (see the module's docstring)."""

    def __init__(
        self,
        total_steps: int,
        state: Stateful | Mapping[str, Stateful] | None = None,
        *,
        save: Callable[[], dict[str, Any]] | None = None,
        load: Callable[[dict[str, Any]], None] | None = None,
        checkpoint: str | Path | None = None,
        session: Session | None = None,
    ) -> None:
        """``checkpoint``: where a job run by hand resumes from and saves to (a scheduler's choice wins)."""
        if (state is None) == (save is None or load is None):
            raise ValueError("give the job's state (objects with state_dict) or both save and load callables")
        if (save is None) != (load is None):
            raise ValueError("save and load go together")
        self.session = session if session is not None else Session.from_env()
        self.total_steps = int(self.session.total_steps or total_steps)
        self.checkpoint = self.session.checkpoint or (Path(checkpoint) if checkpoint is not None else None)
        self._state, self._save, self._load = state, save, load
        self.distributed = dist.is_available() and dist.is_initialized()
        # Without a process group a rank of torchrun still knows its rank: only rank 0 speaks and saves.
        self.rank = _rank()
        self.step = 0
        self.saved_step = 0
        self.leases: list[LeaseSummary] = []  # what each lease of this process did
        self._next_look = 0.0  # when rank 0 next looks for an early verdict (``_cut_short``)

    # --- state ---------------------------------------------------------------------------------------

    def _state_dict(self) -> dict[str, Any]:
        if self._save is not None:
            return self._save()
        state = self._state
        if isinstance(state, Mapping):
            return {name: obj.state_dict() for name, obj in state.items()}
        assert state is not None
        return {"state": state.state_dict()}

    def _load_state_dict(self, saved: dict[str, Any]) -> None:
        if self._load is not None:
            self._load(saved)
            return
        state = self._state
        if isinstance(state, Mapping):
            for name, obj in state.items():
                obj.load_state_dict(saved[name])
        else:
            assert state is not None
            state.load_state_dict(saved["state"])

    def restore(self) -> float:
        """Load the checkpoint when there is one (every rank); returns the seconds it took."""
        started = time.perf_counter()
        if self.checkpoint is not None and self.checkpoint.is_file():
            saved = torch.load(self.checkpoint, map_location="cpu", weights_only=True)
            self.step = int(saved.pop("step"))
            self._load_state_dict(saved)
        self.saved_step = self.step
        return time.perf_counter() - started

    def save(self) -> float:
        """Write the checkpoint (rank 0; every rank waits for it); returns the seconds it took."""
        started = time.perf_counter()
        if self.rank == 0 and self.checkpoint is not None:
            self.checkpoint.parent.mkdir(parents=True, exist_ok=True)
            saved = {"step": self.step, **self._state_dict()}
            write_atomically(self.checkpoint, lambda p: torch.save(saved, p))
        if self.distributed:
            dist.barrier()
        self.saved_step = self.step
        return time.perf_counter() - started

    # --- the loop ------------------------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        return self.step >= self.total_steps

    def __iter__(self) -> Iterator[int]:
        load_s = self.restore()
        session = self.session
        lease_steps = session.lease_steps if session.lease_steps is not None else self.total_steps
        lease_seconds, n = session.lease_seconds, 0
        while True:
            summary = yield from self._lease(n, lease_steps, lease_seconds, load_s if n == 0 else 0.0)
            final = self.finished or session.report is not None or not session.scheduled
            if final:
                summary = replace(summary, save_s=self.save())
            self.leases.append(summary)
            self._post(n, summary, final)
            if final:
                return
            n += 1
            verdict = self._verdict(n)
            if verdict.get("stop"):
                self.save()
                if self.session.control is not None:
                    client, key = self.session.control
                    client.put(f"{key}/saved", self.saved_step)
                return
            lease_steps, lease_seconds = int(verdict["max_steps"]), float(verdict["max_seconds"])

    def _lease(self, n: int, max_steps: int, max_seconds: float, load_s: float) -> Iterator[int]:
        start = self.step
        limit = min(self.total_steps, start + max_steps)
        started = time.perf_counter()
        window: tuple[int, float] | None = None
        self._next_look = started + CUT_POLL_S
        while self.step < limit:
            step_started = time.perf_counter()
            if window is None and step_started - started >= max_seconds / 2:
                window = (self.step, step_started)
            yield self.step
            self.step += 1
            _synchronize()
            if self.session.slowdown > 1.0:
                time.sleep((self.session.slowdown - 1.0) * (time.perf_counter() - step_started))
            if self.step - start == READY_STEPS and self.session.ready is not None and self.rank == 0:
                write_text(self.session.ready, f"{os.getpid()}\n")
            if self._lease_over(time.perf_counter() - started >= max_seconds or self._cut_short(n)):
                break
        ended = time.perf_counter()
        first, opened = window if window is not None else (self.step, ended)
        return LeaseSummary(start, self.step, ended - started, load_s, 0.0, self.step - first, ended - opened)

    def _cut_short(self, n: int) -> bool:
        """Whether the scheduler has already given its verdict on lease ``n + 1`` (rank 0, which alone
        talks to it, looks every ``CUT_POLL_S`` seconds: a step costs no round trip)."""
        if self.session.control is None or time.perf_counter() < self._next_look:
            return False
        self._next_look = time.perf_counter() + CUT_POLL_S
        client, key = self.session.control
        return client.has(f"{key}/lease/{n + 1}")

    def _lease_over(self, local: bool) -> bool:
        """Rank 0's clock decides; every rank learns the decision at the same step."""
        if not self.distributed:
            return local
        flag = torch.tensor([1.0 if (local and self.rank == 0) else 0.0], device=_collective_device())
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item() > 0)

    def _post(self, n: int, summary: LeaseSummary, saved: bool) -> None:
        if self.rank != 0:
            return
        report = summary.as_report(saved)
        if self.session.control is not None:
            client, key = self.session.control
            client.put(f"{key}/report/{n}", report)
        if self.session.report is not None:
            write_text(self.session.report, json.dumps(report))

    def _verdict(self, n: int) -> dict[str, Any]:
        """Rank 0 waits for the scheduler's word on lease ``n`` and every rank gets it."""
        verdict: dict[str, Any] = {"stop": True}
        if self.rank == 0 and self.session.control is not None:
            client, key = self.session.control
            while not client.has(f"{key}/lease/{n}"):
                time.sleep(POLL_S)
            verdict = client.get(f"{key}/lease/{n}")
        if self.distributed:
            box = [verdict]
            dist.broadcast_object_list(box, src=0)
            verdict = box[0]
        return verdict


def _collective_device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
