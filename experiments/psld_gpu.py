"""PSLD with GPU workers for real, next to a simulation calibrated from a profiling run (issue 5, must-show
3; seed 002 §6.1 and §5.2; docs/psld.md, "Real runs (GPU)").

    python -m experiments.psld_gpu run --out DIR [--quick] [--device cuda|cpu] [--tiny]
    python -m experiments.psld_gpu report --from DIR

``run`` (on the GPU machine; ``--device cpu --tiny`` is a small smoke test for a CPU host) runs
``scenarios/psld-real-gpu.yaml`` (ResNet-18's tensors, 4 GPU workers, 3 PSs, vanilla PS, PS 2's NIC
capped at 1 Gbit/s) for real three times in one launch of the processes:

1. **profiling**: PSLD's initial round-robin layout without the straggler, its scheduler told never to
   act (``psld.straggler_threshold`` 1e9, no recheck): what ``runtime.psld.calibrate`` measures;
2. **mxnet**: MXNet's default layout (the baseline, never reassigned) with the straggler;
3. **psld**: PSLD with the straggler.

It then checks that the PSLD run's final parameters (after its reassignments and vanilla state
migration) are bit-identical to the serial reference of the same job, which never reassigns, with every
worker's gradient computed on the same device (deterministic cuBLAS), reports each reassignment's pause
(PREPARE barrier + migration), and simulates mxnet and PSLD with the calibrated parameters. DIR gets
``results.json`` (everything), ``calibration.json``, ``table.csv``, ``pauses.csv``, the iteration
tables of the five runs (``*_iterations.parquet``), every real block sample (``real_samples.parquet``:
the scheduler's time and the raw time from push issue) and PSLD's reports and reassignments, real and
simulated (``{real,sim}_psld_{reports,reassignments}.parquet``). ``report`` prints the markdown table
from DIR.

Wall time: the first run on 4 H100s and 64 cores took 95 s (80 s of it the real runs, start-up
included); about 1 min with ``--quick``. ``--device cpu --tiny`` took 60 s on a
shared 2-core VM at load average 12.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # python experiments/psld_gpu.py from anywhere
    sys.path.insert(0, str(ROOT))

SCENARIO = ROOT / "scenarios" / "psld-real-gpu.yaml"
POLICIES = ("mxnet", "psld")
# (profiling duration_s, run duration_s, warmup_s, extra overrides) per size
SIZES: dict[str, tuple[float, float, float, list[str]]] = {
    "full": (12.0, 24.0, 4.0, []),
    "quick": (6.0, 12.0, 3.0, []),
    # 2 workers and 2 PSs on CPU, PS 1 throttled: the whole pipeline in seconds on a small host
    "tiny": (
        2.0,
        3.0,
        0.0,  # a tiny run has few iterations: count them all
        [
            "cluster.workers=2",
            "cluster.servers=2",
            "batch_size=4",
            "stragglers=[{server: 1, what: bandwidth, value: 1.0}]",
            "psld.report_every=1",
        ],
    ),
}
# The profiling run: the PSLD layout without the straggler, the scheduler never acting.
PROFILE = ["policy=psld", "stragglers=[]", "psld.straggler_threshold=1000000000.0", "psld.recheck=false"]


def _rate(result) -> float:
    """Iterations per second over the iterations that started after ``warmup_s``, to the run's end. A
    simulation starts none after ``duration_s``; a real run ends at the first iteration boundary after
    ``duration_s``, and its last iteration counts too."""
    from analysis.psld_metrics import window_rate

    return float(window_rate(result.tables["iterations"], float(result.info["warmup_s"]), math.inf))


def params_identical(result) -> tuple[bool, str]:
    """Whether the run's final parameters equal, bit for bit, the serial reference of the same job (same
    iteration count, same per-worker devices, no reassignment); returns (equal, reference sha256)."""
    from runtime.psld.ps import deterministic_cuda, reference

    job = result.job
    if job.device == "cuda":
        deterministic_cuda()
    expected = hashlib.sha256(reference(job).numpy().tobytes()).hexdigest()
    return expected == result.info["final_params_sha256"], expected


def real_vs_sim(
    scenario: Path, base: list[str], profile_s: float, run_s: float, warmup_s: float, log=print
) -> dict[str, Any]:
    """The shared pipeline (also ``experiments.psld_real_vs_sim``): profiling, mxnet and PSLD for real
    in one launch, calibration, identity check, pauses, calibrated simulations. Returns a dict with the
    JSON-able ``results`` and the run objects under ``runs``."""
    from runtime.psld.calibrate import calibrate
    from runtime.psld.run import run_real_many
    from scenarios.load import load_scenario
    from sim.psld import run as simulate

    timing = [f"duration_s={run_s}", f"warmup_s={warmup_s}"]
    profile_sc = load_scenario(
        scenario, [*base, *PROFILE, f"duration_s={profile_s}", f"warmup_s={min(warmup_s, profile_s / 2)}"]
    )
    scenarios = [profile_sc] + [load_scenario(scenario, [*base, *timing, f"policy={p}"]) for p in POLICIES]
    t0 = time.perf_counter()
    profile, *reals = run_real_many(scenarios)
    real_wall = time.perf_counter() - t0
    log(f"real runs done in {real_wall:.0f} s (one launch: profiling, {', '.join(POLICIES)})")
    cal = calibrate(profile)
    log(f"calibration: {json.dumps(cal.as_dict())}")
    psld_real = reals[POLICIES.index("psld")]
    identical, expected_sha = params_identical(psld_real)
    log(f"PSLD's final parameters identical to the no-reassignment reference: {identical}")
    sims = {}
    for p in POLICIES:
        sims[p] = simulate(load_scenario(scenario, [*base, *timing, f"policy={p}", *cal.overrides()]))
    # the calibration's own check: the simulated profiling run must not beat the real one it measured
    profile_sim = simulate(
        load_scenario(
            scenario,
            [*base, *PROFILE, f"duration_s={profile_s}", f"warmup_s={min(warmup_s, profile_s / 2)}"]
            + cal.overrides(),
        )
    )
    log(f"profiling: real {_rate(profile):.3f} it/s, calibrated sim {_rate(profile_sim):.3f} it/s")
    rows = []
    for p, real in zip(POLICIES, reals, strict=True):
        r, s = _rate(real), _rate(sims[p])
        rows.append(
            {
                "policy": p,
                "real_it_s": r,
                "sim_it_s": s,
                "rel_error": (s - r) / r if r > 0 else math.nan,
                "real_reassignments": len(real.tables["reassignments"]),
                "sim_reassignments": len(sims[p].tables["reassignments"]),
                "real_iterations": int(real.info["iterations_run"]),
                "real_run_s": float(real.info["run_s"]),
            }
        )
        log(f"{p}: real {r:.3f} it/s, sim {s:.3f} it/s, error {rows[-1]['rel_error']:+.1%}")
    pauses = [
        {**x, "pause_s": x["barrier_s"] + x["migration_s"], "moved_bytes": float(m)}
        for x, m in zip(
            psld_real.measured["pauses"], psld_real.tables["reassignments"]["moved_bytes"], strict=True
        )
    ]
    by = {row["policy"]: row for row in rows}
    results = {
        "scenario": str(scenario.relative_to(ROOT)),
        "overrides": base,
        "profile_s": profile_s,
        "duration_s": run_s,
        "warmup_s": warmup_s,
        "device": psld_real.info["device"],
        "gradient": psld_real.info["gradient"],
        "mode": psld_real.info["mode"],
        "workers": psld_real.info["workers"],
        "servers": psld_real.info["servers"],
        "model_bytes": psld_real.info["model_bytes"],
        "blocks": psld_real.info["blocks"],
        "gpus": _gpus(psld_real.info["device"]),
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(), "machine": platform.node()},
        "real_wall_s": real_wall,
        "calibration": cal.as_dict(),
        "profiling_it_s": _rate(profile),
        "profiling_sim_it_s": _rate(profile_sim),
        "table": rows,
        "speedup_real": by["psld"]["real_it_s"] / by["mxnet"]["real_it_s"],
        "speedup_sim": by["psld"]["sim_it_s"] / by["mxnet"]["sim_it_s"],
        "pauses": pauses,
        "max_pause_s": max((p["pause_s"] for p in pauses), default=math.nan),
        "params_identical": identical,
        "params_sha256": psld_real.info["final_params_sha256"],
        "reference_sha256": expected_sha,
        "sim_command": [
            f"clustertwin run {scenario.relative_to(ROOT)} "
            + " ".join(f"--set '{o}'" for o in [*base, *timing, f"policy={p}", *cal.overrides()])
            for p in POLICIES
        ],
    }
    runs = {"real_profiling": profile, **{f"real_{p}": r for p, r in zip(POLICIES, reals, strict=True)}}
    runs.update({f"sim_{p}": sims[p] for p in POLICIES})
    return {"results": results, "runs": runs, "sim_profiling": profile_sim}


def _gpus(device: str) -> list[str]:
    if device != "cuda":
        return []
    import torch

    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def write(out: Path, done: dict[str, Any]) -> None:
    """Write the compact results (JSON, CSV and the runs' iteration tables) to ``out``."""
    import csv

    out.mkdir(parents=True, exist_ok=True)
    results = done["results"]
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "calibration.json").write_text(json.dumps(results["calibration"], indent=1) + "\n")
    for name, rows in (("table.csv", results["table"]), ("pauses.csv", results["pauses"])):
        with (out / name).open("w", newline="") as f:
            fields = list(rows[0]) if rows else ["k"]
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
    for name, result in done["runs"].items():
        result.tables["iterations"].to_parquet(out / f"{name}_iterations.parquet")
    # what the scheduler saw and did: every block sample of the real runs (the scheduler's, and the raw
    # time from push issue that the calibration fits), and PSLD's reports and reassignments, real and sim
    import pandas as pd

    rows = [
        (name, s.worker, s.server, s.nbytes, s.seconds, raw.seconds)
        for name, result in done["runs"].items()
        if name.startswith("real_")
        for s, raw in zip(result.samples, getattr(result, "raw_samples", result.samples), strict=True)
    ]
    columns = ["run", "worker", "server", "nbytes", "seconds", "raw_seconds"]
    pd.DataFrame(rows, columns=columns).to_parquet(out / "real_samples.parquet")
    for side in ("real", "sim"):
        result = done["runs"][f"{side}_psld"]
        for table in ("reports", "reassignments"):
            result.tables[table].to_parquet(out / f"{side}_psld_{table}.parquet")


def report(results: dict[str, Any]) -> str:
    """The markdown summary of one ``run``'s results."""
    lines = [
        f"{results['device']} workers ({', '.join(results['gpus']) or 'CPU'}), {results['workers']} workers,"
        f" {results['servers']} PSs, {results['mode']} PS, {results['blocks']} blocks"
        f" ({results['model_bytes'] / 1e6:.1f} MB), gradient: {results['gradient']}",
        "",
        "| policy | real it/s | sim (calibrated) it/s | sim / real − 1 | real reassignments |",
        "|---|---|---|---|---|",
    ]
    for row in results["table"]:
        lines.append(
            f"| {row['policy']} | {row['real_it_s']:.3f} | {row['sim_it_s']:.3f} | {row['rel_error']:+.1%} |"
            f" {row['real_reassignments']} |"
        )
    lines += [
        f"| PSLD / mxnet | {results['speedup_real']:.2f}× | {results['speedup_sim']:.2f}× |"
        f" {results['speedup_sim'] / results['speedup_real'] - 1:+.1%} | |",
        "",
    ]
    for p in results["pauses"]:
        lines.append(
            f"* reassignment at k={p['k']}: pause {p['pause_s']:.3f} s"
            f" (PREPARE barrier {p['barrier_s']:.3f} s + migration {p['migration_s']:.3f} s,"
            f" {p['moved_bytes'] / 1e6:.1f} MB moved)"
        )
    within = ", ".join(f"{r['policy']} {abs(r['rel_error']) <= 0.10}" for r in results["table"])
    cal = results["calibration"]
    lines += [
        f"* largest pause {results['max_pause_s']:.3f} s (< 2 s: {results['max_pause_s'] < 2.0});"
        f" simulation within 10% of the real throughput: {within}",
        f"* parameters after the reassignment(s) identical to the no-reassignment reference:"
        f" {results['params_identical']}",
        f"* calibration (profiling run, {results['profiling_it_s']:.3f} it/s; the calibrated simulation"
        f" of it: {results.get('profiling_sim_it_s', math.nan):.3f} it/s):"
        f" compute {cal['compute_s'] * 1e3:.1f} ms + barrier {cal['barrier_s'] * 1e3:.1f} ms per iteration,"
        f" link {cal['link_gbps']:.2f} Gbit/s per"
        f" process (per PS: {', '.join(f'{g:.2f}' for g in cal['link_gbps_per_ps'])}), latency"
        f" {cal['latency_s'] * 1e3:.2f} ms, summing {cal['sum_gbytes_per_s']:.2f} GB/s",
        f"* real runs' wall time (one launch, start-up included): {results['real_wall_s']:.0f} s",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="profile, run mxnet and PSLD for real, calibrate, simulate")
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--quick", action="store_true", help="shorter runs (about 1.5 min)")
    run.add_argument("--tiny", action="store_true", help="2 workers, 2 PSs, a few seconds per run")
    run.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    rep = commands.add_parser("report", help="print the markdown table of a run's results")
    rep.add_argument("--from", dest="source", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "report":
        print(report(json.loads((args.source / "results.json").read_text())))
        return 0
    size = "tiny" if args.tiny else "quick" if args.quick else "full"
    profile_s, run_s, warmup_s, extra = SIZES[size]
    base = [*extra, f"runtime.device={args.device}"]
    t0 = time.perf_counter()
    done = real_vs_sim(SCENARIO, base, profile_s, run_s, warmup_s)
    done["results"]["size"] = size
    done["results"]["wall_s"] = time.perf_counter() - t0
    write(args.out, done)
    print()
    print(report(done["results"]))
    print(f"\nwall time {done['results']['wall_s']:.0f} s; results in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
