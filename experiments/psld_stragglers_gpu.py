"""Fig. 14 for real: does PSLD's speedup over MXNet's default grow with the number of 1 Gbit/s PSs?
(issue 5, must-show 1's Figs. 12–14 claim, tested on the real runtime; seed 002 §6.2, Fig. 14;
docs/psld.md, "Fig. 14 for real").

    python -m experiments.psld_stragglers_gpu run --out DIR [--device cuda|cpu] [--tiny] [--k 1 2 4]
    python -m experiments.psld_stragglers_gpu report --from DIR

The simulated Fig. 14 (``clustertwin reproduce psld``) says no: a baseline bound by its slowest PS does
not slow down when more PSs are as slow (their shares drain in parallel, each on its own NIC), while
PSLD loses the stragglers' capacity. This experiment puts that physics to a physical test. ``run``
takes ``scenarios/psld-real-gpu.yaml`` with ResNet-50's tensors (102 MB in 4 MB blocks) on 8 workers
and 8 vanilla PSs, as Fig. 14 (8 workers, 1:1), and runs in one launch of the processes:

1. **profiling**: PSLD's round-robin layout, no emulated NIC caps, the scheduler never acting: what
   ``runtime.psld.calibrate`` measures (the host's transport, compute, latency, summing);
2. for each k of ``--k``: **mxnet** and **psld** with PSs 0..k-1 capped at 1 Gbit/s and the others at
   10 Gbit/s (§6.1 caps every link at 10 Gbps with ``tc`` and a straggler at 1 Gbps; the runtime's
   emulated NIC, ``runtime.psld.throttle.Link``, caps a PS only where a straggler entry names it, so
   the fast PSs get an entry at 10 Gbit/s). The workers' links stay uncapped (the host's loopback).

Each run is then simulated with the profiling run's calibration (the same overrides, caps included).
The speedup S(k) is PSLD's rate over mxnet's at the same k, and the claim's statistic is S(largest k) /
S(smallest k), which must be ≥ 1 for "the speedup grows"; both are reported real and simulated. DIR gets
``results.json``, ``table.csv``, every run's iteration table (``{real,sim}_{run}_iterations.parquet``)
and the real runs' reassignments and loads (``real_{run}_{reassignments,loads}.parquet``).

The real runs are this runtime's (gloo over loopback TCP, Python PSs), not MXNet's or BytePS's, so the
test is of the mechanism the simulator models, not of the paper's testbed.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # python experiments/psld_stragglers_gpu.py from anywhere
    sys.path.insert(0, str(ROOT))

from experiments.psld_gpu import FROZEN, SCENARIO, _rate  # noqa: E402

FAST_GBPS, SLOW_GBPS = 10.0, 1.0  # seed 002 §6.1: links capped at 10 Gbps, a straggler at 1 Gbps
POLICIES = ("mxnet", "psld")
# (profiling duration_s, run duration_s, warmup_s, overrides, k values) per size. A full run's warm-up
# covers PSLD's first decisions (round-robin iterations with a 1 Gbit/s PS take about 1.7 s).
SIZES: dict[str, tuple[float, float, float, list[str], tuple[int, ...]]] = {
    "full": (12.0, 30.0, 10.0, ["model=resnet50", "cluster.workers=8", "cluster.servers=8"], (1, 2, 4)),
    # 2 workers and 4 PSs on CPU: the whole pipeline in seconds on a small host
    "tiny": (
        2.0,
        4.0,
        0.0,
        ["cluster.workers=2", "cluster.servers=4", "batch_size=4", "psld.report_every=1"],
        (1, 2),
    ),
}


def links(k: int, servers: int) -> str:
    """The ``stragglers`` override capping PSs 0..k-1 at ``SLOW_GBPS`` and the others at ``FAST_GBPS``."""
    caps = [
        f"{{server: {r}, what: bandwidth, value: {SLOW_GBPS if r < k else FAST_GBPS}}}"
        for r in range(servers)
    ]
    return f"stragglers=[{', '.join(caps)}]"


def plan(
    base: list[str], ks: tuple[int, ...], profile_s: float, run_s: float, warmup_s: float
) -> dict[str, list[str]]:
    """The launch's runs in order, each name (``profiling``, ``mxnet-k1``, ``psld-k1``, ...) with its
    scenario overrides (before the calibration's, for a simulation)."""
    from scenarios.load import load_scenario

    servers = load_scenario(SCENARIO, base).cluster.servers
    if not ks or min(ks) < 1 or max(ks) >= servers:
        raise ValueError(f"--k: each k must be 1..{servers - 1} (a PS must stay fast), got {list(ks)}")
    runs = {
        "profiling": [
            *base,
            "policy=psld",
            "stragglers=[]",
            *FROZEN,
            f"duration_s={profile_s}",
            f"warmup_s={min(warmup_s, profile_s / 2)}",
        ],
    }
    for k in ks:
        for p in POLICIES:
            runs[f"{p}-k{k}"] = [
                *base,
                f"policy={p}",
                links(k, servers),
                f"duration_s={run_s}",
                f"warmup_s={warmup_s}",
            ]
    return runs


def growth(rows: list[dict[str, Any]], side: str) -> dict[str, float]:
    """S(k) = PSLD / mxnet at each k on one side (``real`` or ``sim``) of the table, and S(largest k) /
    S(smallest k) under ``"growth"``."""
    rate = {(r["policy"], r["k"]): r[f"{side}_it_s"] for r in rows}
    ks = sorted({k for _, k in rate})
    speedup = {f"k{k}": rate["psld", k] / rate["mxnet", k] for k in ks}
    return {**speedup, "growth": speedup[f"k{ks[-1]}"] / speedup[f"k{ks[0]}"]}


def measure(
    base: list[str], ks: tuple[int, ...], profile_s: float, run_s: float, warmup_s: float, log=print
) -> dict[str, Any]:
    """Every run of ``plan`` for real in one launch, the calibration, and each run's calibrated
    simulation. Returns the JSON-able ``results`` and the run objects under ``runs``."""
    from runtime.psld.calibrate import calibrate
    from runtime.psld.run import run_real_many
    from scenarios.load import load_scenario
    from sim.psld import run as simulate

    runs = plan(base, ks, profile_s, run_s, warmup_s)
    t0 = time.perf_counter()
    reals = dict(zip(runs, run_real_many([load_scenario(SCENARIO, o) for o in runs.values()]), strict=True))
    real_wall = time.perf_counter() - t0
    log(f"real runs done in {real_wall:.0f} s (one launch: {', '.join(runs)})")
    cal = calibrate(reals["profiling"])
    log(f"calibration: {json.dumps(cal.as_dict())}")
    sims = {name: simulate(load_scenario(SCENARIO, [*o, *cal.overrides()])) for name, o in runs.items()}
    rows = []
    for name in runs:
        if name == "profiling":
            continue
        policy, k = name.split("-k")
        real, sim = _rate(reals[name]), _rate(sims[name])
        rows.append(
            {
                "policy": policy,
                "k": int(k),
                "real_it_s": real,
                "sim_it_s": sim,
                "rel_error": (sim - real) / real if real > 0 else math.nan,
                "real_reassignments": len(reals[name].tables["reassignments"]),
                "sim_reassignments": len(sims[name].tables["reassignments"]),
                "real_iterations": int(reals[name].info["iterations_run"]),
            }
        )
        log(f"{name}: real {real:.3f} it/s, sim {sim:.3f} it/s, error {rows[-1]['rel_error']:+.1%}")
    info = reals[f"psld-k{ks[0]}"].info
    results = {
        "scenario": str(SCENARIO.relative_to(ROOT)),
        "overrides": base,
        "ks": list(ks),
        "profile_s": profile_s,
        "duration_s": run_s,
        "warmup_s": warmup_s,
        "device": info["device"],
        "workers": info["workers"],
        "servers": info["servers"],
        "model_bytes": info["model_bytes"],
        "blocks": info["blocks"],
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(), "machine": platform.node()},
        "real_wall_s": real_wall,
        "calibration": cal.as_dict(),
        "profiling_it_s": _rate(reals["profiling"]),
        "profiling_sim_it_s": _rate(sims["profiling"]),
        "table": rows,
        "speedup_real": growth(rows, "real"),
        "speedup_sim": growth(rows, "sim"),
        "sim_command": [
            f"clustertwin run {SCENARIO.relative_to(ROOT)} "
            + " ".join(f"--set '{o}'" for o in [*o, *cal.overrides()])
            for name, o in runs.items()
            if name != "profiling"
        ],
    }
    return {
        "results": results,
        "runs": {**{f"real_{n}": r for n, r in reals.items()}, **{f"sim_{n}": s for n, s in sims.items()}},
    }


def write(out: Path, done: dict[str, Any]) -> None:
    """``results.json``, ``table.csv``, every run's iteration table and the real runs' reassignments and
    loads under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    results = done["results"]
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    with (out / "table.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(results["table"][0]))
        writer.writeheader()
        writer.writerows(results["table"])
    for name, result in done["runs"].items():
        tables = ("iterations", "reassignments", "loads") if name.startswith("real_") else ("iterations",)
        for table in tables:  # the real runs' maps too: which PSs PSLD left loaded
            result.tables[table].to_parquet(out / f"{name}_{table}.parquet")


def report(results: dict[str, Any]) -> str:
    """The markdown summary of one ``run``'s results."""
    lines = [
        f"{results['device']} workers, {results['workers']} workers, {results['servers']} vanilla PSs,"
        f" {results['blocks']} blocks ({results['model_bytes'] / 1e6:.1f} MB); PSs 0..k−1 at"
        f" {SLOW_GBPS:g} Gbit/s, the others at {FAST_GBPS:g}",
        "",
        "| k | policy | real it/s | sim (calibrated) it/s | sim / real − 1 | reassignments real / sim |",
        "|---|---|---|---|---|---|",
    ]
    for r in results["table"]:
        lines.append(
            f"| {r['k']} | {r['policy']} | {r['real_it_s']:.3f} | {r['sim_it_s']:.3f} |"
            f" {r['rel_error']:+.1%} | {r['real_reassignments']} / {r['sim_reassignments']} |"
        )
    real, sim = results["speedup_real"], results["speedup_sim"]
    ks = results["ks"]
    lines += [
        "",
        "| | " + " | ".join(f"S(k = {k})" for k in ks) + f" | S({ks[-1]}) / S({ks[0]}) (grows: ≥ 1) |",
        "|---|" + "---|" * (len(ks) + 1),
    ]
    for side, s in (("real", real), ("sim", sim)):
        cells = [f"{s[f'k{k}']:.2f}×" for k in ks]
        lines.append(f"| {side} | {' | '.join(cells)} | {s['growth']:.2f} ({s['growth'] >= 1}) |")
    cal = results["calibration"]
    lines += [
        "",
        f"* profiling (no caps): real {results['profiling_it_s']:.3f} it/s, calibrated sim"
        f" {results['profiling_sim_it_s']:.3f} it/s; link {cal['link_gbps']:.2f} Gbit/s per process,"
        f" compute {cal['compute_s'] * 1e3:.1f} ms, latency {cal['latency_s'] * 1e3:.2f} ms",
        f"* real runs' wall time (one launch, start-up included): {results['real_wall_s']:.0f} s",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run", help="profile, run mxnet and PSLD at each k for real, calibrate, simulate"
    )
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--tiny", action="store_true", help="2 workers, 4 PSs, a few seconds per run")
    run.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    run.add_argument("--k", type=int, nargs="+", help="numbers of 1 Gbit/s PSs (default 1 2 4; tiny 1 2)")
    rep = commands.add_parser("report", help="print the markdown tables of a run's results")
    rep.add_argument("--from", dest="source", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "report":
        print(report(json.loads((args.source / "results.json").read_text())))
        return 0
    size = "tiny" if args.tiny else "full"
    profile_s, run_s, warmup_s, extra, ks = SIZES[size]
    ks = tuple(sorted(set(args.k))) if args.k else ks
    base = [*extra, f"runtime.device={args.device}"]
    try:
        plan(base, ks, profile_s, run_s, warmup_s)
    except ValueError as e:
        parser.error(str(e))
    t0 = time.perf_counter()
    done = measure(base, ks, profile_s, run_s, warmup_s)
    done["results"]["size"] = size
    done["results"]["wall_s"] = time.perf_counter() - t0
    write(args.out, done)
    print()
    print(report(done["results"]))
    print(f"\nwall time {done['results']['wall_s']:.0f} s; results in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
