"""Stragglers among a spot job's workers, and FlexRR inside them ([Harlap] ch. 3 and §6.2.1): how much
longer an iteration of ``n`` workers takes than an undelayed one, measured by the FlexRR simulator.

The spot engine is job-level: it moves the job's work at a rate, not its workers' items. With a
``stragglers`` section that rate is divided by :meth:`StragglerSlowdown.factor` of the number of workers
then running. The factor comes from running the message-level FlexRR engine (``sim.flexrr``: the
policies' RapidReassignment state machines, SSP gates, the straggler pattern's speed profiles) on ``n``
workers of one machine each, in the scenario's mode, for ``iterations`` iterations of 1 s: its makespan
over the undelayed one. It is cached per worker count, so a run pays for each count it reaches once, and
a paired comparison (the same seed, another mode) faces the same straggler realisation.
"""

from __future__ import annotations

import functools

from clustertwin.scenarios.flexrr_schema import FlexRRScenario
from clustertwin.scenarios.spot_schema import SpotStragglers


class StragglerSlowdown:
    """Iteration-time multiplier by worker count for one scenario's stragglers and workers' mode."""

    def __init__(self, spec: SpotStragglers, seed: int) -> None:
        self.spec = spec
        self.seed = seed

    def factor(self, workers: int) -> float:
        """Iteration time of ``workers`` workers with stragglers / without (1.0 for no worker)."""
        if workers <= 0:
            return 1.0
        return _factor(self.spec.model_dump_json(), self.seed, workers)


@functools.lru_cache(maxsize=4096)
def _factor(spec_json: str, seed: int, workers: int) -> float:
    from clustertwin.sim.flexrr import run

    spec = SpotStragglers.model_validate_json(spec_json)
    knobs = spec.model_dump(exclude={"mode", "iterations", "items_per_worker"})
    # one worker has no peer to hand work to: reassignment needs two
    mode = spec.mode if workers > 1 else "bsp"
    scenario = FlexRRScenario.model_validate(
        {
            "name": "spot-workers",
            "kind": "flexrr",
            "seed": seed,
            "cluster": {"machines": workers, "workers_per_machine": 1},
            "mode": mode,
            "iterations": spec.iterations,
            "items_per_worker": spec.items_per_worker,
            "iteration_s": 1.0,
            "record_messages": False,
            "stragglers": knobs,
        }
    )
    result = run(scenario)
    return float(result.info["makespan_s"]) / spec.iterations
