"""Helper and helpee groups ([Harlap], §3.3.1).

Each worker has a *helper group* (who may take its work) and a *helpee group* (whose work it may take).
The paper asks for one helper on the same machine and the rest on other machines, but gives no formula
(its 64-worker example is illustrative). We use a deterministic construction with equal in- and
out-degree [interp]: workers are placed round-robin (worker ``w`` on machine ``w mod M``), so
``w + M`` shares ``w``'s machine and ``w + 1 .. w + H - 1`` sit on H - 1 other machines. Helpee groups are
the inverse relation, so every group has size H.
"""

from __future__ import annotations


def machine_of(worker: int, machines: int) -> int:
    """Round-robin placement (§3.3.1's example places 64 workers round-robin on 8 machines)."""
    return worker % machines


def helper_groups(workers: int, machines: int, size: int) -> list[tuple[int, ...]]:
    """``helpers[w]``: the workers allowed to take work from ``w`` (at most ``workers - 1`` of them)."""
    if workers < 1 or machines < 1 or workers % machines:
        raise ValueError(f"need workers a positive multiple of machines, got {workers} and {machines}")
    size = min(size, workers - 1)
    groups = []
    for w in range(workers):
        candidates: list[int] = []
        if workers > machines:  # a co-located worker exists
            candidates.append((w + machines) % workers)
        candidates.extend((w + j) % workers for j in range(1, workers))
        group: list[int] = []
        for c in candidates:
            if len(group) >= size:
                break
            if c != w and c not in group:
                group.append(c)
        groups.append(tuple(group))
    return groups


def helpee_groups(helpers: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The inverse relation: ``helpees[h]`` are the workers that list ``h`` as a helper."""
    helpees: list[list[int]] = [[] for _ in helpers]
    for w, group in enumerate(helpers):
        for h in group:
            helpees[h].append(w)
    return [tuple(sorted(g)) for g in helpees]
