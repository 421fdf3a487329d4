"""The systems a FlexRR scenario compares (``mode:``; [Harlap] §3.4.1, "Systems Compared"): registry
``MODES``.

A mode is two settings both executors ask for: the consistency bound (the slack of §3.2.2's SSP gate; 0 is
BSP) and whether RapidReassignment (§3.3) moves work between workers.
"""

from __future__ import annotations

from typing import ClassVar

from clustertwin.policies.registry import Registry


class Mode:
    """A consistency model with RapidReassignment on or off."""

    slack: ClassVar[int]  # the default SSP bound: a worker may run this many iterations ahead of the slowest
    reassigns: ClassVar[bool]  # whether RapidReassignment runs (helper groups of the scenario's size)


MODES: Registry[type[Mode]] = Registry(
    "flexrr mode",
    "FlexRR's systems compared: consistency bound and reassignment (mode of kind flexrr)",
    builtin="clustertwin.policies.flexrr.modes",
    noun="mode",
)
register = MODES.register


def mode(name: str) -> type[Mode]:
    """The registered mode ``name`` (an unknown name lists the known ones)."""
    return MODES.get(name)


@register("bsp")
class BSP(Mode):
    """Bulk synchronous parallel: every worker waits for all at each iteration's end."""

    slack = 0
    reassigns = False


@register("ssp")
class SSP(Mode):
    """Stale synchronous parallel with slack 1, no reassignment."""

    slack = 1
    reassigns = False


@register("bsp_rr")
class BSPRR(Mode):
    """BSP with RapidReassignment."""

    slack = 0
    reassigns = True


@register("flexrr")
class FlexRR(Mode):
    """FlexRR: SSP (slack 1) with RapidReassignment."""

    slack = 1
    reassigns = True
