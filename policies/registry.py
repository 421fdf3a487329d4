"""Policy registry: a new policy is one file in ``policies/`` plus one ``@register`` line.

Executors look policies up by name; they never import a policy module directly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the policy packages import this module to register themselves
    import numpy as np
    from clustertwin.policies.gavel.problem import Allocation, AllocationInput


class AllocationPolicy(Protocol):
    """A Gavel-level policy: active jobs and accelerator counts in, allocation matrix X out."""

    name: str

    def allocate(self, inp: AllocationInput, rng: np.random.Generator) -> Allocation: ...


_REGISTRY: dict[str, Callable[..., AllocationPolicy]] = {}


def register(name: str) -> Callable[[Callable[..., AllocationPolicy]], Callable[..., AllocationPolicy]]:
    def add(factory: Callable[..., AllocationPolicy]) -> Callable[..., AllocationPolicy]:
        if name in _REGISTRY:
            raise ValueError(f"policy {name!r} registered twice")
        _REGISTRY[name] = factory
        return factory

    return add


def available() -> list[str]:
    _load_builtin()
    return sorted(_REGISTRY)


def make_policy(name: str, **params: Any) -> AllocationPolicy:
    """Build a registered policy; unknown names and parameters fail with the allowed ones listed."""
    _load_builtin()
    if name not in _REGISTRY:
        raise KeyError(f"unknown policy {name!r}; known policies: {', '.join(sorted(_REGISTRY))}")
    try:
        return _REGISTRY[name](**params)
    except TypeError as err:
        raise ValueError(f"policy {name!r}: bad parameters {params}: {err}") from err


def _load_builtin() -> None:
    # Importing the package runs every module's @register.
    import clustertwin.policies.gavel  # noqa: F401
