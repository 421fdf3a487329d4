"""Speed figures of the PipeDream simulator and planner, printed as ``key=value`` lines.

Run: ``clustertwin bench pipedream``. Targets (issue 7): an 8-stage, 64-microbatch
1F1B simulation in at most 2 s, and the planner on the largest shipped profile in at most 10 s.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from policies.pipedream.partition import Level, plan_partition
from policies.pipedream.schedules import make_schedule
from sim.pipedream.executor import simulate
from sim.pipedream.model import Device, Network
from sim.pipedream.runner import chunk_costs
from traces.pipedream_profile import BUNDLED_BATCH_SIZES, bundled_profile

GB = 1e9


def _best_of(fn: Callable[[], object], repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def bench_pipedream(emit: Callable[[str, object], None] | None = None) -> dict[str, str]:
    """Measure and return (and ``emit``, default: print) the figures."""
    out: dict[str, str] = {}

    def put(key: str, value: object) -> None:
        out[key] = str(value)
        (emit or (lambda k, v: print(f"{k}={v}", flush=True)))(key, value)

    # 1. An 8-stage straight VGG-16 pipeline (microbatch 32), 64 microbatches of 1F1B, 2x4 devices with
    #    PCIe-class links inside a server and 10 Gbps between servers.
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
    schedule = make_schedule("1f1b", (1,) * 8, 64)
    put("sim_1f1b_8x64_ops", sum(len(w.ops) for w in schedule.workers))
    put("sim_1f1b_8x64_s", f"{_best_of(lambda: simulate(schedule, costs, devices, network)):.4f}")
    put("schedule_gen_1f1b_8x64_s", f"{_best_of(lambda: make_schedule('1f1b', (1,) * 8, 64)):.4f}")
    big = make_schedule("1f1b", (1,) * 8, 1024)
    put("sim_1f1b_8x1024_s", f"{_best_of(lambda: simulate(big, costs, devices, network), 1):.4f}")

    # 2. The planner on the largest shipped profile (most layers), hierarchical 2x8 and flat 16.
    largest = max(BUNDLED_BATCH_SIZES, key=lambda m: bundled_profile(m).num_layers)
    full = bundled_profile(largest)
    put("planner_profile", f"{largest} ({full.num_layers} layers)")
    for blocks in (64, 128):
        coarse = full.coarsened(blocks)
        args = (coarse.compute_s(), [lay.parameter_bytes for lay in coarse.layers], list(coarse.cut_bytes))
        hier = [Level(8, 30 * GB), Level(2, 3.125 * GB)]
        put(
            f"planner_{largest}_{blocks}blocks_2x8_s",
            f"{_best_of(lambda a=args, lv=hier: plan_partition(*a, lv), 1):.3f}",
        )
        flat = [Level(16, 1.25 * GB)]
        put(
            f"planner_{largest}_{blocks}blocks_flat16_s",
            f"{_best_of(lambda a=args, lv=flat: plan_partition(*a, lv), 1):.3f}",
        )
    args = (full.compute_s(), [lay.parameter_bytes for lay in full.layers], list(full.cut_bytes))
    hier = [Level(8, 30 * GB), Level(2, 3.125 * GB)]
    put(f"planner_{largest}_full_2x8_s", f"{_best_of(lambda: plan_partition(*args, hier), 1):.3f}")
    return out


if __name__ == "__main__":
    bench_pipedream()
