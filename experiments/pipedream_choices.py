"""The planner's choices on the shipped profiles under the dissertation's clusters, next to the
published ones ([Narayanan] §2.5.2: VGG-16 15-1, ResNet-50 data parallel, GNMT straight), with the
predicted time per input and the 1F1B simulation of the same plan.

Run: ``python -m experiments.pipedream_choices`` (from the repository root; ~10 s).
Cluster-A: 4 servers x 4 V100 on shared PCIe (10 GB/s assumed), 10 Gbps between servers;
Cluster-B: 2 servers x 8 V100 with NVLink (30 GB/s assumed), 25 Gbps between servers; "flat": the
arXiv formulation, all 16 workers on the 10 Gbps network. Per-GPU batches: VGG-16 64, ResNet-50 128,
GNMT 64 (§2.5.1).
"""

from __future__ import annotations

import math

from clustertwin.policies.pipedream.partition import Level, plan_partition
from clustertwin.policies.pipedream.schedules import make_schedule
from clustertwin.sim.pipedream.executor import simulate
from clustertwin.sim.pipedream.model import Device, Network
from clustertwin.sim.pipedream.runner import chunk_costs
from clustertwin.traces.pipedream_profile import bundled_profile

GB = 1e9
CLUSTERS = {
    "A 4x4": ([Level(4, 10 * GB), Level(4, 1.25 * GB)], 4, Network(10 * GB, 0.0, 1.25 * GB, 0.0)),
    "B 2x8": ([Level(8, 30 * GB), Level(2, 3.125 * GB)], 8, Network(30 * GB, 0.0, 3.125 * GB, 0.0)),
    "flat 16": ([Level(16, 1.25 * GB)], 1, Network(1.25 * GB, 0.0, 1.25 * GB, 0.0)),
}
MODELS = {
    "vgg16": (64, "15-1"),
    "resnet50": (128, "16 (DP)"),
    "gnmt": (64, "straight"),
    "gnmt_large": (64, "straight"),
}


def simulated_time_per_input(profile, plan, per_server: int, network: Network) -> float:
    """Steady-state seconds per input of the plan under 1F1B(-RR): the time between the 2nd and the last
    quarter of completed inputs, so fill and drain do not count."""
    replicas = tuple(s.replicas for s in plan.stages)
    m = math.lcm(*replicas) * max(1, 64 // math.lcm(*replicas))
    schedule = make_schedule("1f1b", replicas, m)
    devices = [Device(server=i // per_server) for i in range(len(schedule.workers))]
    out = simulate(schedule, chunk_costs(profile, plan.stages), devices, network)
    ends = sorted(row[8] for row in out.rows if row[4] == "B" and row[2] == 0)
    lo, hi = len(ends) // 4, 3 * len(ends) // 4
    return (ends[hi] - ends[lo]) / (hi - lo)


def gpipe_vs_1f1b() -> None:
    """[Narayanan] §2.5.4: GPipe (with recomputation, NOAM = 16 microbatches per flush) vs PipeDream's
    1F1B on the same straight 16-stage GNMT-16 pipeline; the paper reports 55% (A) / 71% (B) lower
    throughput for GPipe."""
    from clustertwin.analysis.pipedream_metrics import pipedream_metrics
    from clustertwin.scenarios.pipedream_schema import PipeDreamScenario
    from clustertwin.sim.pipedream import run

    clusters = {
        "A 4x4": {
            "servers": 4,
            "devices_per_server": 4,
            "intra_bandwidth_gbs": 10.0,
            "inter_bandwidth_gbs": 1.25,
        },
        "B 2x8": {
            "servers": 2,
            "devices_per_server": 8,
            "intra_bandwidth_gbs": 30.0,
            "inter_bandwidth_gbs": 3.125,
        },
    }
    schedules = {
        "1f1b": {"planner": {"mode": "straight"}, "microbatches": 64},
        "gpipe": {"microbatches": 16, "num_batches": 4},
    }
    print("cluster  schedule  samples/s  idle   peak_GiB")
    for name, cluster in clusters.items():
        speed = {}
        for schedule, extra in schedules.items():
            scenario = PipeDreamScenario.model_validate(
                {
                    "name": f"gnmt16-{schedule}",
                    "kind": "pipedream",
                    "schedule": schedule,
                    "microbatch_size": 64,
                    "model": {"profile": "gnmt_large"},
                    "cluster": cluster,
                    "memory": {"recompute": schedule == "gpipe", "optimizer_factor": 2.0},
                    **extra,
                }
            )
            metrics = pipedream_metrics(run(scenario))
            speed[schedule] = metrics["throughput_samples_per_s"]
            print(
                f"{name:8s} {schedule:9s} {speed[schedule]:9.1f}  {metrics['bubble_fraction']:.3f}"
                f"  {metrics['peak_memory_gib_max']:.2f}"
            )
        print(f"{name:8s} GPipe throughput {100 * (1 - speed['gpipe'] / speed['1f1b']):.0f}% lower")


def main() -> None:
    print("model      cluster  convention    plan                     published  pred_ms  sim_ms")
    for model, (batch, published) in MODELS.items():
        profile = bundled_profile(model).scaled(batch)  # every layer, as a scenario plans it
        args = (profile.compute_s(), [lay.parameter_bytes for lay in profile.layers], list(profile.cut_bytes))
        for cluster, (levels, per_server, network) in CLUSTERS.items():
            for convention in ("dissertation", "arxiv", "code"):
                plan = plan_partition(*args, levels, convention)  # type: ignore[arg-type]
                sim = simulated_time_per_input(profile, plan, per_server, network)
                print(
                    f"{model:10s} {cluster:8s} {convention:13s} {plan.config:24s} {published:10s}"
                    f" {plan.time_per_input * 1e3:7.2f} {sim * 1e3:7.2f}"
                )
    print()
    gpipe_vs_1f1b()


if __name__ == "__main__":
    main()
