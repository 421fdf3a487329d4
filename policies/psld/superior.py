"""Algorithm 1 of [PSLD] (§4.2): the superior PS set.

Starting from an infinite threshold, repeatedly take the remaining PS with the lowest *upper* bound of
its predicted time for the reference load ``s = model_size / |PS|``; stop when that PS's *lower* bound is
at or above the threshold (it is confidently slower than the set so far); otherwise admit it and raise the
threshold to its upper bound. The first PS is always admitted.

``strict=True`` is the variant of the notes' ambiguity (§2.3): the stop test uses the smallest lower
bound over *all* remaining PSs, so a PS with a wide interval is not excluded by accident.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from clustertwin.policies.psld.profiling import Z_90, PerfModel


def superior_set(
    model: PerfModel, servers: Sequence[int], s_ref: float, *, z: float = Z_90, strict: bool = False
) -> tuple[int, ...]:
    """The superior PSs (in admission order) among ``servers``; every server must be in ``model``."""
    remained = list(servers)
    superior: list[int] = []
    threshold = math.inf
    while remained:
        best = min(remained, key=lambda r: (model[r].upper(s_ref, z), r))
        lower = min(model[r].lower(s_ref, z) for r in remained) if strict else model[best].lower(s_ref, z)
        if lower >= threshold:
            break
        threshold = model[best].upper(s_ref, z)
        superior.append(best)
        remained.remove(best)
    return tuple(superior)
