"""The scenario kinds' schemas: for each ``kind:`` value, its pydantic model and the fields of it that
hold file paths.

A scenario file names its kind; the loader validates it against that kind's model. This is the lower
half of the kind registry: the loader sits below the command line and must not import it, so the schema
of each kind lives here, and ``clustertwin.kinds.register_kind`` registers a new kind's schema here too
(a kind defined in a test file or a notebook then validates through the normal loader). The built-in
kinds are one grain of the simulator each: Gavel at job level, FlexRR and PSLD at iteration/message level,
spot markets at instance level, PipeDream at op level.
:class:`ScenarioBase` (name, kind, seed, description) is what every kind's schema extends.
"""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.scenarios.flexrr_schema import FLEXRR_PATH_FIELDS, FlexRRScenario
from clustertwin.scenarios.gavel_schema import PATH_FIELDS, Scenario, ScenarioBase
from clustertwin.scenarios.pipedream_schema import PIPEDREAM_PATH_FIELDS, PipeDreamScenario
from clustertwin.scenarios.psld_schema import PSLD_PATH_FIELDS, PSLDScenario
from clustertwin.scenarios.spot_schema import SPOT_PATH_FIELDS, SpotScenario
from pydantic import BaseModel

__all__ = [
    "AnyScenario",
    "PathFields",
    "Schema",
    "ScenarioBase",
    "register_schema",
    "schema_for",
    "schema_kinds",
    "unregister_schema",
]

AnyScenario = Scenario | FlexRRScenario | PipeDreamScenario | SpotScenario | PSLDScenario

# A path field -> the values of it that are keywords, not paths (e.g. ``throughputs: simulation``).
PathFields = dict[str, tuple[str, ...]]


@dataclass(frozen=True)
class Schema:
    """What the loader needs of a kind: its model and the dotted fields of it that hold file paths
    (relative ones are resolved against the scenario file's folder)."""

    model: type[BaseModel]
    path_fields: PathFields


_SCHEMAS: dict[str, Schema] = {}


def register_schema(kind: str, model: type[BaseModel], path_fields: PathFields | None = None) -> None:
    """Make ``kind:`` valid in scenario files; registering the same schema again is a no-op."""
    schema = Schema(model, dict(path_fields or {}))
    known = _SCHEMAS.get(kind)
    if known is not None and known != schema:
        raise ValueError(f"scenario kind {kind!r} already has another schema ({known.model.__name__})")
    _SCHEMAS[kind] = schema


def unregister_schema(kind: str) -> None:
    """Forget a kind's schema (a test's or a notebook's own kind, registered for a while)."""
    _SCHEMAS.pop(kind, None)


def schema_for(kind: object) -> Schema | None:
    """The schema of ``kind``, or None when no kind of that name is registered."""
    return _SCHEMAS.get(kind) if isinstance(kind, str) else None


def schema_kinds() -> list[str]:
    """The registered kinds, in registration order."""
    return list(_SCHEMAS)


register_schema("gavel", Scenario, PATH_FIELDS)
register_schema("flexrr", FlexRRScenario, FLEXRR_PATH_FIELDS)
register_schema("pipedream", PipeDreamScenario, PIPEDREAM_PATH_FIELDS)
register_schema("spot", SpotScenario, SPOT_PATH_FIELDS)
register_schema("psld", PSLDScenario, PSLD_PATH_FIELDS)
