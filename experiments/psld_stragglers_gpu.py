"""Fig. 14 for real: does PSLD's speedup over MXNet's default grow with the number of 1 Gbit/s PSs?
(Figs. 12–14 tested on the real runtime; [PSLD] §6.2, Fig. 14;
docs/algorithms/psld.md, "Fidelity").

    python -m experiments.psld_stragglers_gpu run --out DIR [--device cuda|cpu] [--tiny] [--k 1 2 4]
    python -m experiments.psld_stragglers_gpu report --from DIR
    python -m experiments.psld_stragglers_gpu resim --from DIR [--seeds K]

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

Each run is then simulated with the profiling run's calibration (the same overrides, caps included),
without timing noise on the scheduler's samples and with the timing noise the calibration
measured, over ``--seeds`` seeds (``predict``). Without noise the simulated scheduler trusts its
samples too much: on 4 × H100 it piled 88–95 MB of the 102 MB onto one PS, where the real one spread
them over 3–7 PSs, and under-predicted PSLD by 40–57%. The speedup S(k) is PSLD's rate over mxnet's at
the same k, and the claim's statistic is S(largest k) / S(smallest k), which must be ≥ 1 for "the
speedup grows"; it is reported for the real rates and both simulations. DIR gets ``results.json``,
``table.csv``, every run's iteration table (``{real,sim}_{run}_iterations.parquet``; sim: the
noiseless one) and the real runs' reassignments and loads (``real_{run}_{reassignments,loads}.parquet``).
``resim`` recomputes the simulations from DIR's ``results.json`` alone into ``DIR/resim.json``.

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

from experiments.psld_gpu import (  # noqa: E402
    GAIN_TEST,
    SCENARIO,
    _rate,
    recorded_overrides,
    run_overrides,
    seed_spread,
)

FAST_GBPS, SLOW_GBPS = 10.0, 1.0  # [PSLD] §6.1: links capped at 10 Gbps, a straggler at 1 Gbps
POLICIES = ("mxnet", "psld")
SEEDS = 4  # PSLD simulations with the measured timing noise, per k
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
    from clustertwin.scenarios.load import load_scenario

    servers = load_scenario(SCENARIO, base).cluster.servers
    if not ks or min(ks) < 1 or max(ks) >= servers:
        raise ValueError(f"--k: each k must be 1..{servers - 1} (a PS must stay fast), got {list(ks)}")
    runs = {"profiling": run_overrides("profiling", base, profile_s, run_s, warmup_s)}
    for k in ks:
        for p in POLICIES:
            runs[f"{p}-k{k}"] = run_overrides(p, [*base, links(k, servers)], profile_s, run_s, warmup_s)
    return runs


def growth(rows: list[dict[str, Any]], side: str) -> dict[str, float]:
    """S(k) = PSLD / mxnet at each k from the table's ``{side}_it_s`` column, and S(largest k) /
    S(smallest k) under ``"growth"``."""
    rate = {(r["policy"], r["k"]): r[f"{side}_it_s"] for r in rows}
    ks = sorted({k for _, k in rate})
    speedup = {f"k{k}": rate["psld", k] / rate["mxnet", k] for k in ks}
    return {**speedup, "growth": speedup[f"k{ks[-1]}"] / speedup[f"k{ks[0]}"]}


def predict(
    runs: dict[str, list[str]], calibration: list[str], noise: float, seeds: int
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Each run of ``plan`` simulated with ``calibration`` (the profiling run's overrides), twice over:

    * without timing noise on the scheduler's samples (``sim``), seed 0: the calibration feeds the
      measured noise now (``runtime.psld.calibrate``), and this row keeps the noiseless comparison;
    * with the measured timing noise ``noise`` (``noisy_sim``), seeds 0..``seeds``-1: median, min, max.
      Noise only perturbs the samples a scheduler reads, so mxnet (no scheduler) gets its one
      noiseless rate there too.

    Returns name -> rates and reassignment counts, and name -> the noiseless run objects."""
    from clustertwin.scenarios.load import load_scenario
    from clustertwin.sim.psld import run as simulate

    quiet = [*calibration, "costs.timing_noise=0"]
    sims = {name: simulate(load_scenario(SCENARIO, [*o, *quiet])) for name, o in runs.items()}
    out: dict[str, dict[str, Any]] = {}
    for name, o in runs.items():
        rate, moves = _rate(sims[name]), len(sims[name].tables["reassignments"])
        noisy = {"median": rate, "min": rate, "max": rate, "reassignments": [moves]}
        if name.startswith("psld"):
            noisy = seed_spread(SCENARIO, [*o, *calibration, f"costs.timing_noise={noise}"], seeds)
        out[name] = {
            "sim_it_s": rate,
            "sim_reassignments": moves,
            "noisy_sim_median_it_s": noisy["median"],
            "noisy_sim_min_it_s": noisy["min"],
            "noisy_sim_max_it_s": noisy["max"],
            "noisy_sim_reassignments": f"{min(noisy['reassignments'])}-{max(noisy['reassignments'])}",
        }
    return out, sims


def table(real: dict[str, dict[str, Any]], sim: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (policy, k): the real rate and reassignments (``real``: name -> ``real_it_s``,
    ``real_reassignments``, ``real_iterations``) next to ``predict``'s, with the relative errors of the
    noiseless simulation and of the noisy median, and whether the real rate lies in the noisy range."""
    rows = []
    for name, r in real.items():
        policy, k = name.split("-k")
        p = sim[name]
        it = r["real_it_s"]
        rows.append(
            {
                "policy": policy,
                "k": int(k),
                **r,
                **p,
                "rel_error": (p["sim_it_s"] - it) / it if it > 0 else math.nan,
                "noisy_rel_error": (p["noisy_sim_median_it_s"] - it) / it if it > 0 else math.nan,
                "real_in_noisy_range": p["noisy_sim_min_it_s"] <= it <= p["noisy_sim_max_it_s"],
            }
        )
    return rows


def speedups(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """``growth`` of the real rates, the noiseless simulation's and the noisy simulation's medians."""
    return {side: growth(rows, side) for side in ("real", "sim", "noisy_sim_median")}


def measure(
    runs: dict[str, list[str]],
    base: list[str],
    ks: tuple[int, ...],
    profile_s: float,
    run_s: float,
    warmup_s: float,
    seeds: int = SEEDS,
    log=print,
) -> dict[str, Any]:
    """Every run of ``runs`` (``plan(base, ks, profile_s, run_s, warmup_s)``) for real in one launch, the
    calibration, and ``predict``'s simulations. Returns the JSON-able ``results`` and the run objects
    under ``runs``."""
    from clustertwin.runtime.psld.calibrate import calibrate
    from clustertwin.runtime.psld.run import run_real_many
    from clustertwin.scenarios.load import load_scenario

    t0 = time.perf_counter()
    reals = dict(zip(runs, run_real_many([load_scenario(SCENARIO, o) for o in runs.values()]), strict=True))
    real_wall = time.perf_counter() - t0
    log(f"real runs done in {real_wall:.0f} s (one launch: {', '.join(runs)})")
    cal = calibrate(reals["profiling"])
    log(f"calibration: {json.dumps(cal.as_dict())}")
    predicted, sims = predict(runs, cal.overrides(), cal.timing_noise, seeds)
    real = {
        name: {
            "real_it_s": _rate(result),
            "real_reassignments": len(result.tables["reassignments"]),
            "real_iterations": int(result.info["iterations_run"]),
        }
        for name, result in reals.items()
        if name != "profiling"
    }
    rows = table(real, predicted)
    info = reals[f"psld-k{ks[0]}"].info
    results = {
        "scenario": str(SCENARIO.relative_to(ROOT)),
        "overrides": base,
        "ks": list(ks),
        "profile_s": profile_s,
        "duration_s": run_s,
        "warmup_s": warmup_s,
        "seeds": seeds,
        "device": info["device"],
        "workers": info["workers"],
        "servers": info["servers"],
        "model_bytes": info["model_bytes"],
        "blocks": info["blocks"],
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(), "machine": platform.node()},
        "real_wall_s": real_wall,
        "calibration": cal.as_dict(),
        "profiling_it_s": _rate(reals["profiling"]),
        "profiling_sim_it_s": predicted["profiling"]["sim_it_s"],
        "table": rows,
        "speedup": speedups(rows),
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


def resim(folder: Path, seeds: int = SEEDS) -> dict[str, Any]:
    """``results.json`` of ``folder`` with ``predict``'s simulations recomputed from its calibration (the
    real rates as saved)."""
    results = json.loads((folder / "results.json").read_text())
    base = recorded_overrides(results["overrides"])
    ks = tuple(results["ks"])
    runs = plan(base, ks, results["profile_s"], results["duration_s"], results["warmup_s"])
    cal = results["calibration"]
    predicted, _ = predict(runs, cal["overrides"], cal["timing_noise"], seeds)
    keep = ("real_it_s", "real_reassignments", "real_iterations")
    real = {f"{r['policy']}-k{r['k']}": {key: r[key] for key in keep} for r in results["table"]}
    rows = table(real, predicted)
    results.pop("speedup_real", None)  # the layout before the noisy simulation existed
    results.pop("speedup_sim", None)
    return {
        **results,
        "seeds": seeds,
        "profiling_sim_it_s": predicted["profiling"]["sim_it_s"],
        "table": rows,
        "speedup": speedups(rows),
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
    """The markdown summary of one ``run``'s (or ``resim``'s) results."""
    seeds = results["seeds"]
    lines = [
        f"{results['device']} workers, {results['workers']} workers, {results['servers']} vanilla PSs,"
        f" {results['blocks']} blocks ({results['model_bytes'] / 1e6:.1f} MB); PSs 0..k−1 at"
        f" {SLOW_GBPS:g} Gbit/s, the others at {FAST_GBPS:g}",
        "",
        "| k | policy | real it/s | sim (calibrated) it/s | sim / real − 1 | with the measured noise,"
        f" {seeds} seeds: median [min–max] it/s | median / real − 1 | reassignments real / sim / noisy sim |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results["table"]:
        lines.append(
            f"| {r['k']} | {r['policy']} | {r['real_it_s']:.3f} | {r['sim_it_s']:.3f} |"
            f" {r['rel_error']:+.1%} | {r['noisy_sim_median_it_s']:.3f}"
            f" [{r['noisy_sim_min_it_s']:.3f}–{r['noisy_sim_max_it_s']:.3f}] |"
            f" {r['noisy_rel_error']:+.1%} | {r['real_reassignments']} / {r['sim_reassignments']} /"
            f" {r['noisy_sim_reassignments']} |"
        )
    ks = results["ks"]
    lines += [
        "",
        "| | " + " | ".join(f"S(k = {k})" for k in ks) + f" | S({ks[-1]}) / S({ks[0]}) (grows: ≥ 1) |",
        "|---|" + "---|" * (len(ks) + 1),
    ]
    names = {"real": "real", "sim": "sim (calibrated)", "noisy_sim_median": "sim with the noise (medians)"}
    for side, s in results["speedup"].items():
        cells = [f"{s[f'k{k}']:.2f}×" for k in ks]
        lines.append(f"| {names[side]} | {' | '.join(cells)} | {s['growth']:.2f} ({s['growth'] >= 1}) |")
    cal = results["calibration"]
    lines += [
        "",
        f"* profiling (no caps): real {results['profiling_it_s']:.3f} it/s, calibrated sim"
        f" {results['profiling_sim_it_s']:.3f} it/s; link {cal['link_gbps']:.2f} Gbit/s per process,"
        f" compute {cal['compute_s'] * 1e3:.1f} ms, latency {cal['latency_s'] * 1e3:.2f} ms, timing noise"
        f" {cal['timing_noise']:.3f}",
        f"* real runs' wall time (one launch, start-up included): {results['real_wall_s']:.0f} s",
    ]
    return "\n".join(lines)


def _seeds(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"the noisy range needs at least one simulation (got {n})")
    return n


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
    again = commands.add_parser(
        "resim", help="recompute the simulations from DIR's calibration (DIR/resim.json)"
    )
    again.add_argument("--from", dest="source", type=Path, required=True)
    for sub in (run, again):
        sub.add_argument(
            "--seeds", type=_seeds, default=SEEDS, help="PSLD simulations with the measured noise"
        )
    args = parser.parse_args(argv)
    if args.command != "run" and not (args.source / "results.json").is_file():
        parser.error(f"--from {args.source}: no results.json there (a folder that `run` wrote)")
    if args.command == "report":
        print(report(json.loads((args.source / "results.json").read_text())))
        return 0
    if args.command == "resim":
        results = resim(args.source, args.seeds)
        (args.source / "resim.json").write_text(json.dumps(results, indent=1) + "\n")
        print(report(results))
        return 0
    size = "tiny" if args.tiny else "full"
    profile_s, run_s, warmup_s, extra, ks = SIZES[size]
    ks = tuple(sorted(set(args.k))) if args.k else ks
    base = [*extra, f"real.device={args.device}", GAIN_TEST]
    try:
        runs = plan(base, ks, profile_s, run_s, warmup_s)
    except ValueError as e:
        parser.error(str(e))
    t0 = time.perf_counter()
    done = measure(runs, base, ks, profile_s, run_s, warmup_s, args.seeds)
    results = {**done["results"], "size": size, "wall_s": time.perf_counter() - t0}
    write(args.out, {**done, "results": results})
    print(f"\n{report(results)}\n\nwall time {results['wall_s']:.0f} s; results in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
