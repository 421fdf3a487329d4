"""Speed figures of the FlexRR simulator, printed as ``key=value`` lines.

Run: ``clustertwin bench flexrr``. Target: a FlexRR simulation of 128 workers (16 machines x 8,
Cluster-A's size, [Harlap] §3.4.1) for 20 iterations with 100 message checks per iteration (Table 3.1's
default) in at most 10 s. The scenario is ``scenarios/flexrr-default.yaml`` (Slow Worker at 100% delay).

``sim_<W>w_<I>it_s`` is the best of three wall times of the whole ``sim.flexrr.run`` call (set-up of
groups and straggler profiles, the event loop, the tables and the Ideal bound). ``events`` counts the
entries the engine popped off its event heap: task stops (including ones a message check superseded),
message arrivals and gate openings. The FlexRR engine is its own heap, not SimPy (its module docstring
says why), so these are the discrete events of this simulator, the analogue of SimPy's processed events.
``events_per_s`` is ``events`` over the same run's wall time; ``sim_<W>w_<I>it_cpu_s`` is that run's
process CPU time (on a busy shared host the wall time also measures the neighbours).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from clustertwin.scenarios.load import load_scenario
from clustertwin.sim.flexrr import run

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "flexrr-default.yaml"
# the size, stated explicitly so a change of the default scenario does not change the benchmark
FULL: tuple[str, ...] = (
    "cluster.machines=16",
    "cluster.workers_per_machine=8",
    "iterations=20",
    "rr.message_checks=100",
    "mode=flexrr",
)


def bench_flexrr(
    emit: Callable[[str, object], None] | None = None,
    overrides: Sequence[str] | None = None,
    repeats: int = 3,
) -> dict[str, str]:
    """Measure and return (and ``emit``, default: print) the figures; ``overrides`` (default
    :data:`FULL`) are ``--set`` strings on ``scenarios/flexrr-default.yaml``."""
    out: dict[str, str] = {}

    def put(key: str, value: object) -> None:
        out[key] = str(value)
        (emit or (lambda k, v: print(f"{k}={v}", flush=True)))(key, value)

    scenario = load_scenario(SCENARIO, list(FULL if overrides is None else overrides))
    best: tuple[float, float, int] | None = None
    for _ in range(repeats):
        started, cpu_started = time.perf_counter(), time.process_time()
        result = run(scenario)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        if best is None or wall < best[0]:
            best = (wall, cpu, int(result.info["events"]))
    assert best is not None
    wall, cpu, events = best
    size = f"{scenario.cluster.workers}w_{scenario.iterations}it"
    st = scenario.stragglers
    put("scenario", f"{scenario.name} ({scenario.mode}, {st.model} delay {st.delay:g},"
        f" {scenario.rr.message_checks} checks)")  # fmt: skip
    put(f"sim_{size}_s", f"{wall:.3f}")
    put(f"sim_{size}_cpu_s", f"{cpu:.3f}")  # the same run's CPU time: on a shared host, wall time is not
    put("events", events)
    put("events_per_s", f"{events / wall:.0f}")
    return out


if __name__ == "__main__":
    bench_flexrr()
