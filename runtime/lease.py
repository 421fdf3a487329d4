"""Training under a lease: the runtime's equivalent of Gavel's iterator (seed 001 §5.5, notes §6.2).

A job runs in rounds. At the start of a round it loads its checkpoint (model, optimizer, step); it trains
until the lease ends (a number of steps or of seconds, whichever comes first); at the end it saves a new
checkpoint unless the lease is renewed and it will keep running in place. It reports the steps it made and
its measured throughput, which the scheduler smooths into its throughput estimates.

In a distributed job every rank must run the same number of steps; rank 0 decides when the lease is over
and the decision is shared by an all-reduce every step, so no rank steps alone. Only rank 0 writes the
checkpoint. A checkpoint is written to a temporary file and renamed, so a job killed mid-save leaves the
previous checkpoint intact: no finished step is lost or counted twice.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from runtime.workloads import Workload


@dataclass(frozen=True)
class Lease:
    max_steps: int  # at most this many steps in this lease
    max_seconds: float  # and at most this long (wall clock)


@dataclass(frozen=True)
class LeaseReport:
    start_step: int
    end_step: int
    seconds: float  # training time, excluding checkpoint load and save
    load_s: float
    save_s: float

    @property
    def steps(self) -> int:
        return self.end_step - self.start_step

    @property
    def throughput(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else 0.0


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
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(
        {"model": state.model.state_dict(), "optimizer": state.optimizer.state_dict(), "step": state.step},
        tmp,
    )
    os.replace(tmp, path)


def run_lease(
    workload: Workload,
    checkpoint: Path,
    lease: Lease,
    total_steps: int,
    *,
    seed: int = 0,
    device: torch.device | str = "cpu",
    slowdown: float = 1.0,
    save_at_end: bool = True,
) -> LeaseReport:
    """Load, train for at most ``lease`` (and never past ``total_steps``), save; report what was done.

    ``slowdown`` > 1 emulates a slower accelerator type: after each step the job sleeps (slowdown − 1)
    times that step's compute time.
    """
    device = torch.device(device)
    distributed = dist.is_available() and dist.is_initialized()
    rank = dist.get_rank() if distributed else 0
    started = time.perf_counter()
    state = load(checkpoint, workload, seed, device)
    model: nn.Module = state.model
    if distributed:
        model = nn.parallel.DistributedDataParallel(
            state.model, device_ids=[device.index] if device.type == "cuda" else None
        )
    load_s = time.perf_counter() - started

    start_step = state.step
    limit = min(total_steps, start_step + lease.max_steps)
    training_started = time.perf_counter()
    while state.step < limit:
        step_started = time.perf_counter()
        inputs, targets = (t.to(device) for t in workload.batch(seed, state.step, rank))
        state.optimizer.zero_grad(set_to_none=True)
        workload.loss(model, (inputs, targets)).backward()
        state.optimizer.step()
        state.step += 1
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        compute = time.perf_counter() - step_started
        if slowdown > 1.0:
            time.sleep((slowdown - 1.0) * compute)
        if _lease_over(time.perf_counter() - training_started >= lease.max_seconds, distributed, device):
            break
    seconds = time.perf_counter() - training_started

    save_started = time.perf_counter()
    if save_at_end and rank == 0:
        save(checkpoint, state)
    if distributed:
        dist.barrier()
    return LeaseReport(start_step, state.step, seconds, load_s, time.perf_counter() - save_started)


def _lease_over(local: bool, distributed: bool, device: torch.device) -> bool:
    """Rank 0's clock decides; every rank learns the decision at the same step."""
    if not distributed:
        return local
    flag = torch.tensor([1.0 if (local and dist.get_rank() == 0) else 0.0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item() > 0)
