"""Simulator fidelity for Gavel with users' own programs on a GPU machine: the four examples of ``examples/``
(a ResNet-50-sized image model, a Transformer and an LSTM language model, a recommendation model), written
against the job API, scheduled for real under LAS and under a cost policy, and each run simulated.

    python3 experiments/gavel_gpu_own_jobs.py --out DIR [--gpus 0 1] [--runs 2] [--target-s 130]
        [--round-s 25] [--threads 4] [--cpu-slots 3]
    python3 experiments/gavel_gpu_own_jobs.py --out DIR --smoke      # a CPU check of the whole pipeline

One command does everything, in ``DIR``:

1. Writes the scenario (``scenario.yaml``): a worker of type ``gpu`` (one GPU) and ``--cpu-slots`` CPU
   workers of ``--threads`` threads each, and six jobs (``workload.jobs``): the four programs at time 0,
   a second Transformer and a second recommendation model arriving later. Prices make the cost policy
   (``min_cost``) run: $4 per GPU-hour, $0.50 per CPU worker-hour.
2. Profiles the programs on both worker types (``clustertwin profile --under-load``) on each half of the
   machine at once: half h is GPU ``--gpus[h]`` and half of the CPU cores (``taskset``), each slot pinned
   to cores of its own where the half has enough (``real.pin_cores``). The simulator's throughput table
   and restart overheads of a run are its half's profile (``profile-h<h>.throughputs.csv`` and
   ``.overheads.csv``), not the bundled table.
3. Sizes the jobs: each job's steps are its base length (seconds on the GPU) times a common scale, found
   by bisection on the simulator (LAS, half 0's profile) so that the run lasts about ``--target-s``.
4. Runs ``--runs`` waves, each the two policies at once, one per half; the halves swap between waves, so
   each policy runs on both GPUs: ``real-<policy>-<n>/``.
5. Simulates each real run from the same scenario and its half's profile (``sim-<policy>-<n>/``) and
   compares (``compare-<policy>-<n>/``, as ``clustertwin compare``).

It prints one line per run, ``<policy> run <n>: avg_jct_error=... makespan_error=...``, then per policy the
mean and the spread (min to max) of each error over its runs, and writes ``results.json`` (the plan, every
run's comparison and the per-policy summary). The runs' checkpoints are deleted after each wave. The
defaults are sized for the two-GPU host (32 vCPUs) to finish within 9 minutes: a profile of about 1.5,
two waves of about 2.5 (an estimate from the parts' sizes, not yet a measurement).

``--smoke`` runs the same pipeline on the CPU with tiny models, for tests: the ``gpu`` type is a CPU
worker, two jobs, one CPU slot, 1-s profile leases, 3-s rounds and one wave. Its errors say nothing of
fidelity: a process start there lasts a round or more, and the simulator charges a restart at most a round.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
POLICIES = {"las": {"aware": True}, "min_cost": {}}
PRICES = {"gpu": 4.0, "cpu": 0.5}  # $ per worker-hour


@dataclass(frozen=True)
class Program:
    """A job of the scenario: its type's name, its command line, when it arrives and its base length."""

    job_type: str
    command: str
    base_s: float  # seconds of training on the GPU at scale 1
    arrival_s: float = 0.0


# The four programs at sizes that make a GPU busy (ResNet-50 is the paper's width) and a CPU worker of a
# few threads slow but useful; the second Transformer and recommendation model arrive while the first run.
RESNET50 = "python examples/resnet_cifar.py --depth 50 --width 64 --batch-size 32"
TRANSFORMER = "python examples/transformer_lm.py --dim 256 --context 64 --vocab 4000 --batch-size 32"
PROGRAMS = (
    Program("resnet50 (batch size 32)", RESNET50, 50),
    Program("transformer_lm (batch size 32)", TRANSFORMER, 40),
    Program("lstm_lm (batch size 20)", "python examples/lstm_lm.py", 40),
    Program("recommendation (batch size 512)", "python examples/recommendation.py", 30),
    Program("transformer_lm (batch size 32)", f"{TRANSFORMER} --seed 1", 40, 15.0),
    Program("recommendation (batch size 512)", "python examples/recommendation.py --seed 1", 30, 30.0),
)
TINY_LSTM = "python examples/lstm_lm.py --vocab 50 --dim 8 --hidden 8 --layers 1 --context 4 --batch-size 4"
TINY_RECOMMENDATION = "python examples/recommendation.py --users 50 --items 50 --dim 4 --batch-size 16"
SMOKE_PROGRAMS = (
    Program("lstm_lm (batch size 4)", TINY_LSTM, 3),
    Program("recommendation (batch size 16)", f"{TINY_RECOMMENDATION} --hidden 8", 3),
)


@dataclass(frozen=True)
class Setup:
    """How big the experiment is: the GPU mode's defaults, or the smoke mode's."""

    programs: tuple[Program, ...]
    cpu_slots: int
    threads: int
    round_s: float
    target_s: float
    profile_seconds: float
    smoke: bool


def scenario_text(setup: Setup, steps: list[int], throughputs: Path) -> str:
    """The scenario (YAML) of ``setup`` with each job's ``steps``, calibrated by the profile ``throughputs``
    (missing before profiling, when the profiler falls back to the bundled table)."""
    gpu = {"device": "cpu"} if setup.smoke else {"device": "cuda", "cuda_devices": [0]}
    scenario = {
        "name": "gavel-gpu-own-jobs" + ("-smoke" if setup.smoke else ""),
        "kind": "gavel",
        "seed": 0,
        "description": "The examples' own programs (image, Transformer, LSTM, recommendation) on a GPU and"
        " CPU workers",
        "cluster": {
            "gpus": {"gpu": 1, "cpu": setup.cpu_slots},
            "gpus_per_server": {"gpu": 1, "cpu": setup.cpu_slots},
            "prices": PRICES,
        },
        "throughputs": str(throughputs),
        "workload": {
            "jobs": [
                {
                    "job_type": p.job_type,
                    "command": p.command,
                    "working_dir": str(ROOT),
                    "total_steps": n,
                    "arrival_s": p.arrival_s,
                }
                for p, n in zip(setup.programs, steps, strict=True)
            ]
        },
        "policy": {"name": "las", "params": {"aware": True}},
        "mechanism": {
            "round_s": setup.round_s,
            "min_reset_interval_s": 0.0,
            "preemption_overhead_s": 0.0,  # replaced by the profiled restart overheads
            "overhead_model": "restart",
        },
        "real": {
            "workers": {"gpu": gpu, "cpu": {"device": "cpu"}},
            "threads_per_cpu_worker": setup.threads,
            "pin_cores": False,
            "grace_s": 90.0 if setup.smoke else max(3 * setup.round_s, 30.0),  # smoke: a loaded test machine
        },
    }
    return yaml.safe_dump(scenario, sort_keys=False)


def halves(count: int, gpus: list[int]) -> list[tuple[list[int], int]]:
    """(CPUs for taskset, GPU) of each half of the machine."""
    cpus = sorted(os.sched_getaffinity(0))
    split = len(cpus) // count
    return [(cpus[i * split : (i + 1) * split], gpus[i]) for i in range(count)]


def pinnable(setup: Setup, cpus: list[int]) -> bool:
    """Whether a half gives each slot cores of its own (``runtime.cores``): a core per GPU slot and
    ``threads`` per CPU slot."""
    return len(cpus) >= 1 + setup.cpu_slots * setup.threads


def clustertwin(*args: str, cpus: list[int] | None = None) -> subprocess.Popen:
    command = [sys.executable, "-m", "clustertwin", *args]
    if cpus is not None:
        command = ["taskset", "-c", ",".join(map(str, cpus)), *command]
    return subprocess.Popen(command, cwd=ROOT)


def wait_all(processes: list[subprocess.Popen]) -> None:
    failed = [p.args for p in processes if p.wait() != 0]
    if failed:
        raise SystemExit(f"failed: {failed}")


def flags(overrides: list[str]) -> list[str]:
    return [x for s in overrides for x in ("--set", s)]


def restart_overheads(path: Path) -> dict[str, float]:
    """Per worker type: the mean seconds a (re)started lease loses to start-up, checkpoint load and save."""
    import pandas as pd

    table = pd.read_csv(path)
    total = table["startup_s"] + table["load_s"] + table["save_s"]
    return {str(k): round(float(v), 3) for k, v in total.groupby(table["worker_type"]).mean().items()}


def half_overrides(work: Path, half: int, setup: Setup, places: list[tuple[list[int], int]]) -> list[str]:
    """The scenario overrides of a run on ``half``: its profile, its restart costs, its GPU, pinning."""
    cpus, gpu = places[half]
    profile = work / f"profile-h{half}.throughputs.csv"
    sets = [f"throughputs={profile}"]
    if profile.is_file():
        overheads = restart_overheads(profile.with_name(f"profile-h{half}.overheads.csv"))
        sets.append(f"mechanism.preemption_overhead_s={json.dumps(overheads)}")
    if not setup.smoke:
        sets.append(f"real.workers.gpu.cuda_devices=[{gpu}]")
    if pinnable(setup, cpus):
        sets.append("real.pin_cores=true")
    return sets


def policy_overrides(policy: str) -> list[str]:
    return [f"policy.name={policy}", f"policy.params={json.dumps(POLICIES[policy])}"]


def profile(work: Path, setup: Setup, places: list[tuple[list[int], int]]) -> None:
    """Profile the programs on each half at once: each sees its own half busy and the other half busy too,
    as its runs will."""
    runs = []
    for half, (cpus, _) in enumerate(places):
        sets = half_overrides(work, half, setup, places)[1:]  # no table yet
        out = work / f"profile-h{half}.throughputs.csv"
        args = ("profile", str(work / "scenario.yaml"), *flags(sets), "--out", str(out), "--under-load")
        runs.append(clustertwin(*args, "--seconds", str(setup.profile_seconds), cpus=cpus))
    wait_all(runs)


def simulated_makespan(work: Path, overrides: list[str]) -> float:
    from clustertwin.analysis.gavel_metrics import gavel_metrics
    from clustertwin.scenarios.load import load_scenario

    from clustertwin.api import simulate

    scenario = load_scenario(work / "scenario.yaml", overrides)
    return float(gavel_metrics(simulate(scenario), dict(scenario.cluster.gpus))["makespan_s"])


def size(work: Path, setup: Setup, places: list[tuple[list[int], int]]) -> dict[str, object]:
    """Write the scenario with each job's steps: its base length on the GPU (half 0's profile) times the
    common scale whose simulated LAS run lasts about ``target_s`` (bisection)."""
    import pandas as pd

    table = pd.read_csv(work / "profile-h0.throughputs.csv")
    gpu = table[table["worker_type"] == "gpu"]
    rate = dict(zip(gpu["job_type"], gpu["throughput"], strict=True))
    sets = half_overrides(work, 0, setup, places) + policy_overrides("las")

    def write(scale: float) -> list[int]:
        steps = [max(int(p.base_s * scale * rate[p.job_type]), 1) for p in setup.programs]
        (work / "scenario.yaml").write_text(scenario_text(setup, steps, work / "profile-h0.throughputs.csv"))
        return steps

    low, high = 0.01, 100.0
    for _ in range(14):
        scale = (low * high) ** 0.5
        write(scale)
        if simulated_makespan(work, sets) < setup.target_s:
            low = scale
        else:
            high = scale
    steps = write(low)
    return {"scale": low, "steps": steps, "predicted_makespan_s": simulated_makespan(work, sets)}


def compare_run(work: Path, name: str, overrides: list[str]) -> dict[str, float]:
    """Simulate the real run ``real-<name>`` from the scenario under ``overrides`` and compare the two."""
    from clustertwin.scenarios.load import load_scenario

    from clustertwin.api import run
    from clustertwin.kinds import get_kind

    scenario = load_scenario(work / "scenario.yaml", overrides)
    sim = work / f"sim-{name}"
    run(scenario=scenario, backend="sim", out=sim, plots=False)
    comparison = get_kind("gavel").comparison
    assert comparison is not None
    return dict(comparison.compare(sim, work / f"real-{name}", work / f"compare-{name}").headline)


def spread(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values)}


def experiment(args: argparse.Namespace) -> int:
    setup = Setup(
        programs=SMOKE_PROGRAMS if args.smoke else PROGRAMS,
        cpu_slots=1 if args.smoke else args.cpu_slots,
        threads=1 if args.smoke else args.threads,
        round_s=3.0 if args.smoke else args.round_s,
        target_s=12.0 if args.smoke else args.target_s,
        profile_seconds=1.0 if args.smoke else args.profile_seconds,
        smoke=args.smoke,
    )
    runs = 1 if args.smoke else args.runs
    work = args.out.resolve()
    work.mkdir(parents=True, exist_ok=True)
    places = halves(len(POLICIES), args.gpus)
    ones = [1] * len(setup.programs)
    (work / "scenario.yaml").write_text(scenario_text(setup, ones, work / "profile-h0.throughputs.csv"))
    profile(work, setup, places)
    plan = size(work, setup, places) | {"halves": [{"cpus": c, "gpu": g} for c, g in places], "runs": runs}
    plan["overheads_s"] = [
        restart_overheads(work / f"profile-h{h}.overheads.csv") for h in range(len(places))
    ]
    (work / "plan.json").write_text(json.dumps(plan, indent=2))
    print(json.dumps(plan), flush=True)

    results: dict[str, dict] = {}
    for wave in range(runs):
        placed = {f"{policy}-{wave + 1}": (i + wave) % len(places) for i, policy in enumerate(POLICIES)}
        started = []
        for name, half in placed.items():
            sets = half_overrides(work, half, setup, places) + policy_overrides(name.rsplit("-", 1)[0])
            args_ = (
                "run",
                str(work / "scenario.yaml"),
                "--backend",
                "real",
                "--out",
                str(work / f"real-{name}"),
            )
            started.append(clustertwin(*args_, "--quiet", "--no-plots", *flags(sets), cpus=places[half][0]))
        wait_all(started)
        # Compared wave by wave, so that a wave cut short leaves the ones before it with their figures.
        for name, half in placed.items():
            shutil.rmtree(work / f"real-{name}" / "work" / "checkpoints", ignore_errors=True)  # no result
            policy, n = name.rsplit("-", 1)
            sets = half_overrides(work, half, setup, places) + policy_overrides(policy)
            results[name] = errors = compare_run(work, name, sets) | {"half": half}
            print(f"{policy} run {n} (half {half}): avg_jct_error={errors['avg_jct_error']:+.4f}"
                  f" makespan_error={errors['makespan_error']:+.4f}", flush=True)  # fmt: skip
        summary = summarise(results)
        (work / "results.json").write_text(
            json.dumps({"plan": plan, "runs": results, "summary": summary}, indent=2)
        )
    for policy, errors in summary.items():
        for key, s in errors.items():
            print(f"{policy}: {key} mean={s['mean']:+.4f} spread=[{s['min']:+.4f}, {s['max']:+.4f}]"
                  f" over {s['runs']} runs")  # fmt: skip
    return 0


def summarise(results: dict[str, dict]) -> dict[str, dict[str, dict[str, float]]]:
    """Per policy and error: the mean, min and max over its runs so far."""
    summary = {}
    for policy in POLICIES:
        mine = [r for name, r in results.items() if name.rsplit("-", 1)[0] == policy]
        summary[policy] = {
            key: spread([r[key] for r in mine]) | {"runs": len(mine)}
            for key in ("avg_jct_error", "makespan_error")
        }
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the folder everything is written to")
    parser.add_argument("--gpus", type=int, nargs=2, default=[0, 1], help="the GPU of each half")
    parser.add_argument("--runs", type=int, default=2, help="waves: runs of each policy")
    parser.add_argument("--target-s", type=float, default=130.0, help="the simulated LAS run's length")
    parser.add_argument("--round-s", type=float, default=25.0)
    parser.add_argument("--threads", type=int, default=4, help="threads of each CPU worker")
    parser.add_argument("--cpu-slots", type=int, default=3, help="CPU workers of each half")
    parser.add_argument("--profile-seconds", type=float, default=6.0, help="each measured lease's length")
    parser.add_argument("--smoke", action="store_true", help="tiny models on the CPU, one wave (tests)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    return experiment(args)


if __name__ == "__main__":
    raise SystemExit(main())
