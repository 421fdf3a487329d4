"""Block ownership across reassignments ([PSLD], §5.2 and Figs. 9-10).

A vanilla (MXNet) PS holds its blocks' parameters and optimizer state, so a reassignment moves that state
from the old to the new owner; a BytePS PS only sums gradients, so a reassignment only swaps the map.
The scheduler keeps a version counter per parameter and broadcasts the reassignment step
k* = v_now + ceil(RTT_max / T_iter) + 1 (the notes' choice; the paper only says it is computed from the
current version and the RTT): every owner migrates when its version reaches k*, so each update is applied
exactly once, by exactly one owner.

``BlockStore`` is the ledger both executors (and the property tests) use to check that invariant.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def reassignment_step(version_now: int, rtt_max_s: float, iteration_s: float) -> int:
    """k*: the first iteration that every party can switch at."""
    if iteration_s <= 0:
        return version_now + 1
    return version_now + math.ceil(rtt_max_s / iteration_s) + 1


def migrations(old: Sequence[int], new: Sequence[int]) -> list[tuple[int, int, int]]:
    """(block, from, to) for every block whose owner changes."""
    if len(old) != len(new):
        raise ValueError(f"assignments differ in length: {len(old)} vs {len(new)}")
    return [(b, o, n) for b, (o, n) in enumerate(zip(old, new, strict=True)) if o != n]


class BlockStore:
    """Who holds each block, and (vanilla) the block's version at its holder.

    ``mode="vanilla"``: ``held[server][block]`` is the number of updates applied to that block's
    parameters; a reassignment moves the entry. ``mode="byteps"``: servers hold nothing between
    iterations; ``applied[block]`` counts aggregations instead.
    """

    def __init__(self, owners: Sequence[int], mode: str = "vanilla") -> None:
        if mode not in ("vanilla", "byteps"):
            raise ValueError(f"mode must be vanilla or byteps, got {mode!r}")
        self.mode = mode
        self.owner = list(owners)
        self.applied = [0] * len(owners)
        self.held: dict[int, dict[int, int]] = {}
        if mode == "vanilla":
            for b, r in enumerate(owners):
                self.held.setdefault(r, {})[b] = 0

    def step(self) -> None:
        """One synchronous iteration: every block's update is applied once, at its owner."""
        for b, r in enumerate(self.owner):
            if self.mode == "vanilla":
                self.held[r][b] += 1
            self.applied[b] += 1

    def reassign(self, new_owners: Sequence[int]) -> list[tuple[int, int, int]]:
        """Switch to ``new_owners`` at an iteration boundary; returns the moves (vanilla: state moved)."""
        moves = migrations(self.owner, new_owners)
        if self.mode == "vanilla":
            for b, src, dst in moves:
                state = self.held[src].pop(b)
                self.held.setdefault(dst, {})[b] = state
        self.owner = list(new_owners)
        return moves

    def check(self, iterations: int) -> None:
        """Raise ``AssertionError`` unless each block has one owner holding exactly ``iterations`` updates."""
        if any(a != iterations for a in self.applied):
            raise AssertionError(f"updates applied {self.applied} != {iterations} each")
        if self.mode == "vanilla":
            holders: dict[int, list[int]] = {}
            for r, blocks in self.held.items():
                for b, v in blocks.items():
                    holders.setdefault(b, []).append(r)
                    if v != iterations:
                        raise AssertionError(
                            f"block {b} at server {r} has {v} updates, expected {iterations}"
                        )
            for b, r in enumerate(self.owner):
                if holders.get(b) != [r]:
                    raise AssertionError(f"block {b} is held by {holders.get(b)}, owner is {r}")
            if len(holders) != len(self.owner):
                raise AssertionError("a server holds a block that does not exist")
