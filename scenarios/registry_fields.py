"""Scenario fields that name a registry entry (``policy: bidbrain``): validated against the registry's
names, so that a newly registered policy is accepted without touching a schema."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from clustertwin.policies.registry import Registry


def registered(registry: Registry[Any]) -> Callable[[str], str]:
    """A field validator: the value must name an entry of ``registry`` (the error lists the names)."""

    def check(name: str) -> str:
        if name not in registry:
            raise ValueError(f"unknown {registry.noun} {name!r}; known: {', '.join(registry.names())}")
        return name

    return check
