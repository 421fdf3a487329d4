"""AgileML partitions, ActivePS placement and migration plans (Proteus §3.3; [Proteus]).

State is split at start-up into N fixed partitions, N = ½ × the most machines the job could ever use.
Every partition always has a BackupPS/ParamServ owner on a reliable machine; in stages 2 and 3 it also
has an ActivePS owner on a transient machine. Elasticity re-assigns partitions; keys are never re-sharded.

ActivePSs run on half of the machines; new ones go on the longest-running transient machines that have
none (longest-running = least likely to be evicted soon, by the paper's reasoning). When an ActivePS's
machine is evicted, each of its partitions moves to (i) a surviving ActivePS or (ii) a surviving
transient machine without one, by the migration protocol (new owner fetches a copy, old owner redirects
workers and forwards messages meanwhile).

Pure: node ids and start times in, assignments and plans out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


def num_partitions(max_machines: int) -> int:
    """N = ½ × the most machines AgileML could use (at least 1)."""
    return max(1, max_machines // 2)


def active_ps_target(n_machines: int) -> int:
    """How many ActivePSs: half the machines, rounded up."""
    return math.ceil(n_machines / 2)


def choose_active_ps_hosts(
    transient_started: Mapping[str, float], current_hosts: Sequence[str], n_machines: int
) -> list[str]:
    """ActivePS hosts: keep the surviving current ones, add the longest-running transient nodes.

    ``transient_started`` maps each live transient node to when it started; ties go by node id so the
    choice is deterministic. The result never exceeds the number of transient nodes.
    """
    target = min(active_ps_target(n_machines), len(transient_started))
    keep = [h for h in current_hosts if h in transient_started][:target]
    others = sorted((t, n) for n, t in transient_started.items() if n not in keep)
    return keep + [n for _, n in others[: target - len(keep)]]


@dataclass
class PartitionTable:
    """Owners of each partition: a reliable backup always; an ActivePS in stages 2/3 (None in stage 1)."""

    backup: list[str]
    active: list[str | None] = field(default_factory=list)

    @classmethod
    def create(cls, n: int, reliable: Sequence[str]) -> PartitionTable:
        """N partitions spread round-robin over the reliable nodes (sorted for determinism)."""
        if not reliable:
            raise ValueError("AgileML needs at least one reliable node to own partitions")
        nodes = sorted(reliable)
        return cls([nodes[i % len(nodes)] for i in range(n)], [None] * n)

    def assign_active(self, hosts: Sequence[str]) -> list[Migration]:
        """Spread partitions evenly over ``hosts`` (empty: stage 1), moving as few as possible."""
        n = len(self.backup)
        if not hosts:
            moves = [Migration(p, self.active[p], None) for p in range(n) if self.active[p] is not None]
            self.active = [None] * n
            return moves
        cap = math.ceil(n / len(hosts))
        load = {h: 0 for h in hosts}
        moves: list[Migration] = []
        loose = []
        for p, owner in enumerate(self.active):
            if owner in load and load[owner] < cap:
                load[owner] += 1
            else:
                loose.append(p)
        for p in loose:
            target = min(hosts, key=lambda h: (load[h], hosts.index(h)))
            load[target] += 1
            moves.append(Migration(p, self.active[p], target))
            self.active[p] = target
        return moves

    def owned_by(self, host: str) -> list[int]:
        """Partitions whose ActivePS is on ``host``."""
        return [p for p, owner in enumerate(self.active) if owner == host]


@dataclass(frozen=True)
class Migration:
    """Partition ``partition`` moves from ``source`` to ``target`` (None: the BackupPS takes over)."""

    partition: int
    source: str | None
    target: str | None


def plan_evictions(
    table: PartitionTable, doomed: Sequence[str], surviving_transient: Mapping[str, float], n_machines: int
) -> list[Migration]:
    """Where the partitions of evicted ActivePSs go (§3.3 "Some evicted"): to surviving ActivePSs or to
    surviving transient nodes without one (longest-running first); to the BackupPSs when no transient
    node survives. Mutates ``table``; returns the moves.
    """
    current = [h for h in dict.fromkeys(a for a in table.active if a is not None) if h not in set(doomed)]
    hosts = choose_active_ps_hosts(surviving_transient, current, n_machines)
    return table.assign_active(hosts)
