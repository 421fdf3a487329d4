"""The registry of scenario kinds: one :class:`KindSpec` per kind (``clustertwin/kinds/<kind>.py`` for
the built-in ones), looked up by the command line, the Python API, reports, sweeps and the fidelity suite.

A kind of one's own is a spec plus ``register_kind(spec)``; its schema is registered with the scenario
loader at the same time, so its scenario files load, run, plot, report and compare like a built-in's.
"""

from __future__ import annotations

import importlib

from clustertwin.errors import InputError
from clustertwin.kinds.spec import (
    Compared,
    Comparison,
    Emit,
    KindSpec,
    ProfileRequest,
    Progress,
    Reproduce,
)
from clustertwin.scenarios.kinds import register_schema, unregister_schema

__all__ = [
    "Compared",
    "Comparison",
    "Emit",
    "KindSpec",
    "ProfileRequest",
    "Progress",
    "Reproduce",
    "find_kind",
    "get_kind",
    "kinds",
    "register_kind",
    "unregister_kind",
]

# The built-in kinds' modules, in the order `clustertwin list` shows them.
_BUILTIN = ("gavel", "flexrr", "pipedream", "spot", "psld")

KINDS: dict[str, KindSpec] = {}


def register_kind(spec: KindSpec) -> KindSpec:
    """Add a kind; its name must be new. Returns the spec."""
    if spec.name in KINDS:
        raise ValueError(f"scenario kind {spec.name!r} registered twice")
    register_schema(spec.name, spec.schema, spec.path_fields)
    KINDS[spec.name] = spec
    return spec


def unregister_kind(name: str) -> None:
    """Remove a kind and its schema (a test's or a notebook's own, registered for a while)."""
    if KINDS.pop(name, None) is not None:
        unregister_schema(name)


def get_kind(name: str) -> KindSpec:
    """The spec of kind ``name``; an unknown name is an InputError listing the known ones."""
    try:
        return KINDS[name]
    except KeyError:
        raise InputError(f"kind {name}", f"unknown scenario kind; known: {', '.join(KINDS)}") from None


def find_kind(name: str) -> KindSpec | None:
    """The spec of kind ``name``, or None when no such kind is registered."""
    return KINDS.get(name)


def kinds() -> list[KindSpec]:
    """Every registered kind, built-in ones first."""
    return list(KINDS.values())


for _module in _BUILTIN:
    register_kind(importlib.import_module(f"clustertwin.kinds.{_module}").SPEC)
