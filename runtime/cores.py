"""Core pinning (``real.pin_cores``): each CPU worker slot is its own cores, as a GPU slot is its device.

Unpinned, the OS moves the single-thread CPU jobs between cores as it likes (and, on a host with SMT, may
put two of them on the siblings of one physical core). Pinned, every slot has cores of its own for the
whole run, and the profile measures each pair on the very cores the run gives it (both hand out cores
with :func:`slot_cores`). That matters on the GPU host, whose vCPUs differ in speed by core and over time
(docs/gavel-real.md, "Ninth session").

The cores are handed out in :func:`core_order`: one logical CPU per physical core first, then their SMT
siblings, so that siblings are shared only when the slots outnumber the physical cores. Physical cores
are interleaved over packages (sockets), spreading the slots' memory traffic over every socket's memory
controllers and caches; a slot of several threads may then span two sockets.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from clustertwin.errors import InputError

if TYPE_CHECKING:
    from clustertwin.scenarios.gavel_schema import Scenario

SYSFS_CPU = Path("/sys/devices/system/cpu")

SlotCores = dict[str, list[tuple[int, ...]]]  # worker type -> its slots' cores, in the type's slot order


def read_topology(cpus: Iterable[int], root: Path = SYSFS_CPU) -> dict[int, tuple[int, int]]:
    """(package, core id) of each logical CPU whose topology sysfs shows; a core id is unique only within
    its package. CPUs missing here count as cores of their own in :func:`core_order`."""
    topology = {}
    for cpu in cpus:
        folder = root / f"cpu{cpu}" / "topology"
        try:
            package = int((folder / "physical_package_id").read_text())
            topology[cpu] = (package, int((folder / "core_id").read_text()))
        except (OSError, ValueError):
            continue
    return topology


def core_order(cpus: Iterable[int], topology: Mapping[int, tuple[int, int]]) -> list[int]:
    """The logical CPUs in the order they are handed out: the first sibling of every physical core
    (cores interleaved over packages: package 0's first core, package 1's first core, package 0's second
    core, ...), then every core's second sibling in the same order, and so on. Packages, cores and siblings
    are ordered by their lowest CPU number."""
    cores: dict[tuple[int, int], list[int]] = {}
    for cpu in sorted(cpus):
        # A CPU of unknown topology is a core of its own, in a package of its own.
        cores.setdefault(topology.get(cpu, (-1 - cpu, 0)), []).append(cpu)
    packages: dict[int, list[list[int]]] = {}
    for (package, _), siblings in sorted(cores.items(), key=lambda item: item[1][0]):
        packages.setdefault(package, []).append(siblings)
    order = []
    for rank in range(max((len(s) for s in cores.values()), default=0)):
        for index in range(max(len(p) for p in packages.values())):
            for package in packages.values():
                if index < len(package) and rank < len(package[index]):
                    order.append(package[index][rank])
    return order


def assign_cores(order: Sequence[int], workers: Sequence[tuple[str, str, int]], threads: int) -> SlotCores:
    """Cores per slot of each worker type, handed out from ``order`` in the order of ``workers`` (worker
    type, device, slots): ``threads`` cores per slot of a cpu type, one per slot of a cuda type (the GPU
    job's host thread). No core goes to two slots; ValueError when ``order`` holds too few."""
    cpu_slots = sum(n for _, device, n in workers if device == "cpu")
    gpu_slots = sum(n for _, device, n in workers if device == "cuda")
    needed = cpu_slots * threads + gpu_slots
    if needed > len(order):
        raise ValueError(
            f"real.pin_cores: {cpu_slots} CPU worker slots x {threads} thread(s) and {gpu_slots} GPU"
            f" slot(s) (one host thread each) need {needed} cores, but this process may run on only"
            f" {len(order)} CPUs ({sorted(order)}); set real.pin_cores: false or give it more CPUs"
        )
    assigned: SlotCores = {}
    taken = 0
    for name, device, slots in workers:
        width = threads if device == "cpu" else 1
        assigned[name] = [tuple(order[taken + i * width : taken + (i + 1) * width]) for i in range(slots)]
        taken += slots * width
    return assigned


def slot_cores(scenario: Scenario, cpus: Collection[int] | None = None) -> SlotCores:
    """The cores of every worker slot of a pinned scenario, on ``cpus`` (by default the CPUs this process
    may run on).

    The worker types come in the order of ``real.workers``, not the run's agents' (the throughput table's
    order): the profile, which runs before any table exists, must hand out the same cores.
    """
    real = scenario.real
    assert real is not None
    if not hasattr(os, "sched_setaffinity"):
        raise InputError(f"{scenario.source}: field real.pin_cores", "pinning needs Linux")
    if cpus is None:
        cpus = os.sched_getaffinity(0)
    workers = [(name, w.device, scenario.cluster.gpus[name]) for name, w in real.workers.items()]
    try:
        return assign_cores(core_order(cpus, read_topology(cpus)), workers, real.threads_per_cpu_worker)
    except ValueError as err:
        raise InputError(scenario.source, str(err)) from None  # the message names the field


def format_slots(slots: Sequence[Collection[int]]) -> str:
    """An agent's ``--cores``: slots separated by commas, a slot's cores by ``+`` (``0+8,1+9``)."""
    return ",".join("+".join(map(str, sorted(cores))) for cores in slots)


def parse_slots(text: str) -> list[frozenset[int]]:
    """The inverse of :func:`format_slots`."""
    return [frozenset(int(cpu) for cpu in slot.split("+")) for slot in text.split(",")]


def pin_child(cores: Collection[int] | None) -> Callable[[], None] | None:
    """A preexec function that starts a child process (its threads and children too) on ``cores`` only;
    None for ``cores`` None."""
    return None if cores is None else functools.partial(os.sched_setaffinity, 0, cores)


def pin_process(pid: int, cores: Collection[int]) -> None:
    """Move every thread of the running process ``pid`` onto ``cores``.

    ``os.sched_setaffinity`` moves one thread: each thread has a mask of its own, so a process already
    running threads (torch's intra-op pool) is moved thread by thread, as ``/proc/<pid>/task`` lists
    them. A thread started meanwhile by one not yet moved inherits the old mask, so the list is read
    again until it shows no new thread. ProcessLookupError when the process is gone.
    """
    task = Path(f"/proc/{pid}/task")
    moved: set[int] = set()
    while True:
        try:
            tids = {int(tid) for tid in os.listdir(task)}
        except FileNotFoundError:
            raise ProcessLookupError(pid) from None
        if tids <= moved:
            return
        for tid in tids - moved:
            with contextlib.suppress(ProcessLookupError):  # the thread exited meanwhile
                os.sched_setaffinity(tid, cores)
        moved |= tids
