"""Kind ``spot``: a training job buying spot and on-demand machines from a replayed market ("Proteus:
Agile ML Elasticity through Tiered Reliability in Dynamic Resource Markets", §4-§5: BidBrain and
AgileML), simulated at instance level."""

from __future__ import annotations

from pathlib import Path

from clustertwin.kinds.spec import KindSpec, Reproduce, lazy, result_metrics
from clustertwin.scenarios.spot_schema import SPOT_PATH_FIELDS, SpotScenario


def _reproduce(name: str, quick: bool, *, out: Path, workers: int | None) -> int:
    from clustertwin.reproduce_proteus import reproduce

    return reproduce(quick, out)


SPEC = KindSpec(
    name="spot",
    description="BidBrain + AgileML: spot-market acquisition, tiered-reliability elastic PS, instance level",
    schema=SpotScenario,
    path_fields=SPOT_PATH_FIELDS,
    check_tables=lazy("clustertwin.scenarios.spot_results:check_spot_tables"),
    metrics=result_metrics("clustertwin.analysis.spot_metrics:spot_metrics"),
    simulate=lazy("clustertwin.sim.spot:run"),
    reproduce=Reproduce(lambda: ["proteus"], _reproduce),
)
