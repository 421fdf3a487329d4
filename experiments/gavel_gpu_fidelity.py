"""Simulator fidelity for Gavel on a GPU machine (issue: Gavel for real; cf. [Narayanan] Table 5.3).

    python3 experiments/gavel_gpu_fidelity.py run --work DIR --policies las [ftf] [--target-s 1000]
        [--isolated-profile] [--repeats N]
    python3 experiments/gavel_gpu_fidelity.py compare --work DIR [--realised]
    python3 experiments/gavel_gpu_fidelity.py rates REAL_DIR...

``run`` (on the GPU machine):

1. Profile the scenario's job types on this machine's worker types (``clustertwin profile``): throughput
   per (job type, worker type) and the restart overhead (process start, checkpoint load and save).
   By default under load (``--under-load``): each pair is measured while every other CPU worker slot
   trains a background job, as in the real run's steady state, where the co-located CPU workers share
   the socket's memory bandwidth and cache. Measured alone (``--isolated-profile``), Recommendation on
   ``cpu`` ran 2.5x faster than in the real run and the calibrated simulator under-predicted the
   makespan by 30% (a 1.9x of that was its subnormal momentum, since flushed: ``runtime.gavel.training_env``).
2. Size the trace: each job's steps are its base duration on a `cpu` worker times a common scale, chosen
   (by bisection on the *simulator*, calibrated by the profile) so that the first policy takes about
   ``--target-s`` seconds.
3. Run the trace for real under each policy (heterogeneity-aware LAS, FTF, ...). One policy has the whole
   machine (each slot pinned to cores of its own, ``real.pin_cores``); two run at once, each on its own
   GPU (``--gpus``) and half the CPU cores (``taskset``), pinned within its half where the half has a
   core for every slot (the two-GPU host's 32 vCPUs; not the one-GPU host's 16).
   Two policies are also profiled at once, each on its own half (``profile-<policy>.throughputs.csv``),
   so that each profile sees the load its real run will see: its own half busy and the other half busy
   too (the halves share the host's memory system). Each policy's simulation is calibrated by its
   own half's profile; the trace is sized by the first policy's.

``compare`` (anywhere, e.g. after fetching DIR from the GPU machine): simulate every real run from the
same scenario, trace and profile, and compare (``clustertwin compare``); a run that stopped early
(``real-<policy>.partial/``) is compared on the jobs it finished. ``results.json`` in DIR holds the
headline figures. ``--realised`` adds a diagnosis that separates the profile's error from the
simulator's: each run is also simulated from ``realised-<policy>.throughputs.csv``, the profile with every
(job type, worker type) pair that trained in the run set to the rate it reached
(:func:`realised_throughputs`), and the policy starting from the profile and learning each job's rates
from its rounds, as the real scheduler does (``mechanism.planned_throughputs``), into
``compare-<policy>-realised/`` and ``results.json``'s ``realised``.

``rates`` (anywhere) prints, per pair of a real run, the median rate of its rounds that renewed a process
and of those that started one, and how the renewed rounds' rate moves with the number of CPU worker
slots busy in the round (:func:`round_rates`): whether the host's load or a process's age moves a rate.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from clustertwin.runtime.gavel.profile import overheads_path

if TYPE_CHECKING:
    import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "gavel-real-gpu.yaml"
TEMPLATE = ROOT / "scenarios" / "traces" / "gavel-real-gpu.trace"
# Base durations (seconds on one `cpu` worker) cycled over the template's jobs: a spread of job sizes.
BASE_DURATIONS_S = (120, 360, 240, 480, 180, 300, 420)
POLICIES = ("las", "ftf")


def clustertwin(*args: str, cpus: list[int] | None = None) -> subprocess.Popen:
    command = [sys.executable, "-m", "clustertwin", *args]
    if cpus is not None:
        command = ["taskset", "-c", ",".join(map(str, cpus)), *command]
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
    from clustertwin.analysis.gavel_metrics import gavel_metrics
    from clustertwin.scenarios.load import load_scenario

    from clustertwin.api import simulate

    scenario = load_scenario(SCENARIO, overrides)
    return float(gavel_metrics(simulate(scenario), dict(scenario.cluster.gpus))["makespan_s"])


def profile_csv(work: Path, policy: str) -> Path:
    """The policy's own profile (two policies profiled at once, one per half), else the common one."""
    own = work / f"profile-{policy}.throughputs.csv"
    return own if own.is_file() else work / "profile.throughputs.csv"


def calibrated(work: Path, policy: str) -> list[str]:
    """The overrides that calibrate the scenario for ``policy`` by its profile and the sized trace in
    ``work``."""
    plan = json.loads((work / "plan.json").read_text())
    cost = plan.get("overheads_by_policy", {}).get(policy, plan["overheads_s"])
    return [
        f"throughputs={profile_csv(work, policy)}",
        f"workload.trace={work / 'trace.trace'}",
        f"mechanism.preemption_overhead_s={json.dumps(cost)}",
        *plan["extra"],
    ]


def policy_overrides(policy: str) -> list[str]:
    return [f"policy.name={policy}", "policy.params={aware: true}"]


def flags(overrides: list[str]) -> list[str]:
    return [x for s in overrides for x in ("--set", s)]


def shares(policies: list[str], gpus: list[int]) -> list[tuple[list[int] | None, int]]:
    """(CPUs for taskset, GPU) of each policy: the whole machine for one, a half each for two."""
    if len(policies) == 1:
        return [(None, gpus[0])]
    cpus = sorted(os.sched_getaffinity(0))
    halves = [cpus[: len(cpus) // 2], cpus[len(cpus) // 2 :]]
    return list(zip(halves, gpus, strict=False))


def pinnable(cpus: list[int] | None) -> bool:
    """Whether a share of the machine gives each of the scenario's slots a core of its own: half of the
    16-vCPU one-GPU host does not (9 slots), half of the 32-vCPU two-GPU host does."""
    from clustertwin.runtime.cores import slot_cores
    from clustertwin.scenarios.load import load_scenario

    from clustertwin.errors import InputError

    if cpus is None:
        return True
    try:
        slot_cores(load_scenario(SCENARIO), cpus)
    except InputError:
        return False
    return True


def run(args: argparse.Namespace) -> int:
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    extra = ["real.workers.gpu={device: cpu}"] if args.cpu_only else []
    places = shares(args.policies, args.gpus)
    if not all(pinnable(cpus) for cpus, _ in places):
        extra.append("real.pin_cores=false")
    load = ["--under-load"] if args.under_load else []
    profiles = {}
    for policy, (cores, gpu) in zip(args.policies, places, strict=True):
        name = "profile" if len(args.policies) == 1 else f"profile-{policy}"
        device = [] if args.cpu_only else [f"real.workers.gpu.cuda_devices=[{gpu}]"]
        out = work / f"{name}.throughputs.csv"
        length = ("--seconds", "8", "--repeats", str(args.repeats))
        args_ = ("profile", str(SCENARIO), *flags(extra + device), "--out", str(out), *length, *load)
        profiles[policy] = (out, clustertwin(*args_, cpus=cores))
    for _, process in profiles.values():
        check(process)
    cost = {p: overheads(overheads_path(out)) for p, (out, _) in profiles.items()}
    first = args.policies[0]
    plan = {"overheads_s": cost[first], "overheads_by_policy": cost, "extra": extra}
    (work / "plan.json").write_text(json.dumps(plan))
    common = calibrated(work, first) + policy_overrides(first)

    # Size the trace so that the first policy's simulated run lasts about --target-s (bisection).
    throughput = cpu_throughputs(profiles[first][0])
    low, high = 0.01, 100.0
    for _ in range(14):
        scale = (low * high) ** 0.5
        write_trace(work / "trace.trace", scale, throughput)
        if simulated_makespan(common) < args.target_s:
            low = scale
        else:
            high = scale
    write_trace(work / "trace.trace", low, throughput)
    predicted = {p: simulated_makespan(calibrated(work, p) + policy_overrides(p)) for p in args.policies}
    plan |= {
        "profile_mode": "under-load" if args.under_load else "isolated",
        "profile_repeats": args.repeats,
        "scale": low,
        "predicted_makespan_s": predicted,
    }
    (work / "plan.json").write_text(json.dumps(plan, indent=2))
    print(json.dumps(plan), flush=True)

    runs = []
    for policy, (cores, gpu) in zip(args.policies, places, strict=True):
        sets = calibrated(work, policy) + policy_overrides(policy)
        if not args.cpu_only:
            sets.append(f"real.workers.gpu.cuda_devices=[{gpu}]")
        out = work / f"real-{policy}"
        runs.append(clustertwin("run", str(SCENARIO), "--backend", "real", "--out", str(out), "--quiet",
                                *flags(sets), cpus=cores))  # fmt: skip
    for real in runs:
        check(real)
    (work / "DONE").write_text("ok\n")
    return 0


def compare(args: argparse.Namespace) -> int:
    work = args.work.resolve()
    results = json.loads((work / "plan.json").read_text())
    results["results"], results["unfinished"] = {}, {}
    if args.realised:
        results["realised"] = {}
    for real in sorted(p for p in work.glob("real-*") if p.is_dir()):
        finished = (real / "summary.json").is_file()
        if not finished and not (real / "jobs.parquet").is_file():
            continue
        policy = real.name.removeprefix("real-").removesuffix(".partial")
        sets = calibrated(work, policy) + policy_overrides(policy)
        figures = simulate_and_compare(work, real, policy, sets)
        if finished:
            results["results"][policy] = figures
        else:
            results["unfinished"][policy] = figures | unfinished(real)
        if args.realised:
            table = work / f"realised-{policy}.throughputs.csv"
            realised_throughputs(real, profile_csv(work, policy), table)
            # The jobs move at the realised rates; the policy starts from the profile, as the real
            # scheduler did, and learns from the rounds.
            planned = f"mechanism.planned_throughputs={profile_csv(work, policy)}"
            sets = [f"throughputs={table}", planned, *sets[1:]]  # calibrated() names the throughputs first
            results["realised"][policy] = simulate_and_compare(work, real, policy, sets, "-realised")
    (work / "results.json").write_text(json.dumps(results, indent=2))
    print(
        json.dumps({k: v for k, v in results.items() if k in ("results", "unfinished", "realised")}, indent=2)
    )
    return 0


def simulate_and_compare(work: Path, real: Path, policy: str, sets: list[str], suffix: str = "") -> dict:
    """Simulate ``real``'s scenario under ``sets`` into ``sim-<policy><suffix>/`` and compare the two
    (``compare-<policy><suffix>/``); returns ``compare.json``."""
    sim = work / f"sim-{policy}{suffix}"
    check(clustertwin("run", str(SCENARIO), "--backend", "sim", "--out", str(sim), "--quiet",
                      *flags(sets)))  # fmt: skip
    out = work / f"compare-{policy}{suffix}"
    check(clustertwin("compare", str(sim), str(real), "--out", str(out)))
    return json.loads((out / "compare.json").read_text())


def realised_throughputs(real: Path, profile: Path, out: Path) -> None:
    """Write ``profile`` with each (job type, scale factor, worker type) that trained in the real run
    ``real`` set to the steps/s it reached there. A renewed round pays no restart, so its steps over its
    length is the steady rate under that round's load; a pair that only ever started afresh is taken
    from its started rounds, less the restart time the run measured on that worker type
    (``summary.json``'s ``round_overhead_s``; a run that stopped early has no summary, and its started
    rounds then count whole)."""
    import pandas as pd

    jobs = pd.read_parquet(real / "jobs.parquet")[["job_id", "job_type", "scale_factor"]]
    rounds = pd.read_parquet(real / "rounds.parquet").merge(jobs, on="job_id")
    summary = real / "summary.json"
    restart = json.loads(summary.read_text())["run"]["round_overhead_s"] if summary.is_file() else {}
    started = rounds["worker_type"].map(lambda t: restart.get(f"{t}/started", 0.0))
    rounds["seconds"] = rounds["end_s"] - rounds["start_s"] - started.where(~rounds["renewed"], 0.0)
    keys = ["job_type", "scale_factor", "worker_type"]
    renewed = rounds[rounds["renewed"]].groupby(keys)[["steps", "seconds"]].sum()
    fresh = rounds[~rounds["renewed"] & (rounds["seconds"] > 0)].groupby(keys)[["steps", "seconds"]].sum()
    rates = (renewed["steps"] / renewed["seconds"]).combine_first(fresh["steps"] / fresh["seconds"])
    table = pd.read_csv(profile).merge(rates.rename("reached").reset_index(), on=keys, how="left")
    table["throughput"] = table["reached"].fillna(table["throughput"]).round(3)
    table.drop(columns="reached").to_csv(out, index=False)


def unfinished(partial: Path) -> dict[str, object]:
    """What a run that stopped early (``real-<policy>.partial/``, written round by round) still owed,
    and its makespan's lower bound: the end of its last round. ``clustertwin compare`` compares its
    finished jobs."""
    import pandas as pd

    jobs = pd.read_parquet(partial / "jobs.parquet")
    left = jobs[jobs["completion_s"].isna()]
    steps_left = {int(r.job_id): int(r.total_steps - r.steps_done) for r in left.itertuples()}
    return {
        "jobs": len(jobs),
        "unfinished_steps_left": steps_left,
        "makespan_real_at_least_s": float(pd.read_parquet(partial / "rounds.parquet")["end_s"].max()),
    }


def round_rates(real: Path) -> pd.DataFrame:
    """Per (job type, worker type) of the real run ``real``: the median rate of its full-length rounds
    that renewed a process and of those that started one (less the restart time the run measured), and
    the slope of the renewed rounds' rate against the number of CPU worker slots busy in that round, as
    a fraction of the pair's median per slot. A host whose CPU workers slow each other down gives a
    negative slope."""
    import numpy as np
    import pandas as pd

    jobs = pd.read_parquet(real / "jobs.parquet")[["job_id", "job_type"]]
    rounds = pd.read_parquet(real / "rounds.parquet").merge(jobs, on="job_id")
    summary = real / "summary.json"
    restart = json.loads(summary.read_text())["run"]["round_overhead_s"] if summary.is_file() else {}
    from clustertwin.scenarios.load import load_scenario

    workers = load_scenario(SCENARIO).real.workers  # the experiment's worker types
    cpu = [name for name, worker in workers.items() if worker.device == "cpu"]
    busy = rounds[rounds["worker_type"].isin(cpu)].groupby("round").size().rename("busy_cpu_slots")
    rounds = rounds.merge(busy, left_on="round", right_index=True, how="left").fillna({"busy_cpu_slots": 0})
    length = rounds["end_s"] - rounds["start_s"]
    started = (
        rounds["worker_type"].map(lambda t: restart.get(f"{t}/started", 0.0)).where(~rounds["renewed"], 0.0)
    )
    rounds["rate"] = rounds["steps"] / (length - started)
    full = rounds[length >= 0.9 * length.max()]
    rows = []
    for (job_type, worker_type), pair in full.groupby(["job_type", "worker_type"]):
        renewed, fresh = pair[pair["renewed"]], pair[~pair["renewed"]]
        slope = math.nan
        if len(renewed) >= 3 and renewed["busy_cpu_slots"].nunique() >= 2:
            slope = float(
                np.polyfit(renewed["busy_cpu_slots"], renewed["rate"] / renewed["rate"].median(), 1)[0]
            )
        rows.append((job_type, worker_type, len(renewed), renewed["rate"].median(), len(fresh),
                     fresh["rate"].median(), slope))  # fmt: skip
    columns = ["job_type", "worker_type", "renewed_rounds", "renewed_rate", "started_rounds", "started_rate",
               "slope_per_busy_slot"]  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def rates(args: argparse.Namespace) -> int:
    import pandas as pd

    with pd.option_context("display.width", 200, "display.max_columns", None):
        for real in args.real:
            print(f"{real}\n{round_rates(real).round(3).to_string(index=False)}\n")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    real = commands.add_parser("run", help="profile, size the trace and run it for real (GPU machine)")
    real.add_argument("--work", type=Path, required=True)
    real.add_argument("--policies", nargs="+", choices=POLICIES, default=["las"])
    real.add_argument("--gpus", type=int, nargs="+", default=[0, 1])
    real.add_argument("--target-s", type=float, default=1000.0)
    real.add_argument("--cpu-only", action="store_true", help="a dry run with the gpu type on a CPU")
    real.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="measured leases per profiled pair, their median taken (each one adds about 20 s per pair)",
    )
    real.add_argument(
        "--under-load",
        dest="under_load",
        action="store_true",
        default=True,
        help="profile each pair while the other CPU worker slots train (the default)",
    )
    real.add_argument(
        "--isolated-profile",
        dest="under_load",
        action="store_false",
        help="profile each pair alone on the machine instead",
    )
    versus = commands.add_parser("compare", help="simulate the finished real runs and compare")
    versus.add_argument("--work", type=Path, required=True)
    versus.add_argument(
        "--realised",
        action="store_true",
        help="also simulate each run calibrated by the rates it reached (a diagnosis of the profile)",
    )
    load = commands.add_parser(
        "rates", help="a real run's per-pair rates in renewed and started rounds, and against the host's load"
    )
    load.add_argument("real", type=Path, nargs="+", help="a real run's folder (real-<policy>/)")
    args = parser.parse_args()
    if args.command == "run" and len(args.policies) > 2:
        parser.error("at most two policies run at once")
    return {"run": run, "compare": compare, "rates": rates}[args.command](args)


if __name__ == "__main__":
    raise SystemExit(main())
