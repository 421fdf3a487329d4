"""Registries of pluggable policies: a new policy is one file in ``policies/`` plus one ``@register`` line.

Every pluggable family (Gavel allocation policies, PSLD placement, FlexRR modes, straggler models,
pipeline schedules, planners, spot acquisition, fault tolerance) is one :class:`Registry`. A scenario names
an entry (``policy.name: las``); executors build it by name and never import a policy module directly;
``clustertwin list`` prints every family's names with a one-line description each.

A family's built-in entries register themselves when their package is imported; the registry imports that
package the first time it is asked for a name, so that looking up never depends on import order.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

if TYPE_CHECKING:  # the policy packages import this module to register themselves
    import numpy as np
    from clustertwin.policies.gavel.problem import Allocation, AllocationInput

T = TypeVar("T")


class UnknownName(KeyError):
    """A name that no entry of the family has; its message lists the names that exist."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class Entry(Generic[T]):
    name: str
    factory: T
    description: str


class Registry(Generic[T]):
    """The named entries of one pluggable family.

    ``family`` is what a user calls the family (``"psld placement"``); ``noun`` names one entry in error
    messages (default: the family); ``builtin`` is the package whose import registers the built-in entries.
    """

    def __init__(
        self, family: str, description: str, builtin: str | None = None, noun: str | None = None
    ) -> None:
        self.family = family
        self.noun = noun or family
        self.description = description
        self._builtin = builtin
        self._entries: dict[str, Entry[T]] = {}
        FAMILIES[family] = self

    def register(self, name: str, description: str | None = None) -> Callable[[T], T]:
        """Decorator: register ``factory`` under ``name``; the description defaults to its docstring's
        first line."""

        def add(factory: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.family} {name!r} registered twice")
            text = description if description is not None else _first_line(factory)
            self._entries[name] = Entry(name, factory, text)
            return factory

        return add

    def unregister(self, name: str) -> None:
        """Remove an entry (a test's or a notebook's own, registered for a while)."""
        self._entries.pop(name, None)

    def names(self) -> list[str]:
        self._load()
        return sorted(self._entries)

    def entries(self) -> list[Entry[T]]:
        self._load()
        return [self._entries[n] for n in sorted(self._entries)]

    def get(self, name: str) -> T:
        self._load()
        try:
            return self._entries[name].factory
        except KeyError:
            raise UnknownName(
                f"unknown {self.noun} {name!r}; known: {', '.join(sorted(self._entries))}"
            ) from None

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def _load(self) -> None:
        if self._builtin is not None:
            builtin, self._builtin = self._builtin, None
            importlib.import_module(builtin)


FAMILIES: dict[str, Registry[Any]] = {}


def families() -> dict[str, Registry[Any]]:
    """Every registry, by family name, with its built-in entries loaded."""
    import clustertwin.policies as package

    for module in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
        if module.ispkg:  # a family's package defines its registries and registers its entries
            importlib.import_module(module.name)
    for registry in FAMILIES.values():
        registry._load()
    return dict(sorted(FAMILIES.items()))


def _first_line(obj: object) -> str:
    """The docstring's first sentence, without a trailing pointer to the module docstring."""
    doc = (getattr(obj, "__doc__", None) or "").strip()
    line = doc.splitlines()[0].rstrip(".") if doc else ""
    return line.removesuffix(" (the module docstring has the formulation)")


class AllocationPolicy(Protocol):
    """A Gavel-level policy: active jobs and accelerator counts in, allocation matrix X out.

    A policy that reads optional inputs of ``AllocationInput`` names them in a ``needs`` attribute
    (``prices``, ``budget``, ``entities``), so that a scenario lacking one, or giving one no policy reads,
    is refused when the scheduler is built rather than at the first allocation.
    """

    name: str

    def allocate(self, inp: AllocationInput, rng: np.random.Generator) -> Allocation: ...


ALLOCATION: Registry[Callable[..., AllocationPolicy]] = Registry(
    "gavel allocation",
    "Gavel's allocation policies (policy.name of kind gavel)",
    builtin="clustertwin.policies.gavel",
    noun="policy",
)
register = ALLOCATION.register


def available() -> list[str]:
    return ALLOCATION.names()


def make_policy(name: str, **params: Any) -> AllocationPolicy:
    """Build a registered policy; unknown names and parameters fail with the allowed ones listed."""
    factory = ALLOCATION.get(name)
    try:
        return factory(**params)
    except TypeError as err:
        raise ValueError(f"policy {name!r}: bad parameters {params}: {err}") from err
