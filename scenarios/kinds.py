"""The scenario kinds: for each ``kind:`` value, its schema and the fields of it that hold file paths.

A scenario file names its kind; the loader validates it against that kind's model. Each kind is one
grain of the simulator (DESIGN.md "Fidelity levels"): Gavel at job level, FlexRR at iteration/message
level, spot markets at instance level (and, with a ``real:`` section, the Proteus runtime twin), PipeDream at
op level.
"""

from __future__ import annotations

from clustertwin.scenarios.flexrr_schema import FLEXRR_PATH_FIELDS, FlexRRScenario
from clustertwin.scenarios.gavel_schema import PATH_FIELDS, Scenario
from clustertwin.scenarios.pipedream_schema import PIPEDREAM_PATH_FIELDS, PipeDreamScenario
from clustertwin.scenarios.psld_schema import PSLDScenario
from clustertwin.scenarios.spot_schema import SPOT_PATH_FIELDS, SpotScenario
from pydantic import BaseModel

AnyScenario = Scenario | FlexRRScenario | PipeDreamScenario | SpotScenario | PSLDScenario

KINDS: dict[str, tuple[type[BaseModel], dict[str, tuple[str, ...]]]] = {
    "gavel": (Scenario, PATH_FIELDS),
    "flexrr": (FlexRRScenario, FLEXRR_PATH_FIELDS),
    "pipedream": (PipeDreamScenario, PIPEDREAM_PATH_FIELDS),
    "spot": (SpotScenario, SPOT_PATH_FIELDS),
    "psld": (PSLDScenario, {}),
}
