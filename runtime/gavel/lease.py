"""Training under a lease: the runtime's equivalent of Gavel's iterator ([Narayanan] §5.5).

A job runs in leases. When its process starts it loads its checkpoint (model, optimizer, step); it trains
until the lease ends (a number of steps or of seconds, whichever comes first) and reports the steps it made
and its measured throughput, which the scheduler smooths into its throughput estimates. If the lease is
renewed the process keeps its state in memory and trains on; otherwise it saves a new checkpoint and exits.

In a distributed job every rank must run the same number of steps; rank 0 decides when the lease is over
and the decision is shared by an all-reduce every step, so no rank steps alone. Only rank 0 writes the
checkpoint. A checkpoint is written to a temporary file and renamed, so a job killed mid-save leaves the
previous checkpoint intact: no finished step is lost or counted twice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.distributed as dist
from clustertwin.runtime.job import LeaseSummary
from clustertwin.runtime.workloads import Workload
from torch import nn

from clustertwin.atomic import write_atomically


@dataclass(frozen=True)
class Lease:
    max_steps: int  # at most this many steps in this lease
    max_seconds: float  # and at most this long (wall clock)


@dataclass
class TrainingState:
    model: nn.Module
    optimizer: torch.optim.Optimizer
    step: int


def new_state(workload: Workload, seed: int, device: torch.device) -> TrainingState:
    torch.manual_seed(seed)
    model = workload.model().to(device)
    return TrainingState(model, workload.optimizer(model), 0)


def load(path: Path, workload: Workload, seed: int, device: torch.device) -> TrainingState:
    """The checkpoint at ``path``, or a fresh job (step 0) when there is none yet."""
    state = new_state(workload, seed, device)
    if path.is_file():
        saved = torch.load(path, map_location=device, weights_only=True)
        state.model.load_state_dict(saved["model"])
        state.optimizer.load_state_dict(saved["optimizer"])
        state.step = int(saved["step"])
    return state


def save(path: Path, state: TrainingState) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    saved = {"model": state.model.state_dict(), "optimizer": state.optimizer.state_dict(), "step": state.step}
    write_atomically(path, lambda p: torch.save(saved, p))


class Trainer:
    """A job's training state held in memory across the leases of one process.

    A renewed lease continues from memory: no process start, no checkpoint load, no save. The checkpoint
    is written only when the process gives up its workers (:meth:`save`).
    """

    def __init__(
        self,
        workload: Workload,
        checkpoint: Path,
        total_steps: int,
        *,
        seed: int = 0,
        device: torch.device | str = "cpu",
        slowdown: float = 1.0,
    ) -> None:
        """Load the checkpoint (or start the job); ``slowdown`` > 1 emulates a slower accelerator type:
        after each step the job sleeps (slowdown − 1) times that step's compute time."""
        self.workload, self.checkpoint, self.total_steps = workload, checkpoint, total_steps
        self.seed, self.device, self.slowdown = seed, torch.device(device), slowdown
        self.distributed = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if self.distributed else 0
        started = time.perf_counter()
        self.state = load(checkpoint, workload, seed, self.device)
        self.model: nn.Module = self.state.model
        if self.distributed:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.model = nn.parallel.DistributedDataParallel(self.state.model, device_ids=ids)
        self.load_s = time.perf_counter() - started
        self.saved_step = self.state.step

    @property
    def step(self) -> int:
        return self.state.step

    @property
    def finished(self) -> bool:
        return self.state.step >= self.total_steps

    def train(self, lease: Lease) -> LeaseSummary:
        """Train for at most ``lease`` and never past the job's total steps; nothing is saved."""
        state, device = self.state, self.device
        start_step = state.step
        limit = min(self.total_steps, start_step + lease.max_steps)
        started = time.perf_counter()
        window: tuple[int, float] | None = None
        while state.step < limit:
            step_started = time.perf_counter()
            if window is None and step_started - started >= lease.max_seconds / 2:
                window = (state.step, step_started)
            inputs, targets = (t.to(device) for t in self.workload.batch(self.seed, state.step, self.rank))
            state.optimizer.zero_grad(set_to_none=True)
            self.workload.loss(self.model, (inputs, targets)).backward()
            state.optimizer.step()
            state.step += 1
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            compute = time.perf_counter() - step_started
            if self.slowdown > 1.0:
                time.sleep((self.slowdown - 1.0) * compute)
            if _lease_over(time.perf_counter() - started >= lease.max_seconds, self.distributed, device):
                break
        ended = time.perf_counter()
        first, opened = window if window is not None else (state.step, ended)
        return LeaseSummary(
            start_step, state.step, ended - started, 0.0, 0.0, state.step - first, ended - opened
        )

    def save(self) -> float:
        """Write the checkpoint (rank 0 only; every rank waits for it); returns the seconds it took."""
        started = time.perf_counter()
        if self.rank == 0:
            save(self.checkpoint, self.state)
        if self.distributed:
            dist.barrier()
        self.saved_step = self.state.step
        return time.perf_counter() - started


def run_lease(
    workload: Workload,
    checkpoint: Path,
    lease: Lease,
    total_steps: int,
    *,
    seed: int = 0,
    device: torch.device | str = "cpu",
    slowdown: float = 1.0,
) -> LeaseSummary:
    """One lease in a process of its own: load, train, save; report what was done."""
    trainer = Trainer(workload, checkpoint, total_steps, seed=seed, device=device, slowdown=slowdown)
    report = trainer.train(lease)
    return replace(report, load_s=trainer.load_s, save_s=trainer.save())


def _lease_over(local: bool, distributed: bool, device: torch.device) -> bool:
    """Rank 0's clock decides; every rank learns the decision at the same step."""
    if not distributed:
        return local
    flag = torch.tensor([1.0 if (local and dist.get_rank() == 0) else 0.0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item() > 0)
