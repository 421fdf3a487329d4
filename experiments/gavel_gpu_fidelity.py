"""Simulator fidelity for Gavel on a GPU machine (issue: Gavel for real; cf. seed 001 Table 5.3).

    python3 experiments/gavel_gpu_fidelity.py --work DIR [--gpus 0 1] [--target-s 1000]

1. Profile the scenario's job types on this machine's worker types (``clustertwin profile``): throughput
   per (job type, worker type) and the per-round overhead (process start, checkpoint load and save).
2. Size the trace: each job's steps are its base duration on a `cpu` worker times a common scale, chosen
   (by bisection on the *simulator*, calibrated by the profile) so that heterogeneity-aware LAS takes
   about ``--target-s`` seconds.
3. Run the trace for real under two policies at once, each on its own GPU and its own half of the CPU
   cores (``taskset``): heterogeneity-aware LAS and heterogeneity-aware finish-time fairness.
4. Simulate both runs from the same scenario, trace and profile, and compare (``clustertwin compare``).

Everything lands in ``--work``; ``results.json`` there holds the headline figures.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "gavel-real-gpu.yaml"
TEMPLATE = ROOT / "scenarios" / "traces" / "gavel-real-gpu.trace"
# Base durations (seconds on one `cpu` worker) cycled over the template's jobs: a spread of job sizes.
BASE_DURATIONS_S = (120, 360, 240, 480, 180, 300, 420)
POLICIES = ("las", "ftf")


def clustertwin(*args: str, cpus: str | None = None) -> subprocess.Popen:
    command = [sys.executable, "-m", "clustertwin", *args]
    if cpus is not None:
        command = ["taskset", "-c", cpus, *command]
    return subprocess.Popen(command, cwd=ROOT)


def check(process: subprocess.Popen) -> None:
    if process.wait() != 0:
        raise SystemExit(f"failed: {process.args}")


def overheads(path: Path) -> dict[str, float]:
    """Per worker type: mean seconds a round loses to start-up, checkpoint load and save."""
    sums: dict[str, list[float]] = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            total = float(row["startup_s"]) + float(row["load_s"]) + float(row["save_s"])
            sums.setdefault(row["worker_type"], []).append(total)
    return {t: sum(v) / len(v) for t, v in sums.items()}


def cpu_throughputs(path: Path) -> dict[str, float]:
    with path.open() as f:
        return {r["job_type"]: float(r["throughput"]) for r in csv.DictReader(f) if r["worker_type"] == "cpu"}


def write_trace(path: Path, scale: float, throughput: dict[str, float]) -> None:
    rows = []
    for i, line in enumerate(TEMPLATE.read_text().splitlines()):
        fields = line.split("\t")
        steps = max(int(BASE_DURATIONS_S[i % len(BASE_DURATIONS_S)] * scale * throughput[fields[0]]), 1)
        fields[5] = str(steps)
        rows.append("\t".join(fields) + "\n")
    path.write_text("".join(rows))


def simulated_makespan(overrides: list[str]) -> float:
    from analysis.metrics import gavel_metrics
    from scenarios.load import load_scenario
    from sim import run_scenario

    scenario = load_scenario(SCENARIO, overrides)
    return float(gavel_metrics(run_scenario(scenario), dict(scenario.cluster.gpus))["makespan_s"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--gpus", type=int, nargs=2, default=(0, 1))
    parser.add_argument("--target-s", type=float, default=1000.0)
    parser.add_argument("--cpu-only", action="store_true", help="a dry run with the gpu type on a CPU")
    args = parser.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    log = {"started": time.time()}
    base = ["--set", "real.workers.gpu={device: cpu}"] if args.cpu_only else []

    profile_csv = work / "profile.throughputs.csv"
    check(clustertwin("profile", str(SCENARIO), *base, "--out", str(profile_csv), "--steps", "40"))
    cost = overheads(work / "profile.overheads.csv")
    trace = work / "trace.trace"
    common = [
        f"throughputs={profile_csv}",
        f"workload.trace={trace}",
        f"mechanism.preemption_overhead_s={json.dumps(cost)}",
    ] + ([base[1]] if base else [])  # the dry run's gpu type stays on the CPU in every run

    # Size the trace so that the simulated LAS run lasts about --target-s (bisection on the scale).
    throughput = cpu_throughputs(profile_csv)
    low, high = 0.01, 100.0
    for _ in range(14):
        scale = (low * high) ** 0.5
        write_trace(trace, scale, throughput)
        if simulated_makespan(common) < args.target_s:
            low = scale
        else:
            high = scale
    write_trace(trace, low, throughput)
    log.update(scale=low, overheads_s=cost, predicted_makespan_s=simulated_makespan(common))
    print(json.dumps(log), flush=True)

    halves = [f"0-{os.cpu_count() // 2 - 1}", f"{os.cpu_count() // 2}-{os.cpu_count() - 1}"]
    runs = []
    for policy, gpu, cpus in zip(POLICIES, args.gpus, halves, strict=True):
        sets = [*common, f"policy.name={policy}", "policy.params={aware: true}"]
        if not args.cpu_only:
            sets.append(f"real.workers.gpu.cuda_devices=[{gpu}]")
        flags = [x for s in sets for x in ("--set", s)]
        runs.append((policy, flags))
        real = clustertwin("run", str(SCENARIO), "--backend", "real", "--out", str(work / f"real-{policy}"),
                           "--quiet", *flags, cpus=cpus)  # fmt: skip
        runs[-1] = (policy, flags, real)
    for _, _, real in runs:
        check(real)
    results = {}
    for policy, flags, _ in runs:
        check(clustertwin("run", str(SCENARIO), "--backend", "sim", "--out", str(work / f"sim-{policy}"),
                          "--quiet", *flags))  # fmt: skip
        out = work / f"compare-{policy}"
        check(
            clustertwin(
                "compare", str(work / f"sim-{policy}"), str(work / f"real-{policy}"), "--out", str(out)
            )
        )
        results[policy] = json.loads((out / "compare.json").read_text())
    log.update(results=results, finished=time.time())
    (work / "results.json").write_text(json.dumps(log, indent=2))
    (work / "DONE").write_text("ok\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
