"""Kind ``spot_real``: AgileML (or checkpoint/restart) on real processes with evictions, the runtime half
of "Proteus: Agile ML Elasticity through Tiered Reliability in Dynamic Resource Markets" (§4). Its tables
also hold the simulator's prediction of the run, anchored on the measured step rate, so it has no
simulation of its own."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from clustertwin.kinds.spec import KindSpec, Progress, lazy, result_metrics
from clustertwin.scenarios.spot_real_schema import SPOT_REAL_PATH_FIELDS, SpotRealScenario

if TYPE_CHECKING:
    from clustertwin.scenarios.results import RunResult


def _run_real(scenario: SpotRealScenario, progress: Progress | None, snapshot_dir: Path | None) -> RunResult:
    from clustertwin.runtime.spot import run_real

    with tempfile.TemporaryDirectory(prefix="clustertwin-spot-") as tmp:
        return run_real(scenario, Path(tmp), progress)


SPEC = KindSpec(
    name="spot_real",
    description="AgileML on real processes with warned evictions; tables carry the simulator's prediction",
    schema=SpotRealScenario,
    path_fields=SPOT_REAL_PATH_FIELDS,
    check_tables=lazy("clustertwin.scenarios.spot_real_results:check_spot_real_tables"),
    metrics=result_metrics("clustertwin.scenarios.spot_real_results:spot_real_metrics"),
    no_simulator=(
        "kind spot_real is a real run (its tables hold the simulator's prediction of it, anchored on"
        " the measured step rate); use --backend real, or kind: spot to simulate a market"
    ),
    run_real=_run_real,
)
