"""PSLD with GPU workers for real, next to a simulation calibrated from a profiling run ([PSLD] §6.1 and
§5.2; docs/algorithms/psld.md, "GPU experiments").

    python -m experiments.psld_gpu run --out DIR [--quick] [--device cuda|cpu] [--tiny] [--seeds K]
        [--model NAME|none]
    python -m experiments.psld_gpu report --from DIR
    python -m experiments.psld_gpu resim --from DIR [--seeds K]

``run`` (on the GPU machine; ``--device cpu --tiny`` is a small smoke test for a CPU host) runs
``scenarios/psld-real-gpu.yaml`` (4 GPU workers, 3 PSs, vanilla PS, PS 2's NIC capped at 1 Gbit/s) for
real three times in one launch of the processes. The workers train a real network (``real.model``:
``--model``, by default ``resnet18``, ResNet-18 for 32x32 images; ``resnet_small`` with ``--tiny``;
``none``: the linear-gradient stand-in on the catalog ResNet-18's tensors), and every simulation below
prices that network's tensors (``clustertwin.kinds.psld.simulate_psld``):

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

Physics check, "sim with the real final map": each run is simulated once more, calibrated as above but
with the real run's final block map pinned (``sim.psld.run``'s ``initial_owners``, read from the real
block samples, which name each block's PS) and the scheduler never acting. It separates the simulator's
physics (how fast that map runs) from the scheduler's choices (which map it reaches): in the 4-H100 runs
the calibrated simulation over-predicted PSLD by 31-42% because the simulated scheduler split the model
over two PSs where the real one ended with it on one, and with the real map pinned it came within
-1.0%..+6.3%. ``resim`` recomputes the calibrated simulations and this check from a saved DIR only
(``results.json``, ``calibration.json``, ``real_samples.parquet``) and prints real / sim / pinned sim.

Seeds: the simulated scheduler's decisions, and with them PSLD's rate, depend on Algorithm 3's
exploration draws and on the timing noise of its samples (the calibration measures the noise,
``calibrate.timing_noise``, and feeds it). A real run is one draw of that distribution, so the calibrated
PSLD run is simulated with ``seed`` 0..K-1 (``seed_spread``; K = ``--seeds``, 8 by default; mxnet has no
scheduler, so its range would be one point), and the headline PSLD prediction is the median over the
seeds (``sim_it_s``, ``rel_error``), reported with the min-max and whether the real rate lies inside; the
scenario's own seed (0, whose exploration stream is the real run's) is kept as ``sim_seed0_it_s``.
``resim`` recomputes the noise from the saved profiling samples and prints the seeded ranges with it and
without it. ``rest`` splits each saved real run's iteration into compute, the slowest block round trip
and the rest that neither covers (``iteration_rest``).

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

from clustertwin.runtime.psld import calibrate as calibrate_runs  # noqa: E402

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
# The scheduler that never acts and the profiling run (the PSLD layout without the straggler):
# runtime.psld.calibrate's, which clustertwin profile runs too.
FROZEN = list(calibrate_runs.FROZEN)
PROFILE = list(calibrate_runs.PROFILE)
# The real network the workers train (runtime.models; "none": the scenario's linear-gradient stand-in on
# the catalog model's tensors). resnet18 is ResNet-18 for 32x32 images: 62 tensors, 44.7 MB, the shape
# of the scenario's catalog ResNet-18 (46.8 MB); --tiny trains the small ResNet on CPU.
MODEL, TINY_MODEL = "resnet18", "resnet_small"
RUNS = ("profiling", *POLICIES)  # the real runs of one launch, in order
SEEDS = 8  # simulations per policy for the seeded range (``seed_spread``)


# Every run records the scheduler's gain test: records written before the test existed ran the point test
# (``policies.psld.stability``), and ``recorded_overrides`` gives them that one.
GAIN_TEST = "psld.gain_test=significant"


def recorded_overrides(overrides: list[str]) -> list[str]:
    """A saved record's overrides in today's field names: records written while the real-run section was
    called ``runtime:`` (it is ``real:`` for every kind now) name its fields ``runtime.<field>``, and
    records without ``psld.gain_test`` ran the point test."""
    out = [f"real.{o.removeprefix('runtime.')}" if o.startswith("runtime.") else o for o in overrides]
    if not any(o.startswith("psld.gain_test=") for o in out):
        out.append("psld.gain_test=point")
    return out


def run_overrides(run: str, base: list[str], profile_s: float, run_s: float, warmup_s: float) -> list[str]:
    """The scenario overrides of one of ``RUNS`` (before the calibration's, for a simulation)."""
    if run == "profiling":
        return [*base, *PROFILE, f"duration_s={profile_s}", f"warmup_s={min(warmup_s, profile_s / 2)}"]
    return [*base, f"duration_s={run_s}", f"warmup_s={warmup_s}", f"policy={run}"]


def _rate(result) -> float:
    """Iterations per second over the iterations that started after ``warmup_s``, to the run's end. A
    simulation starts none after ``duration_s``; a real run ends at the first iteration boundary after
    ``duration_s``, and its last iteration counts too."""
    from clustertwin.analysis.psld_metrics import window_rate

    return float(window_rate(result.tables["iterations"], float(result.info["warmup_s"]), math.inf))


def params_identical(result) -> tuple[bool, str]:
    """Whether the run's final parameters equal, bit for bit, the serial reference of the same job (same
    iteration count, same per-worker devices, no reassignment); returns (equal, reference sha256)."""
    from clustertwin.runtime.psld.ps import deterministic_cuda, reference

    job = result.job
    if job.device == "cuda":
        deterministic_cuda()
    expected = hashlib.sha256(reference(job).numpy().tobytes()).hexdigest()
    return expected == result.info["final_params_sha256"], expected


def real_vs_sim(
    scenario: Path,
    base: list[str],
    profile_s: float,
    run_s: float,
    warmup_s: float,
    log=print,
    seeds: int = SEEDS,
) -> dict[str, Any]:
    """The shared pipeline (also ``experiments.psld_real_vs_sim``): profiling, mxnet and PSLD for real
    in one launch, calibration, identity check, pauses, calibrated simulations (and each with its real
    run's final map pinned). Returns a dict with the JSON-able ``results``, the run objects under
    ``runs`` and the real block samples under ``samples`` (``samples_frame``)."""
    from clustertwin.runtime.psld.calibrate import calibrate
    from clustertwin.runtime.psld.run import run_real_many
    from clustertwin.scenarios.load import load_scenario

    from clustertwin.kinds.psld import simulate_psld as simulate

    timing = [f"duration_s={run_s}", f"warmup_s={warmup_s}"]
    overrides = {run: run_overrides(run, base, profile_s, run_s, warmup_s) for run in RUNS}
    scenarios = [load_scenario(scenario, overrides[run]) for run in RUNS]
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
        sims[p] = simulate(load_scenario(scenario, [*overrides[p], *cal.overrides()]))
    # the calibration's own check: the simulated profiling run must not beat the real one it measured
    profile_sim = simulate(load_scenario(scenario, [*overrides["profiling"], *cal.overrides()]))
    log(f"profiling: real {_rate(profile):.3f} it/s, calibrated sim {_rate(profile_sim):.3f} it/s")
    runs = {"real_profiling": profile, **{f"real_{p}": r for p, r in zip(POLICIES, reals, strict=True)}}
    frame = samples_frame(runs)
    pinned = {
        run: _rate(
            pinned_sim(scenario, overrides[run], cal.overrides(), final_map(frame, run, len(job.blocks)))
        )
        for run, job in zip(RUNS, (r.job for r in (profile, *reals)), strict=True)
    }
    log(f"sim with the real final map (it/s): {json.dumps(pinned)}")
    # Only PSLD's scheduler draws from the seed; mxnet has no scheduler, so its range is one point.
    spread = seed_spread(scenario, [*overrides["psld"], *cal.overrides()], seeds)
    rows = []
    for p, real in zip(POLICIES, reals, strict=True):
        # PSLD's prediction is the median over the seeds; mxnet's one run is its own median
        r, s = _rate(real), spread["median"] if p == "psld" else _rate(sims[p])
        rows.append(
            {
                "policy": p,
                "real_it_s": r,
                "sim_it_s": s,
                "rel_error": (s - r) / r if r > 0 else math.nan,
                "pinned_sim_it_s": pinned[p],
                "pinned_rel_error": (pinned[p] - r) / r if r > 0 else math.nan,
                "real_reassignments": len(real.tables["reassignments"]),
                "sim_reassignments": len(sims[p].tables["reassignments"]),
                "real_iterations": int(real.info["iterations_run"]),
                "real_run_s": float(real.info["run_s"]),
            }
        )
        if p == "psld":
            rows[-1].update(
                sim_seed0_it_s=_rate(sims[p]),
                sim_seed_it_s=spread["it_s"],
                sim_min_rel_error=(spread["min"] - r) / r if r > 0 else math.nan,
                sim_max_rel_error=(spread["max"] - r) / r if r > 0 else math.nan,
                sim_seeds=seeds,
                sim_median_it_s=spread["median"],
                sim_min_it_s=spread["min"],
                sim_max_it_s=spread["max"],
                sim_seed_reassignments=spread["reassignments"],
                real_in_sim_range=spread["min"] <= r <= spread["max"],
            )
        log(
            f"{p}: real {r:.3f} it/s, sim {s:.3f} it/s, error {rows[-1]['rel_error']:+.1%}"
            + (
                f" (median of {seeds} seeds, range [{spread['min']:.3f}, {spread['max']:.3f}];"
                f" seed 0: {_rate(sims[p]):.3f})"
                if p == "psld"
                else ""
            )
        )
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
        "real_model": psld_real.info.get("real_model"),
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
        "profiling_pinned_sim_it_s": pinned["profiling"],
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
    runs.update({f"sim_{p}": sims[p] for p in POLICIES})
    return {"results": results, "runs": runs, "sim_profiling": profile_sim, "samples": frame}


def samples_frame(runs: dict[str, Any]):
    """Every block sample of the real runs (``real_*`` of ``runs``) as one table, in each worker's order
    (iteration-major, block order): the scheduler's time, the raw time from push issue that the
    calibration fits, and the block's PS (so each iteration's map)."""
    import pandas as pd

    rows = [
        (name, s.worker, s.server, s.nbytes, s.seconds, raw.seconds)
        for name, result in runs.items()
        if name.startswith("real_")
        for s, raw in zip(result.samples, getattr(result, "raw_samples", result.samples), strict=True)
    ]
    columns = ["run", "worker", "server", "nbytes", "seconds", "raw_seconds"]
    return pd.DataFrame(rows, columns=columns)


def final_map(frame, run: str, blocks: int) -> list[int]:
    """The block map (block id -> PS) of the last iteration of real run ``run`` (one of ``RUNS``), from
    its block samples (``samples_frame``): a map holds until the next PREPARE, and the run's last
    PREPARE only stops it, so this is the map the run ended with."""
    worker = frame[(frame["run"] == f"real_{run}")]
    worker = worker[worker["worker"] == worker["worker"].min()]
    if len(worker) == 0 or len(worker) % blocks:
        raise ValueError(f"real_{run}: {len(worker)} samples of worker 0 are no whole iterations of {blocks}")
    return [int(x) for x in worker["server"].to_numpy()[-blocks:]]


def iteration_rest(iterations, samples, workers: int, compute_s: float, skip: int = 2) -> dict[str, float]:
    """Where a real run's iteration goes, from its saved tables (docs/algorithms/psld.md, "Known gaps"):
    medians over the iterations from ``skip`` on (the first pay first touches) of the iteration (first
    worker's release to last worker's arrival, ``iterations``) and of each worker's slowest block round
    trip from its own push issue (``raw_seconds`` of ``samples``, one run, each worker's samples in its
    order), and ``rest``: the iteration less ``compute_s`` less that round trip, the time no block's
    round trip and no compute measurement covers. Seconds."""
    import numpy as np

    per_iteration = len(samples) // (workers * len(iterations))
    if per_iteration == 0 or len(samples) != per_iteration * workers * len(iterations):
        raise ValueError(f"{len(samples)} samples are no whole iterations of {workers} workers")
    position = samples.groupby("worker").cumcount().to_numpy() // per_iteration
    kept = samples[position >= skip].assign(iteration=position[position >= skip])
    trip = float(kept.groupby(["worker", "iteration"])["raw_seconds"].max().median())
    duration = (iterations["end_s"] - iterations["start_s"]).to_numpy()[skip:]
    iteration = float(np.median(duration))
    return {
        "iteration_s": iteration,
        "compute_s": compute_s,
        "round_trip_s": trip,
        "rest_s": iteration - compute_s - trip,
    }


def rest_report(folder: Path) -> str:
    """``iteration_rest`` of each real run of a saved folder, as a markdown table (ms)."""
    import pandas as pd

    results = json.loads((folder / "results.json").read_text())
    compute = json.loads((folder / "calibration.json").read_text())["compute_s"]
    frame = pd.read_parquet(folder / "real_samples.parquet")
    lines = [
        f"{folder}: median per iteration (ms), from the third iteration on",
        "",
        "| run | iteration | compute | slowest round trip | rest |",
        "|---|---|---|---|---|",
    ]
    for run in RUNS:
        iterations = pd.read_parquet(folder / f"real_{run}_iterations.parquet")
        row = iteration_rest(
            iterations, frame[frame["run"] == f"real_{run}"], int(results["workers"]), compute
        )
        lines.append(
            f"| {run} | {1e3 * row['iteration_s']:.1f} | {1e3 * row['compute_s']:.1f} |"
            f" {1e3 * row['round_trip_s']:.1f} | {1e3 * row['rest_s']:.1f} |"
        )
    return "\n".join(lines)


def seed_spread(scenario: Path, overrides: list[str], seeds: int) -> dict[str, Any]:
    """One run's calibrated simulation with ``seed`` 0..``seeds``-1 (the scheduler's exploration draws
    and the timing noise on its samples): each seed's rate (it/s) and reassignments, and the median, min
    and max of the rates."""
    import numpy as np
    from clustertwin.scenarios.load import load_scenario

    from clustertwin.kinds.psld import simulate_psld as simulate

    rates, moves = [], []
    for k in range(seeds):
        result = simulate(load_scenario(scenario, [*overrides, f"seed={k}"]))
        rates.append(_rate(result))
        moves.append(len(result.tables["reassignments"]))
    return {
        "it_s": rates,
        "reassignments": moves,
        "median": float(np.median(rates)),
        "min": min(rates),
        "max": max(rates),
    }


def pinned_sim(scenario: Path, overrides: list[str], calibration: list[str], owners: list[int]):
    """The calibrated simulation of one run with ``owners`` pinned as its map for the whole run: the
    scheduler never acts (``FROZEN``), so no reassignment (``sim.psld.run``'s ``initial_owners``)."""
    from clustertwin.scenarios.load import load_scenario

    from clustertwin.kinds.psld import simulate_psld as simulate

    return simulate(load_scenario(scenario, [*overrides, *FROZEN, *calibration]), initial_owners=owners)


def resim(folder: Path, seeds: int = SEEDS) -> dict[str, dict[str, Any]]:
    """From a saved run folder only: per run of ``RUNS``, the real rate (as saved), the calibrated
    simulation as saved and recomputed now (with the folder's calibration under today's rules,
    ``current_calibration``) and without timing noise, the calibrated
    simulation with the real run's final map pinned, and for PSLD ``seed_spread`` with the
    timing noise measured on the saved profiling samples (``noise``, ``calibrate.timing_noise``:
    ``spread``) and without noise (``spread_noiseless``: the seeds then vary only the scheduler's
    exploration draws). Rates in it/s; NaN (the spreads: absent) where the folder's samples do not give
    it."""
    import pandas as pd
    from clustertwin.runtime.psld.calibrate import timing_noise
    from clustertwin.scenarios.load import load_scenario

    from clustertwin.kinds.psld import simulate_psld as simulate

    results = json.loads((folder / "results.json").read_text())
    saved_calibration = json.loads((folder / "calibration.json").read_text())
    scenario = ROOT / results["scenario"]
    samples = folder / "real_samples.parquet"
    frame = pd.read_parquet(samples) if samples.exists() else None
    blocks = {run: _blocks(folder, frame, run, int(results["workers"])) for run in RUNS}
    noise = math.nan
    if frame is not None and "seconds" in frame:
        profiling = frame[frame["run"] == "real_profiling"]
        noise = timing_noise(
            profiling["worker"], profiling["server"], profiling["seconds"], blocks["profiling"]
        )
    calibration = current_calibration(saved_calibration, noise)
    by = {row["policy"]: row for row in results["table"]}
    real = {"profiling": results["profiling_it_s"], **{p: by[p]["real_it_s"] for p in POLICIES}}
    saved = {"profiling": results.get("profiling_sim_it_s"), **{p: by[p]["sim_it_s"] for p in POLICIES}}
    out = {}
    base = recorded_overrides(results["overrides"])
    for run in RUNS:
        overrides = run_overrides(run, base, results["profile_s"], results["duration_s"], results["warmup_s"])
        sim = _rate(simulate(load_scenario(scenario, [*overrides, *calibration])))
        noiseless = _rate(
            simulate(load_scenario(scenario, [*overrides, *calibration, "costs.timing_noise=0"]))
        )
        pinned = math.nan
        if frame is not None:
            pinned = _rate(pinned_sim(scenario, overrides, calibration, final_map(frame, run, blocks[run])))
        out[run] = {
            "real": real[run],
            "real_reassignments": by[run].get("real_reassignments", math.nan) if run in by else 0,
            "sim_saved": math.nan if saved[run] is None else saved[run],
            "sim": sim,
            "sim_noiseless": noiseless,
            "pinned_sim": pinned,
            "noise": noise,
        }
        if run == "psld" and not math.isnan(noise):
            # the only run whose scheduler acts: seeds and noise change nothing in the others
            for key, sigma in (("spread", noise), ("spread_noiseless", 0.0)):
                noisy = [*overrides, *calibration, f"costs.timing_noise={sigma:.6e}"]
                out[run][key] = seed_spread(scenario, noisy, seeds)
    return out


def current_calibration(saved: dict[str, Any], noise: float) -> list[str]:
    """A saved ``calibration.json``'s overrides under today's calibration rules: the one link rate from
    ``calibrate.link_estimates`` of its per-PS rates and bound marks (where it recorded them), and the
    timing noise ``noise`` measured on its profiling samples fed to the simulator (where it is a number;
    the saved value otherwise)."""
    from clustertwin.runtime.psld.calibrate import link_estimates

    out = list(saved["overrides"])
    rates = saved.get("link_gbps_per_ps")
    if rates:
        bounds = saved.get("link_gbps_per_ps_bound") or [False] * len(rates)
        link = sum(link_estimates(rates, bounds)) / len(rates)
        out = [o for o in out if not o.startswith(("cluster.worker_gbps=", "cluster.server_gbps="))]
        out += [f"cluster.worker_gbps={link:.6e}", f"cluster.server_gbps={link:.6e}"]
    if not math.isnan(noise):
        out = [o for o in out if not o.startswith("costs.timing_noise=")]
        out.append(f"costs.timing_noise={noise:.6e}")
    return out


def _blocks(folder: Path, frame, run: str, workers: int) -> int:
    """Blocks per iteration of saved real run ``run``: its samples over its workers' iterations (0
    without samples)."""
    import pandas as pd

    if frame is None:
        return 0
    iterations = len(pd.read_parquet(folder / f"real_{run}_iterations.parquet"))
    return int((frame["run"] == f"real_{run}").sum()) // (workers * iterations)


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
            fields = list(dict.fromkeys(key for row in rows for key in row)) or ["k"]  # PSLD's has more
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
    for name, result in done["runs"].items():
        result.tables["iterations"].to_parquet(out / f"{name}_iterations.parquet")
    # what the scheduler saw and did: every block sample of the real runs (the scheduler's, and the raw
    # time from push issue that the calibration fits), and PSLD's reports and reassignments, real and sim
    done["samples"].to_parquet(out / "real_samples.parquet")
    for side in ("real", "sim"):
        result = done["runs"][f"{side}_psld"]
        for table in ("reports", "reassignments"):
            result.tables[table].to_parquet(out / f"{side}_psld_{table}.parquet")


def report(results: dict[str, Any]) -> str:
    """The markdown summary of one ``run``'s results."""
    lines = [
        f"{results['device']} workers ({', '.join(results['gpus']) or 'CPU'}), {results['workers']} workers,"
        f" {results['servers']} PSs, {results['mode']} PS, {results['blocks']} blocks"
        f" ({results['model_bytes'] / 1e6:.1f} MB), gradient: {results['gradient']}"
        + (f" ({results['real_model']})" if results.get("real_model") else ""),
        "",
        "| policy | real it/s | sim (calibrated) it/s | sim / real − 1 | sim with the real final map it/s"
        " | its / real − 1 | real reassignments |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in results["table"]:
        pinned = row.get("pinned_sim_it_s", math.nan)  # absent from runs before the check existed
        error = _fmt(pinned / row["real_it_s"] - 1, "+.1%")
        lines.append(
            f"| {row['policy']} | {row['real_it_s']:.3f} | {row['sim_it_s']:.3f} | {row['rel_error']:+.1%} |"
            f" {_fmt(pinned, '.3f')} | {error} | {row['real_reassignments']} |"
        )
    lines += [
        f"| PSLD / mxnet | {results['speedup_real']:.2f}× | {results['speedup_sim']:.2f}× |"
        f" {results['speedup_sim'] / results['speedup_real'] - 1:+.1%} | | | |",
        "",
    ]
    for p in results["pauses"]:
        lines.append(
            f"* reassignment at k={p['k']}: pause {p['pause_s']:.3f} s"
            f" (PREPARE barrier {p['barrier_s']:.3f} s + migration to RESUME {p['migration_s']:.3f} s,"
            f" {p['moved_bytes'] / 1e6:.1f} MB moved)"
        )
    for row in results["table"]:
        if "sim_seeds" in row:  # absent from runs before the seeded range existed
            noise = results["calibration"]["timing_noise"]
            fed = _fed_noise(results["calibration"]["overrides"]) > 0
            real = row["real_it_s"]
            low, mid, high = (row[f"sim_{x}_it_s"] for x in ("min", "median", "max"))
            headline = "sim_seed0_it_s" in row  # the median is the table's sim since it exists
            lines.append(
                f"* {row['policy']}, calibrated sim over {row['sim_seeds']} seeds"
                f" ({'with the measured' if fed else 'without'} timing noise"
                f"{'' if fed else '; measured'} {noise:.3f}):"
                f" median {mid:.3f} it/s ({mid / real - 1:+.1%}), range {low:.3f}–{high:.3f}"
                f" ({low / real - 1:+.1%} … {high / real - 1:+.1%}),"
                f" real inside: {row['real_in_sim_range']}; reassignments per seed"
                f" {row['sim_seed_reassignments']}"
                + (
                    f"; the table's sim is the median, seed 0 alone: {row['sim_seed0_it_s']:.3f} it/s"
                    if headline
                    else "; the table's sim is seed 0"
                )
            )
    within = ", ".join(f"{r['policy']} {abs(r['rel_error']) <= 0.10}" for r in results["table"])
    cal = results["calibration"]
    lines += [
        f"* largest pause {results['max_pause_s']:.3f} s (< 2 s: {results['max_pause_s'] < 2.0});"
        f" simulation within 10% of the real throughput: {within}",
        f"* parameters after the reassignment(s) identical to the no-reassignment reference:"
        f" {results['params_identical']}",
        "* sim with the real final map: the calibrated simulation with the real run's final block map"
        " pinned and no reassignment (the simulator's physics without the scheduler's choices)",
        f"* calibration (profiling run, {results['profiling_it_s']:.3f} it/s; the calibrated simulation"
        f" of it: {results.get('profiling_sim_it_s', math.nan):.3f} it/s, with the real map"
        f" {_fmt(results.get('profiling_pinned_sim_it_s', math.nan), '.3f')} it/s):"
        f" compute {cal['compute_s'] * 1e3:.1f} ms + barrier {cal['barrier_s'] * 1e3:.1f} ms per iteration,"
        f" link {cal['link_gbps']:.2f} Gbit/s per"
        f" process (per PS: {_per_ps_links(cal)}), latency"
        f" {cal['latency_s'] * 1e3:.2f} ms, summing {cal['sum_gbytes_per_s']:.2f} GB/s",
        f"* real runs' wall time (one launch, start-up included): {results['real_wall_s']:.0f} s",
    ]
    return "\n".join(lines)


def _fed_noise(overrides: list[str]) -> float:
    """The ``costs.timing_noise`` a saved calibration gave the simulator (0 before it fed the measured
    one)."""
    values = [float(o.split("=", 1)[1]) for o in overrides if o.startswith("costs.timing_noise=")]
    return values[-1] if values else 0.0


def _per_ps_links(cal: dict[str, Any]) -> str:
    """Each PS's link rate, "≥" where it is only a lower bound (``calibrate.link_is_bound``)."""
    bounds = cal.get("link_gbps_per_ps_bound") or [False] * len(cal["link_gbps_per_ps"])
    return ", ".join(
        f"{'≥' if bound else ''}{g:.2f}" for g, bound in zip(cal["link_gbps_per_ps"], bounds, strict=True)
    ) + (" (≥: a lower bound, the slope was not significant)" if any(bounds) else "")


def _fmt(x: float, spec: str) -> str:
    return "n/a" if math.isnan(x) else format(x, spec)


def resim_report(folder: Path, rows: dict[str, dict[str, Any]]) -> str:
    """The markdown table of ``resim``'s rates for one folder."""
    noise = next(iter(rows.values()))["noise"]
    seeds = len(rows["psld"]["spread"]["it_s"]) if "spread" in rows["psld"] else 0
    lines = [
        f"{folder} (timing noise measured on the profiling samples: {_fmt(noise, '.3f')}; {seeds} seeds)",
        "",
        "| run | real it/s (reassignments) | sim it/s (saved) | sim it/s (now) | sim without noise it/s"
        " | without noise, seeds: median [min–max] it/s; reassignments | with the measured noise, seeds:"
        " median [min–max] it/s; reassignments | real inside (without / with noise) | sim with the real"
        " final map it/s | its / real − 1 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run, r in rows.items():
        spreads = [r.get("spread_noiseless"), r.get("spread")]
        inside = [str(x["min"] <= r["real"] <= x["max"]) for x in spreads if x]
        cells = [
            f"{_fmt(r['real'], '.3f')} ({r['real_reassignments']})",
            _fmt(r["sim_saved"], ".3f"),
            _fmt(r["sim"], ".3f"),
            _fmt(r["sim_noiseless"], ".3f"),
            *(_spread_cell(x) for x in spreads),
            " / ".join(inside) or "n/a",
            _fmt(r["pinned_sim"], ".3f"),
            _fmt(r["pinned_sim"] / r["real"] - 1, "+.1%"),
        ]
        lines.append(f"| {run} | {' | '.join(cells)} |")
    return "\n".join(lines)


def _spread_cell(spread: dict[str, Any] | None) -> str:
    """A ``seed_spread`` as "median [min–max]; fewest–most reassignments" ("n/a" for none)."""
    if not spread:
        return "n/a"
    moves = spread["reassignments"]
    return f"{spread['median']:.3f} [{spread['min']:.3f}–{spread['max']:.3f}]; {min(moves)}–{max(moves)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="profile, run mxnet and PSLD for real, calibrate, simulate")
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--quick", action="store_true", help="shorter runs (about 1.5 min)")
    run.add_argument("--tiny", action="store_true", help="2 workers, 2 PSs, a few seconds per run")
    run.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    run.add_argument("--seeds", type=int, default=SEEDS, help="PSLD simulations for the seeded range")
    run.add_argument(
        "--model",
        default=None,
        help=f"the real network the workers train (a runtime.models name or module:function; default:"
        f" {MODEL}, with --tiny {TINY_MODEL}); none: the linear-gradient stand-in",
    )
    rep = commands.add_parser("report", help="print the markdown table of a run's results")
    rep.add_argument("--from", dest="source", type=Path, required=True)
    again = commands.add_parser(
        "resim", help="recompute the calibrated simulations, and with the real final map, from DIR"
    )
    again.add_argument("--from", dest="source", type=Path, required=True)
    again.add_argument("--seeds", type=int, default=SEEDS, help="PSLD simulations for the seeded range")
    rest = commands.add_parser(
        "rest", help="per real run of DIR: iteration, compute, slowest round trip and the rest (ms)"
    )
    rest.add_argument("--from", dest="source", type=Path, required=True)
    args = parser.parse_args(argv)
    if getattr(args, "seeds", 1) < 1:
        parser.error(f"--seeds: the seeded range needs at least one simulation (got {args.seeds})")
    if args.command == "report":
        print(report(json.loads((args.source / "results.json").read_text())))
        return 0
    if args.command == "rest":
        print(rest_report(args.source))
        return 0
    if args.command == "resim":
        print(resim_report(args.source, resim(args.source, args.seeds)))
        return 0
    size = "tiny" if args.tiny else "quick" if args.quick else "full"
    profile_s, run_s, warmup_s, extra = SIZES[size]
    model = args.model or (TINY_MODEL if args.tiny else MODEL)
    network = [] if model == "none" else [f"real.model={model}"]
    base = [*extra, f"real.device={args.device}", *network, GAIN_TEST]
    t0 = time.perf_counter()
    done = real_vs_sim(SCENARIO, base, profile_s, run_s, warmup_s, seeds=args.seeds)
    done["results"]["size"] = size
    done["results"]["wall_s"] = time.perf_counter() - t0
    write(args.out, done)
    print()
    print(report(done["results"]))
    print(f"\nwall time {done['results']['wall_s']:.0f} s; results in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
