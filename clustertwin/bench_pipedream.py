"""Speed figures of the PipeDream simulator and planner, printed as ``key=value`` lines.

Run: ``clustertwin bench pipedream``. Targets: an 8-stage, 64-microbatch
1F1B simulation in at most 2 s, and the planner on the largest shipped profile in at most 10 s;
``planner_full_resolution_s`` is the planner on every layer of the largest shipped profile on the largest
cluster shape of ``clustertwin reproduce pipedream`` (``REPRODUCE_SHAPES``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from clustertwin.policies.pipedream.ops import Schedule
from clustertwin.policies.pipedream.partition import Level, plan_partition
from clustertwin.policies.pipedream.schedules import make_schedule
from clustertwin.scenarios.pipedream_schema import PipeDreamModel
from clustertwin.sim.pipedream.executor import simulate
from clustertwin.sim.pipedream.model import ChunkCost, Device, Network
from clustertwin.sim.pipedream.runner import chunk_costs
from clustertwin.traces.pipedream_profile import BUNDLED_BATCH_SIZES, ModelProfile, bundled_profile

GB = 1e9


def best_of(fn: Callable[[], object], repeats: int = 3) -> float:
    """The shortest wall time of ``repeats`` calls of ``fn`` (the least disturbed by other load)."""
    return best_times(fn, repeats)[0]


def best_times(fn: Callable[[], object], repeats: int = 3) -> tuple[float, float]:
    """The shortest wall time and the shortest CPU time of this process over ``repeats`` calls of
    ``fn``. On a loaded machine the wall time mostly measures the other jobs; the CPU time does not."""
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus)


def vgg16_1f1b_inputs(
    microbatches: int = 64,
) -> tuple[Schedule, list[ChunkCost], list[Device], Network]:
    """An 8-stage straight VGG-16 pipeline (microbatch 32) under 1F1B on 2x4 devices, PCIe-class links
    inside a server and 10 Gbps between servers: the issue-7 speed target's simulation (also used by
    ``clustertwin reproduce pipedream``)."""
    profile = bundled_profile("vgg16").scaled(32)
    plan = plan_partition(
        profile.compute_s(),
        [lay.parameter_bytes for lay in profile.layers],
        list(profile.cut_bytes),
        [Level(8, 1.25 * GB)],
        straight=True,
    )
    costs = chunk_costs(profile, plan.stages)
    devices = [Device(server=i // 4) for i in range(8)]
    network = Network(10 * GB, 10e-6, 1.25 * GB, 50e-6)
    return make_schedule("1f1b", (1,) * 8, microbatches), costs, devices, network


def largest_profile() -> tuple[str, ModelProfile]:
    """The shipped profile with the most layers (the planner speed target's input)."""
    name = max(BUNDLED_BATCH_SIZES, key=lambda m: bundled_profile(m).num_layers)
    return name, bundled_profile(name)


def planner_args(profile: ModelProfile) -> tuple[list[float], list[float], list[float]]:
    """``plan_partition``'s per-layer compute, parameter bytes and cut bytes of ``profile``."""
    return (
        list(profile.compute_s()),
        [lay.parameter_bytes for lay in profile.layers],
        list(profile.cut_bytes),
    )


HIERARCHY_2X8 = [Level(8, 30 * GB), Level(2, 3.125 * GB)]  # Cluster-B: 2 servers x 8 (NVLink, 25 Gbps)
FLAT_16 = [Level(16, 1.25 * GB)]  # 16 workers on 10 Gbps ([PipeDream-arXiv]'s flat DP)
# The planner's cluster shapes in `clustertwin reproduce pipedream` ([Narayanan] §2.5.1, Table 2.1:
# Cluster-A servers of 4 V100 on PCIe, 10 GB/s assumed, 10 Gbps between; Cluster-B servers of 8 V100 on
# NVLink, 30 GB/s assumed, 25 Gbps between), with the speedup claims' one-server shapes.
REPRODUCE_SHAPES: dict[str, list[Level]] = {
    "A 1x4": [Level(4, 10 * GB)],
    "A 4x4": [Level(4, 10 * GB), Level(4, 1.25 * GB)],
    "B 1x8": [Level(8, 30 * GB)],
    "B 2x8": HIERARCHY_2X8,
    "flat 16": FLAT_16,
}


def _planner_size(item: tuple[str, list[Level]]) -> tuple[int, int, int]:
    """How big a cluster shape is for the planner: devices, then levels, then devices per server (the
    levels below the top cost the most)."""
    levels = item[1]
    return math.prod(lv.count for lv in levels), len(levels), levels[0].count


def largest_shape() -> tuple[str, list[Level]]:
    """The largest cluster shape of ``REPRODUCE_SHAPES`` (``_planner_size``)."""
    return max(REPRODUCE_SHAPES.items(), key=_planner_size)


def bench_pipedream(emit: Callable[[str, object], None] | None = None) -> dict[str, str]:
    """Measure and return (and ``emit``, default: print) the figures."""
    out: dict[str, str] = {}

    def put(key: str, value: object) -> None:
        out[key] = str(value)
        (emit or (lambda k, v: print(f"{k}={v}", flush=True)))(key, value)

    # 1. The 8-stage, 64-microbatch 1F1B simulation (vgg16_1f1b_inputs).
    schedule, costs, devices, network = vgg16_1f1b_inputs(64)
    put("sim_1f1b_8x64_ops", sum(len(w.ops) for w in schedule.workers))
    put("sim_8x64_1f1b_s", f"{best_of(lambda: simulate(schedule, costs, devices, network)):.4f}")
    put("schedule_gen_1f1b_8x64_s", f"{best_of(lambda: make_schedule('1f1b', (1,) * 8, 64)):.4f}")
    big = make_schedule("1f1b", (1,) * 8, 1024)
    put("sim_1f1b_8x1024_s", f"{best_of(lambda: simulate(big, costs, devices, network), 1):.4f}")

    # 2. The planner on the largest shipped profile (most layers), hierarchical 2x8 and flat 16.
    largest, full = largest_profile()
    put("planner_profile", f"{largest} ({full.num_layers} layers)")
    # What `clustertwin run` does with it by default (model.max_blocks keeps every layer), on Cluster-B.
    default = planner_args(full.coarsened(PipeDreamModel().max_blocks))
    put("planner_largest_s", f"{best_of(lambda: plan_partition(*default, HIERARCHY_2X8), 1):.3f}")
    for blocks in (64, 128):
        args = planner_args(full.coarsened(blocks))
        put(
            f"planner_{largest}_{blocks}blocks_2x8_s",
            f"{best_of(lambda a=args: plan_partition(*a, HIERARCHY_2X8), 1):.3f}",
        )
        put(
            f"planner_{largest}_{blocks}blocks_flat16_s",
            f"{best_of(lambda a=args: plan_partition(*a, FLAT_16), 1):.3f}",
        )
    args = planner_args(full)
    put(f"planner_{largest}_full_2x8_s", f"{best_of(lambda: plan_partition(*args, HIERARCHY_2X8), 1):.3f}")
    # The headline of the default resolution: every layer, on the largest shape `reproduce` plans.
    shape, levels = largest_shape()
    put("planner_full_resolution_shape", f"{shape} ({largest}, {full.num_layers} layers)")
    put("planner_full_resolution_s", f"{best_of(lambda: plan_partition(*args, levels), 1):.3f}")
    return out


if __name__ == "__main__":
    bench_pipedream()
