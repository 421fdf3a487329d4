"""The elasticity controller's bookkeeping ([Proteus] §1.3, §1.4, §1.6).

It runs in the launcher, next to the c10d store it hosts, so it outlives every training process (the
paper: the EC is not replicated and may be restarted; here it is never evicted). Every decision is a
call into the fault-tolerance scheme (``policies.spot.FAULT_TOLERANCE``: stage by ratio, whether
ActivePSs exist, whether the reliable processes work) and ``policies.agileml`` (N fixed partitions,
ActivePS hosts — half of the machines, longest-running transient first — and migration plans on
eviction), and this module only turns them into an :class:`Epoch`: who works on which share of the
global batch, and which process serves and which backs up each partition. A scheme without partitions
(checkpoint, the Standard+Checkpoint baseline) is a traditional PS instead: partitions round-robin over
the live processes, no backups.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from clustertwin.policies.agileml import (
    PartitionTable,
    choose_active_ps_hosts,
    num_partitions,
    plan_evictions,
)
from clustertwin.policies.spot import FaultTolerance


@dataclass(frozen=True)
class Epoch:
    """One membership configuration, bound to clocks by the processes (see ``process.py``).

    ``server[p]`` serves partition p to the workers (an ActivePS, or the ParamServ = its BackupPS in
    stage 1); ``backup[p]`` is its BackupPS (None in checkpoint mode). ``stop``: the job ends at the first
    clock bound to this epoch.
    """

    eid: int
    workers: tuple[str, ...]
    server: tuple[str, ...]
    backup: tuple[str | None, ...]
    stage: int
    stop: bool = False


@dataclass
class Controller:
    """Membership and partition ownership of one job; produces the epochs."""

    reliable: list[str]
    transient: list[str]
    scheme: FaultTolerance
    n_partitions: int = 0
    table: PartitionTable | None = None
    started: dict[str, float] = field(default_factory=dict)  # transient process -> start order
    migrations: int = 0
    max_machines: int = 0  # the most machines the job may ever hold (0: the start size)
    _next: int = 0

    def __post_init__(self) -> None:
        # N = ½ × the most machines the job could ever use (§1.4).
        self.n_partitions = num_partitions(max(self.max_machines, len(self.reliable) + len(self.transient)))
        self.started = {name: float(i) for i, name in enumerate(self.transient)}
        if self.scheme.partitioned and self.reliable:
            self.table = PartitionTable.create(self.n_partitions, self.reliable)

    def join(self, names: Sequence[str], reliable: bool) -> None:
        """Machines the job acquired join (scale-up, §1.3): transient ones are the most recently started,
        so the last to host ActivePSs; ActivePS hosts are re-chosen for the new machine count (the stage
        may rise). Reliable machines own partitions only if they come before the table exists."""
        if reliable:
            self.reliable += list(names)
            if self.scheme.partitioned and self.table is None:
                self.table = PartitionTable.create(self.n_partitions, self.reliable)
        else:
            order = max(self.started.values(), default=-1.0)
            for i, name in enumerate(names):
                self.transient.append(name)
                self.started[name] = order + 1.0 + i
        if self.table is not None:
            stage = self.stage()
            if stage is not None and self.scheme.has_active_ps(stage):
                current = [h for h in dict.fromkeys(self.table.active) if h is not None]
                hosts = choose_active_ps_hosts(self.started, current, len(self.live))
            else:
                hosts = []
            self.migrations += len(self.table.assign_active(hosts))

    def can_run(self) -> bool:
        """Whether the job can train with these machines (AgileML needs a reliable one for its state)."""
        return bool(self.live) and self.scheme.stage(len(self.reliable), len(self.transient)) is not None

    @property
    def live(self) -> list[str]:
        return self.reliable + self.transient

    def stage(self) -> int:
        stage = self.scheme.stage(len(self.reliable), len(self.transient))
        assert stage is not None  # the schema requires a reliable process
        return stage

    def first_epoch(self) -> Epoch:
        if self.table is not None and self.scheme.has_active_ps(self.stage()):
            hosts = choose_active_ps_hosts(self.started, [], len(self.live))
            self.table.assign_active(hosts)
        return self.epoch()

    def evict(self, doomed: Sequence[str]) -> Epoch:
        """The epoch after ``doomed`` (transient processes) leave: §1.6 "Some evicted" / "All evicted"."""
        self.remove(doomed)
        return self.epoch()

    def remove(self, doomed: Sequence[str]) -> None:
        """``doomed`` (transient processes) leave; partitions re-planned (no epoch: none may be left)."""
        gone = set(doomed)
        self.transient = [t for t in self.transient if t not in gone]
        for name in gone:
            self.started.pop(name, None)
        if self.table is not None:
            if self.scheme.has_active_ps(self.stage()):
                moves = plan_evictions(self.table, list(doomed), self.started, len(self.live))
            else:  # down to stage 1: the BackupPSs become ParamServs (§1.3 "2→1")
                moves = self.table.assign_active([])
            self.migrations += len(moves)

    def stop_epoch(self) -> Epoch:
        return Epoch(self._bump(), (), (), (), self.stage(), stop=True)

    def _bump(self) -> int:
        self._next += 1
        return self._next - 1

    def epoch(self) -> Epoch:
        """A fresh epoch for the current membership and partition table."""
        stage = self.stage()
        if self.table is None:  # traditional PS: partitions round-robin over every live process
            procs = sorted(self.live, key=_order)
            assert procs, "an epoch needs a live process"
            server = tuple(procs[p % len(procs)] for p in range(self.n_partitions))
            backup: tuple[str | None, ...] = (None,) * self.n_partitions
            workers = tuple(procs)
        else:
            pairs = zip(self.table.active, self.table.backup, strict=True)
            server = tuple(a if a is not None else b for a, b in pairs)
            backup = tuple(self.table.backup)
            on_reliable = self.scheme.reliable_does_work(len(self.reliable), len(self.transient))
            workers = tuple(sorted((self.reliable if on_reliable else []) + self.transient, key=_order))
        return Epoch(self._bump(), workers, server, backup, stage)


def _order(name: str) -> tuple[str, int]:
    """r0, r1, …, t0, t1, … in numeric order (t10 after t9)."""
    return name[0], int(name[1:])
