"""Processes and rendezvous of a real run on one host: start N rank processes of a Python function,
let them join one process group, wait, and fail the whole launch cleanly when one rank dies.

The shape is torchrun's: the launcher (torchrun's agent) hosts the c10d ``TCPStore`` on a port the
kernel picks, and every rank finds it through the environment (``MASTER_ADDR``, ``MASTER_PORT``,
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` and ``TORCHELASTIC_USE_AGENT_STORE``).
``join`` is what a rank calls to become a member of the group; it reads only that environment, so the
same rank function also runs under ``torchrun`` itself.

* ``launch(target, world, args)`` starts ``target(rank, *args)`` in ``world`` spawned processes (a
  fresh interpreter each: no inherited CUDA state or locks), each of which dies with the launcher
  (Linux ``PR_SET_PDEATHSIG``). A rank may ``report(item)`` values back; ``launch`` returns them in
  arrival order once every rank has exited 0.
* A rank that dies (an exception, a non-zero exit, a signal such as SIGKILL), or a launch past its
  ``limit_s``, fails the launch within ``POLL_S``: the launcher stops every other rank at once (its
  peers may be blocked in a collective on the dead one, which gloo would only notice at its timeout),
  reaps them all and raises ``RankFailure`` naming the rank, its role and how it ended. No rank outlives
  the call.
"""

from __future__ import annotations

import os
import queue as queue_module
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from clustertwin.errors import RunFailure

POLL_S = 0.2  # how often the launcher looks for a dead rank while it waits
STOP_S = 5.0  # how long a surviving rank gets to exit on SIGTERM before SIGKILL
STORE_TIMEOUT_S = 300.0  # how long a store operation (the group's rendezvous included) may wait
HOST = "127.0.0.1"

_reports: Any = None  # in a rank: the launcher's queue, for ``report``


class RankFailure(RunFailure):
    """A rank of a launch died (or the launch ran past its limit); every rank was stopped, no result.

    ``rank`` is the rank blamed (the first seen dead, a signal's victim before a rank that only failed
    after it; -1 for a timeout), ``role`` its name, ``exitcodes`` every rank's exit code as reaped."""

    def __init__(self, message: str, rank: int, role: str, exitcodes: list[int | None]) -> None:
        super().__init__(message)
        self.rank, self.role, self.exitcodes = rank, role, exitcodes


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when its parent dies (Linux ``PR_SET_PDEATHSIG``), so a
    launcher killed mid-run leaves no rank blocked on its dead peers; a no-op where ``prctl`` is missing.
    Also usable as a ``subprocess.Popen`` ``preexec_fn``."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent was already gone before the call
        os._exit(1)


def host_store(timeout_s: float = STORE_TIMEOUT_S) -> Any:
    """The launcher's c10d ``TCPStore``, listening on a port the kernel picks (``.port``): no window in
    which another program could take a port found free beforehand."""
    import torch.distributed as dist

    return dist.TCPStore(
        HOST, 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=timeout_s)
    )


def connect_store(port: int, host: str = HOST, timeout_s: float = STORE_TIMEOUT_S) -> Any:
    """A client of the store at ``host:port`` (a launcher's ``host_store``)."""
    import torch.distributed as dist

    return dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=timeout_s))


@dataclass(frozen=True)
class Member:
    """What ``join`` gives a rank: its place in the group, its device and the group's store (a rank may
    keep its own keys there, under a prefix of its choosing)."""

    rank: int
    world: int
    local_rank: int
    device: Any  # torch.device
    store: Any  # torch.distributed.Store


def join(device: str = "cpu", backend: str | None = None, threads: int | None = 1) -> Member:
    """Join the process group the environment describes (``launch`` or ``torchrun``).

    ``device`` ``cpu``, or ``cuda`` for ``cuda:<LOCAL_RANK mod visible devices>`` (made current);
    ``backend`` defaults to gloo on CPU and NCCL on CUDA. ``threads``: torch's intra-op threads (ranks
    share the host's cores); ``None`` leaves torch's default. The store is the launcher's when
    ``TORCHELASTIC_USE_AGENT_STORE`` says so, else rank 0 hosts it (``torchrun``'s two ways)."""
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("device 'cuda': torch sees no CUDA device")
        where = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(where)
    elif device == "cpu":
        where = torch.device("cpu")
    else:
        raise ValueError(f"device {device!r}: expected 'cpu' or 'cuda'")
    if threads is not None:
        torch.set_num_threads(threads)
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True):
        store = connect_store(port, host)
    else:
        timeout = timedelta(seconds=STORE_TIMEOUT_S)
        store = dist.TCPStore(host, port, world, rank == 0, timeout=timeout)
    chosen = backend or ("nccl" if where.type == "cuda" else "gloo")
    dist.init_process_group(chosen, store=store, rank=rank, world_size=world)
    return Member(rank, world, local_rank, where, store)


def report(item: Any) -> None:
    """Send ``item`` (picklable) from a rank to its launcher; ``launch`` returns every rank's items."""
    if _reports is None:
        raise RuntimeError("report() is for a rank started by runtime.launch.launch")
    _reports.put(("item", item))


def _rank_main(rank: int, env: dict[str, str], reports: Any, target: Callable[..., Any], args: tuple) -> None:
    global _reports
    die_with_parent()
    os.environ.update(env, RANK=str(rank), LOCAL_RANK=str(rank))
    _reports = reports
    try:
        target(rank, *args)
    except BaseException:
        reports.put(("error", rank, traceback.format_exc()))
        raise


def describe_exit(code: int | None) -> str:
    """A process's exit code in words: "exit code 1", "killed by SIGKILL", "still running"."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def launch(
    target: Callable[..., Any],
    world: int,
    args: tuple = (),
    *,
    roles: Sequence[str] | None = None,
    limit_s: float | None = None,
    expected: int | None = None,
    progress: Callable[[float, str], None] | None = None,
    on_start: Callable[[list], None] | None = None,
) -> list[Any]:
    """Run ``target(rank, *args)`` in ``world`` rank processes and return what they ``report``ed.

    ``roles[rank]`` names a rank in messages ("PS 1"; default "rank r"). ``expected``: how many reports
    a complete launch gives (``progress`` gets the fraction received; fewer is a failure). ``on_start``
    (tests) gets the started processes, in rank order. See the module docstring for failures."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    reports = ctx.Queue()
    store = host_store()  # held until every rank has exited: the ranks rendezvous on it
    env = {
        "MASTER_ADDR": HOST,
        "MASTER_PORT": str(store.port),
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(world),
        "TORCHELASTIC_USE_AGENT_STORE": str(True),
    }
    names = list(roles) if roles is not None else [f"rank {r}" for r in range(world)]
    procs = [ctx.Process(target=_rank_main, args=(r, env, reports, target, args)) for r in range(world)]
    for p in procs:
        p.start()
    if on_start is not None:
        on_start(procs)
    items: list[Any] = []
    errors: dict[int, str] = {}
    deadline = None if limit_s is None else time.monotonic() + limit_s
    died: list[int] = []  # ranks in the order they were seen dead
    finished = False

    def take(timeout: float) -> bool:
        try:
            message = reports.get(timeout=timeout)
        except queue_module.Empty:
            return False
        if message[0] == "item":
            items.append(message[1])
            if progress is not None and expected:
                progress(len(items) / expected, f"{len(items)}/{expected} reports")
        else:
            errors[message[1]] = message[2]
        return True

    try:
        while True:
            if take(POLL_S):
                continue
            codes = [p.exitcode for p in procs]
            died += [r for r, c in enumerate(codes) if c not in (None, 0) and r not in died]
            if died or all(c == 0 for c in codes) or (deadline is not None and time.monotonic() > deadline):
                break
        finished = not died and all(p.exitcode == 0 for p in procs)
    finally:
        _stop(procs, at_once=not finished)  # a failure or an interrupt stops the group now
    while take(0.05):  # what the ranks sent before they exited
        pass
    del store
    _check(procs, names, died, errors, limit_s, len(items), expected)
    return items


def _check(
    procs: list,
    names: list[str],
    died: list[int],
    errors: dict[int, str],
    limit_s: float | None,
    received: int,
    expected: int | None,
) -> None:
    """Raise ``RankFailure`` unless every rank exited 0. ``died``: the ranks seen dead while the launch
    ran, in that order (the others were stopped by the launcher, or ran past the limit)."""
    codes = [p.exitcode for p in procs]
    if not died:
        if any(c != 0 for c in codes):
            raise RankFailure(
                f"the launch ran past its {limit_s:.0f} s limit with {received} reports; every rank was"
                f" stopped. Exit codes by rank: {codes}",
                -1,
                "",
                codes,
            )
        if expected is not None and received != expected:
            raise RankFailure(f"the ranks exited with {received}/{expected} reports", -1, "", codes)
        return
    # a rank killed by a signal is the cause; ranks that raised after it saw it vanish
    signalled = [r for r in died if (codes[r] or 0) < 0]
    rank = (signalled or died)[0]
    others = [f"{names[r]} {describe_exit(codes[r])}" for r in died if r != rank]
    message = (
        f"{names[rank]} (rank {rank}) died during the run ({describe_exit(codes[rank])}); the run is"
        f" abandoned with no result: the other {len(procs) - 1} ranks were stopped"
        + (f" (also dead: {'; '.join(others)})" if others else "")
        + f". Exit codes by rank: {codes}"
        + (f"\n{errors[rank].rstrip()}" if rank in errors else "")
    )
    raise RankFailure(message, rank, names[rank], codes)


def _stop(procs: list, at_once: bool) -> None:
    """Reap every process. ``at_once`` (a failure): the ones still running get SIGTERM now, SIGKILL
    after ``STOP_S``; otherwise they have all exited already."""
    if at_once:
        for p in procs:
            if p.is_alive():
                p.terminate()
    deadline = time.monotonic() + STOP_S
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
