"""Spawn a PSLD parameter-server job as local gloo processes and collect what the workers report."""

from __future__ import annotations

import os
import queue as queue_module
import signal
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from clustertwin.runtime.psld.ps import Job, run_server, run_worker

from clustertwin.errors import RunFailure


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


POLL_S = 0.2  # how often the launcher looks for a dead rank while it waits
STOP_S = 5.0  # how long a surviving rank gets to exit on SIGTERM before SIGKILL


class GroupFailure(RunFailure):
    """A rank of a launch died (or the launch ran past its limit); the group was stopped, no result.

    ``rank`` is the rank blamed (the first seen dead, a signal's victim before a rank that only failed
    after it; -1 for a timeout), ``role`` its name, ``exitcodes`` every rank's exit code as reaped."""

    def __init__(self, message: str, rank: int, role: str, exitcodes: list[int | None]) -> None:
        super().__init__(message)
        self.rank, self.role, self.exitcodes = rank, role, exitcodes


def _describe(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def spawn_group(
    target: Callable[..., None],
    world: int,
    args: tuple,
    expected: int,
    limit_s: float,
    progress: Callable[[float, str], None] | None = None,
    roles: Sequence[str] | None = None,
    on_start: Callable[[list], None] | None = None,
) -> list[tuple]:
    """Start ``world`` ranks of ``target(rank, world, port, *args, queue)`` and return the ``expected``
    items they put on the queue.

    A rank that dies (any non-zero exit: an exception, a signal such as SIGKILL) or a group past
    ``limit_s`` fails the launch within ``POLL_S``: the launcher stops every other rank at once (its
    gloo peers may be blocked on the dead one, which gloo would only notice at its timeout), reaps them
    all, and raises ``GroupFailure`` naming the dead rank by ``roles[rank]`` (e.g. "PS 1"). No rank
    outlives the call. ``on_start`` (tests) gets the started processes, in rank order."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    names = list(roles) if roles is not None else [f"rank {r}" for r in range(world)]
    procs = [ctx.Process(target=target, args=(r, world, port, *args, queue)) for r in range(world)]
    for p in procs:
        p.start()
    if on_start is not None:
        on_start(procs)
    items: list[tuple] = []
    limit = time.monotonic() + limit_s
    died: list[int] = []  # ranks in the order they were seen dead
    complete = False
    try:
        while len(items) < expected:
            try:
                items.append(queue.get(timeout=POLL_S))
                if progress is not None:
                    progress(len(items) / expected, f"{len(items)}/{expected} reports")
                continue
            except queue_module.Empty:
                pass
            died += [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in died]
            if died or time.monotonic() > limit:
                break
        complete = len(items) == expected
    finally:
        _stop(procs, at_once=not complete)  # a failure or an interrupt stops the group now
    codes = [p.exitcode for p in procs]
    if len(items) < expected:
        if died:
            # a rank killed by a signal is the cause; ranks that raised after it saw it vanish
            signalled = [r for r in died if (codes[r] or 0) < 0]
            rank = (signalled or died)[0]
            others = [f"{names[r]} {_describe(codes[r])}" for r in died if r != rank]
            message = (
                f"{names[rank]} (rank {rank}) died during the run ({_describe(codes[rank])}); the run is"
                f" abandoned with no result: the other {world - 1} ranks were stopped"
                + (f" (also dead: {'; '.join(others)})" if others else "")
                + f". Exit codes by rank: {codes}"
            )
        else:
            rank = -1
            message = (
                f"the PS job ran past its {limit_s:.0f} s limit with {len(items)}/{expected} reports; every"
                f" rank was stopped. Exit codes by rank: {codes}"
            )
        raise GroupFailure(message, rank, names[rank] if rank >= 0 else "", codes)
    bad = [r for r, c in enumerate(codes) if c != 0]
    if bad:
        r = bad[0]
        raise GroupFailure(
            f"{names[r]} (rank {r}) failed after reporting ({_describe(codes[r])})."
            f" Exit codes by rank: {codes}",
            r,
            names[r],
            codes,
        )
    return items


def _stop(procs: list, at_once: bool) -> None:
    """Reap every process. ``at_once`` (a failure): the ones still running get SIGTERM now, SIGKILL
    after ``STOP_S``; otherwise they get 30 s to leave the process group on their own first."""
    if at_once:
        for p in procs:
            if p.is_alive():
                p.terminate()
    deadline = time.monotonic() + (STOP_S if at_once else 30.0)
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process if the launcher dies (Linux ``PR_SET_PDEATHSIG``), so a
    launcher killed mid-run leaves no rank blocked in gloo on its dead peers; elsewhere a no-op."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the launcher was already gone before the call
            os._exit(1)
    except (OSError, AttributeError):
        pass


def join_group(rank: int, world: int, port: int) -> None:
    """Start one rank of a launch: die with the launcher, one thread, join the gloo group on ``port``."""
    die_with_parent()
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)


def _main(rank: int, world: int, port: int, jobs: list[Job], queue: Any) -> None:
    join_group(rank, world, port)
    try:
        for index, job in enumerate(jobs):
            if rank < job.ps_ranks:
                held, control = run_server(rank, job)
                queue.put((index, -1 - rank, sorted(held), control.records if control else []))
            else:
                params, samples = run_worker(rank, job)
                queue.put((index, rank - job.ps_ranks, params.numpy().tobytes(), len(samples)))
            dist.barrier()
    finally:
        dist.destroy_process_group()


def roles(job: Job) -> list[str]:
    """Each rank's name in a launch's messages: "PS r", "standby PS r" or "worker w"."""
    return (
        [f"PS {r}" for r in range(job.servers)]
        + [f"standby PS {r}" for r in range(job.servers, job.ps_ranks)]
        + [f"worker {w}" for w in range(job.workers)]
    )


def run_jobs(
    jobs: list[Job], on_start: Callable[[list], None] | None = None
) -> list[dict[int, tuple[Any, Any]]]:
    """Run ``jobs`` one after another on one process group. Per job: worker w -> (final parameters as
    bytes, number of timing samples), and server r (standby PSs included) under key -1-r -> (blocks it
    holds at the end, on rank 0 the scheduler's records ``(k, time, Decision, profile)``, else [])."""
    shape = {(j.servers, j.standby, j.workers) for j in jobs}
    if len(shape) != 1:
        raise ValueError("all jobs of one launch need the same numbers of servers, standby PSs and workers")
    world = jobs[0].ps_ranks + jobs[0].workers
    out: list[dict[int, tuple[Any, Any]]] = [{} for _ in jobs]
    items = spawn_group(
        _main, world, (jobs,), len(jobs) * world, 120.0 * len(jobs), roles=roles(jobs[0]), on_start=on_start
    )
    for index, who, first, second in items:
        out[index][who] = (first, second)
    return out
