"""FlexRR for real on GPUs with one slow worker, against a simulation calibrated by a profiling run.

[Harlap] §3.4: time per iteration is the paper's speed metric; Ideal is §3.4.1's bound. From the
repository root:

    python -m experiments.flexrr_gpu run --out DIR [--gpus N] [--quick] [--device cuda|cpu]
        [--model mlr|mlp|cnn|module:function --data synthetic|synthetic_images --hidden H]
    python -m experiments.flexrr_gpu report --from DIR

``run`` (on the GPU machine; ``--device cpu`` runs the same steps on CPU processes):

1. **Size** (GPU): the training problem (``runtime/flexrr/model.py``; by default MLR, 1024 features x
   128 classes, float32, a 64k-example pool like the paper's MLR data set; ``--model cnn --data
   synthetic_images`` trains the CNN on 32x32 images instead, through the same sharded PS) gets the
   mini-batch per item at which one worker's iteration computes for about ``--target-iteration-s`` on
   GPU 0 (timed here, two steps of scaling).
2. **Profile**: a short straggler-free BSP run on the real workers (4 by default: 2 machines x 2
   workers, worker w on ``cuda:<w mod gpus>``), preceded by mailbox round trips between worker pairs.
3. **Calibrate** the simulator from what the profile measured (``calibrate``; each parameter with its
   physical reason, no fitted factors): every worker's undelayed iteration time, the mailbox's one-way
   latency, and the delay from an iteration's completion to the gate opening.
4. **Real runs**: BSP, SSP, BSP RR and FlexRR with worker 0 slowed by ``--delay`` (Slow Worker's sleep
   injection, §3.4.1, at every delay point: a persistently slow worker), all in one launch of the worker
   processes (process start, CUDA initialisation and data generation are paid once).
5. **Simulate** each mode with the calibrated scenario (and, for contrast, the uncalibrated one), and
   Ideal from the same straggler realisation.

Outputs in DIR (9 files): ``results.json`` (everything, written last), ``results.csv`` and ``report.md``
(the table), ``calibration.json``, and Parquet tables ``real_iterations``, ``real_messages``,
``real_commits``, ``sim_iterations``, ``sim_messages`` (a ``run`` column tells the runs apart).

``report`` prints the markdown table of real vs simulated time per iteration per mode with relative
errors (target: within 10%) and FlexRR's real time per iteration over its Ideal (target: within 20%),
and per worker the own-items time per iteration (real and simulated) and the real compute per item over
the profile's: the simulation holds a worker's speed at its calibrated value, which workers sharing a
GPU do not keep (one computes alone while the other sleeps).

A line is printed as each real run ends. The runs record no loss curve (``real.record_loss``: nothing
here reads it, and the launcher would pay a forward pass over 4096 examples per iteration).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
from clustertwin.analysis.flexrr_metrics import flexrr_metrics
from clustertwin.scenarios.flexrr_schema import FlexRRScenario
from clustertwin.scenarios.load import load_scenario
from clustertwin.scenarios.results import RunResult

from clustertwin.atomic import write_text

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "scenarios" / "flexrr-default.yaml"
MODES = ("bsp", "ssp", "bsp_rr", "flexrr")
SIM_TARGET = 0.10  # |sim - real| / real, per mode
IDEAL_TARGET = 0.20  # FlexRR real / Ideal - 1


@dataclass
class Setup:
    """The experiment's knobs (``run``'s options)."""

    device: str = "cuda"
    gpus: int | None = None  # None: all visible (at most ``workers``)
    machines: int = 2
    workers_per_machine: int = 2
    iterations: int = 20  # §3.4.3: time per iteration over 20 iterations
    profile_iterations: int = 6
    items: int = 1000  # per worker; 100 message checks (Table 3.1) -> 10 items per check
    checks: int = 100
    delay: float = 1.0  # the slow worker runs (1 + delay)x slower
    probability: float = 1.0  # per delay point: 1.0 keeps the worker slowed throughout
    slow_workers: list[int] = field(default_factory=lambda: [0])
    target_iteration_s: float = 0.4
    features: int = 1024
    classes: int = 128
    # the trained network and its data set (runtime/flexrr/models.py): mlr (the paper's MLR), mlp, cnn
    # (with synthetic_images: features must then be a square of a multiple of 4) or module:function
    model: str = "mlr"
    data: str = "synthetic"
    hidden: int = 32
    dtype: str = "float32"
    pool: int | None = 65536
    batch: int | None = None  # None: sized to target_iteration_s
    probe_round_trips: int = 50
    poll_s: float = 0.0005
    seed: int = 0

    @property
    def workers(self) -> int:
        return self.machines * self.workers_per_machine

    @classmethod
    def for_device(cls, device: str, quick: bool = False, **changes: object) -> Setup:
        """Defaults per device: a GPU-sized MLR on ``cuda``; a small float64 one on ``cpu``."""
        base: dict[str, object] = {"device": device}
        if device == "cpu":
            base.update(features=32, classes=8, dtype="float64", pool=4096, items=200, checks=20,
                        target_iteration_s=0.2, poll_s=0.002)  # fmt: skip
        if quick:
            base.update(iterations=8, profile_iterations=3, probe_round_trips=20)
            if device == "cuda":
                base["target_iteration_s"] = 0.25
        base.update({k: v for k, v in changes.items() if v is not None})
        return cls(**base)  # type: ignore[arg-type]


# ---- scenarios -----------------------------------------------------------------------------------
def _f(v: float) -> str:
    """A float as YAML reads it back as a float (``1e-05`` would be a string to YAML 1.1)."""
    return f"{v:.9f}"


def base_overrides(setup: Setup, batch: int) -> list[str]:
    gpus = "null" if setup.gpus is None else str(setup.gpus)
    pool = "null" if setup.pool is None else str(setup.pool)
    return [
        f"seed={setup.seed}",
        f"cluster.machines={setup.machines}",
        f"cluster.workers_per_machine={setup.workers_per_machine}",
        f"iterations={setup.iterations}",
        f"items_per_worker={setup.items}",
        f"rr.message_checks={setup.checks}",
        f"iteration_s={_f(setup.target_iteration_s)}",
        f"real.device={setup.device}",
        f"real.gpus={gpus}",
        f"real.dtype={setup.dtype}",
        f"real.features={setup.features}",
        f"real.classes={setup.classes}",
        f"real.model={setup.model}",
        f"real.data={setup.data}",
        f"real.hidden={setup.hidden}",
        f"real.pool={pool}",
        f"real.batch={batch}",
        "real.pacing=compute",
        f"real.poll_s={_f(setup.poll_s)}",
        # nothing here reads the loss curve, and it costs a forward pass over 4096 examples per iteration
        # in the launcher
        "real.record_loss=false",
    ]


def straggler_overrides(setup: Setup) -> list[str]:
    return [
        "stragglers.model=slow_worker",
        f"stragglers.delay={_f(setup.delay)}",
        f"stragglers.probability={_f(setup.probability)}",
        f"stragglers.workers={list(setup.slow_workers)}",
    ]


def profile_scenario(setup: Setup, batch: int) -> FlexRRScenario:
    """Straggler-free BSP: every iteration ends at a gate, so both the processing time and the gate's
    delay are observed every iteration."""
    return load_scenario(
        BASE,
        [
            *base_overrides(setup, batch),
            "mode=bsp",
            f"iterations={setup.profile_iterations}",
            "stragglers.model=none",
            f"real.probe_round_trips={setup.probe_round_trips}",
        ],
    )  # type: ignore[return-value]


def mode_scenario(setup: Setup, batch: int, mode: str, calibration: Calibration | None) -> FlexRRScenario:
    extra = calibration.overrides() if calibration is not None else []
    sc = load_scenario(
        BASE, [*base_overrides(setup, batch), *straggler_overrides(setup), f"mode={mode}", *extra]
    )
    return sc  # type: ignore[return-value]


# ---- sizing --------------------------------------------------------------------------------------
def size_batch(setup: Setup) -> tuple[int, dict[str, float]]:
    """Examples per item so that one worker's iteration (``items`` items) computes for about
    ``target_iteration_s`` on this machine's first device: timed at a trial size, scaled, timed again and
    scaled once more (a chunk's fixed costs make the time not quite proportional)."""
    import torch
    from clustertwin.runtime.flexrr.model import Problem, Trainer

    torch.set_num_threads(1)  # as a worker process
    device = torch.device("cuda:0" if setup.device == "cuda" else "cpu")
    chunk = max(1, round(setup.items / setup.checks))
    target_chunk = setup.target_iteration_s * chunk / setup.items

    def timed(batch: int) -> float:
        problem = Problem(
            items=setup.workers * setup.items,
            features=setup.features,
            classes=setup.classes,
            batch=batch,
            pool=setup.pool,
            dtype=setup.dtype,
            model=setup.model,
            data=setup.data,
            hidden=setup.hidden,
        )
        trainer = trainer_for(problem)
        w = trainer.w0
        times = []
        for _ in range(6):
            t = time.perf_counter()
            trainer.delta_items(w, 0, chunk)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - t)
        return statistics.median(times[1:])  # the first call pays one-off set-up

    cache: dict = {}  # pool size -> Trainer

    def trainer_for(problem):
        key = problem.examples  # the data and the model depend on the pool, not on the batch
        if key not in cache:
            cache.clear()
            cache[key] = Trainer(problem, device)
        cache[key].problem = problem
        return cache[key]

    trial = max(1, (setup.pool or 4096) // chunk)
    t1 = timed(trial)
    b1 = max(1, round(trial * target_chunk / t1))
    t2 = timed(b1)
    b2 = max(1, round(b1 * target_chunk / t2))
    cache.clear()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return b2, {
        "trial_batch": trial,
        "trial_chunk_s": t1,
        "batch_1": b1,
        "chunk_s_1": t2,
        "target_chunk_s": target_chunk,
    }


# ---- calibration ---------------------------------------------------------------------------------
@dataclass
class Calibration:
    """Simulator parameters measured by the profiling run, and why each is what the simulator needs."""

    iteration_s_per_worker: list[float]
    latency_s: float
    ps_sync_s: float
    reasons: dict[str, str] = field(default_factory=dict)
    measured: dict[str, float] = field(default_factory=dict)

    def overrides(self) -> list[str]:
        per = "[" + ",".join(_f(t) for t in self.iteration_s_per_worker) + "]"
        return [
            f"iteration_s={_f(statistics.fmean(self.iteration_s_per_worker))}",
            f"iteration_s_per_worker={per}",
            f"latency_s={_f(self.latency_s)}",
            f"ps_sync_s={_f(self.ps_sync_s)}",
        ]


def calibrate(profile: RunResult, scenario: FlexRRScenario) -> Calibration:
    """Simulator parameters from a straggler-free BSP profiling run (``profile_scenario``).

    * ``iteration_s_per_worker[w]``: the median over the profile's iterations of worker w's time from its
      iteration's start to its own items being done. That is the simulator's undelayed iteration time:
      the time to process one iteration's items, here including what a real worker does while
      processing (GPU compute, the mailbox poll at each of the message checks, reading the model at the
      iteration's start). Per worker, since devices (or shared ones) need not be equally fast.
    * ``latency_s``: the median one-way time of the mailbox round trips (RTT / 2) the workers timed before
      the run: a send's two store operations plus the receiver's poll, which is what the simulator's
      one-way control-message latency stands for.
    * ``ps_sync_s``: the mean, over iterations k >= 1 and workers, of (its start of iteration k) - (the
      last worker's completion of k - 1): publishing the update and the completion in the store plus the
      gated workers' polling interval. The simulator adds exactly this between the slowest worker's
      completion and the SSP/BSP gate opening.
    """
    it = profile.tables["iterations"]
    workers = scenario.cluster.workers
    own = (it["own_done_s"] - it["start_s"]).groupby(it["worker"]).median()
    per_worker = [float(own[w]) for w in range(workers)]
    last_done = it.groupby("iteration")["end_s"].max()
    later = it[it["iteration"] >= 1]
    gaps = later["start_s"].to_numpy() - last_done.loc[later["iteration"] - 1].to_numpy()
    if len(gaps) == 0:
        raise ValueError("the profiling run needs at least 2 iterations to measure the gate delay")
    ps_sync = max(0.0, float(gaps.mean()))
    if "probe_one_way_s" not in profile.info:
        raise ValueError("the profiling run timed no mailbox round trips (real.probe_round_trips=0)")
    latency = float(profile.info["probe_one_way_s"])
    compute = [float(c) for c in str(profile.info.get("compute_s_per_worker", "")).split(",") if c]
    measured: dict[str, float] = {
        "profile_iterations": float(scenario.iterations),
        "own_processing_s_mean": statistics.fmean(per_worker),
        "own_processing_s_spread": (max(per_worker) - min(per_worker)) / statistics.fmean(per_worker),
        "gate_gap_s_median": float(statistics.median(gaps)),
        "probe_round_trips": float(profile.info.get("probe_round_trips", 0)),
        "probe_one_way_mean_s": float(profile.info.get("probe_one_way_mean_s", math.nan)),
    }
    if compute:
        total_own = float((it["own_done_s"] - it["start_s"]).sum())
        measured["compute_share_of_processing"] = sum(compute) / total_own if total_own > 0 else math.nan
    reasons = {
        "iteration_s_per_worker": "median own-items processing time per iteration, per worker (start ->"
        " own items done) in the straggler-free BSP profile: compute + per-check mailbox polls + model read",
        "latency_s": "median mailbox round trip / 2 between worker pairs (send: 2 store ops; idle"
        " receiver's poll)",
        "ps_sync_s": "mean delay from the last worker's iteration completion to a worker starting the next"
        " (publish update + completion, gate polling)",
    }
    return Calibration(per_worker, latency, ps_sync, reasons, measured)


# ---- the experiment ------------------------------------------------------------------------------
def _row(mode: str, real: RunResult, sim: RunResult, uncal: RunResult) -> dict[str, float | str]:
    r, s, u = flexrr_metrics(real), flexrr_metrics(sim), flexrr_metrics(uncal)
    real_t, sim_t = r["time_per_iteration_s"], s["time_per_iteration_s"]
    ideal = r["ideal_per_iteration_s"]
    return {
        "mode": mode,
        "real_time_per_iteration_s": real_t,
        "sim_time_per_iteration_s": sim_t,
        "sim_rel_error": (sim_t - real_t) / real_t,
        "ideal_time_per_iteration_s": ideal,
        "real_vs_ideal": real_t / ideal,
        "sim_vs_ideal": s["vs_ideal"],
        "real_reassigned_fraction": r["reassigned_fraction"],
        "sim_reassigned_fraction": s["reassigned_fraction"],
        "real_messages_per_worker_iteration": r["messages_per_worker_iteration"],
        "sim_messages_per_worker_iteration": s["messages_per_worker_iteration"],
        "uncalibrated_sim_time_per_iteration_s": u["time_per_iteration_s"],
        "uncalibrated_sim_rel_error": (u["time_per_iteration_s"] - real_t) / real_t,
    }


def _compute_per_item(result: RunResult) -> list[float]:
    """Per worker: the seconds its chunks computed (GPU work, without injected sleeps) per item."""
    compute = [float(c) for c in str(result.info["compute_s_per_worker"]).split(",")]
    items = [int(c) for c in str(result.info["items_per_worker_processed"]).split(",")]
    return [c / n if n else math.nan for c, n in zip(compute, items, strict=True)]


def _own_s(result: RunResult) -> pd.Series:
    """Per worker: the median time from an iteration's start to its own items being done."""
    it = result.tables["iterations"]
    return (it["own_done_s"] - it["start_s"]).groupby(it["worker"]).median()


def worker_rows(
    setup: Setup, cal: Calibration, profile: RunResult, reals: list[RunResult], sims: list[RunResult]
) -> list[dict[str, float | int | str | bool]]:
    """Per mode and worker, what the simulation takes as fixed and what the real run did: the own-items
    time per iteration (real and simulated) and the real compute per item over the profile's. The
    simulator holds each worker's undelayed speed at its calibrated value; a ratio away from 1 is a
    worker whose device ran it faster or slower than in the profile (workers sharing a GPU speed each
    other up while one sleeps)."""
    base = _compute_per_item(profile)
    rows: list[dict[str, float | int | str | bool]] = []
    for mode, real, sim in zip(MODES, reals, sims, strict=True):
        real_own, sim_own, per_item = _own_s(real), _own_s(sim), _compute_per_item(real)
        for w in range(setup.workers):
            rows.append(
                {
                    "mode": mode,
                    "worker": w,
                    "slowed": w in setup.slow_workers,
                    "calibrated_iteration_s": cal.iteration_s_per_worker[w],
                    "real_own_s": float(real_own.get(w, math.nan)),
                    "sim_own_s": float(sim_own.get(w, math.nan)),
                    "real_compute_per_item_vs_profile": per_item[w] / base[w] if base[w] else math.nan,
                }
            )
    return rows


def workers_from_folder(results: dict, folder: Path) -> list[dict[str, float | int | str | bool]]:
    """``worker_rows`` of a finished run, from its ``results.json`` and iteration tables (none where the
    tables are missing)."""
    real_path, sim_path = folder / "real_iterations.parquet", folder / "sim_iterations.parquet"
    if not (real_path.exists() and sim_path.exists()):
        return []
    real_it, sim_it = pd.read_parquet(real_path), pd.read_parquet(sim_path)

    def result(table: pd.DataFrame, run: str, info: dict) -> RunResult:
        return RunResult(tables={"iterations": table[table["run"] == run]}, info=info)

    c = results["calibration"]
    cal = Calibration(c["iteration_s_per_worker"], c["latency_s"], c["ps_sync_s"])
    return worker_rows(
        Setup(**results["setup"]),
        cal,
        result(real_it, "profile", results["profile_info"]),
        [result(real_it, m, results["real_info"][m]) for m in MODES],
        [result(sim_it, m, {}) for m in MODES],
    )


def _tag(result: RunResult, table: str, run: str) -> pd.DataFrame:
    return result.tables[table].assign(run=run)


def _jsonable(info: dict) -> dict:
    return {k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in info.items()}


def run_experiment(setup: Setup, out: Path, echo=print) -> dict:
    """Steps 1-5 of the module docstring; returns what ``results.json`` holds."""
    from clustertwin.runtime.flexrr.launch import run_real, run_real_many
    from clustertwin.sim.flexrr import run as simulate

    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").unlink(missing_ok=True)  # a folder without it is not a finished run
    clock = time.perf_counter()
    wall: dict[str, float] = {}

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        wall[name] = now - clock
        clock = now
        echo(f"[flexrr-gpu] {name}: {wall[name]:.1f} s", flush=True)

    if setup.batch is None:
        batch, sizing = size_batch(setup)
    else:
        batch, sizing = setup.batch, {}
    echo(f"[flexrr-gpu] batch (examples per item): {batch}", flush=True)
    lap("size")

    def finished(step: str, names: Sequence[str]):
        """A progress line as each run of a launch ends (the first one's time includes process start)."""
        began = time.perf_counter()

        def line(fraction: float, _text: str) -> None:
            name = names[max(0, round(fraction * len(names)) - 1)]
            echo(f"[flexrr-gpu] {step}: {name} done, {time.perf_counter() - began:.1f} s", flush=True)

        return line

    prof_sc = profile_scenario(setup, batch)
    scenarios: list[FlexRRScenario] = []
    # the workers' per-rank files go to a scratch folder: DIR keeps only the collected tables
    with tempfile.TemporaryDirectory(prefix="flexrr-gpu-") as tmp:
        profile, _ = run_real(prof_sc, Path(tmp) / "profile", finished("profile", ["profile"]))
        lap("profile (real)")
        cal = calibrate(profile, prof_sc)
        echo(f"[flexrr-gpu] calibrated: {' '.join(cal.overrides())}", flush=True)
        scenarios = [mode_scenario(setup, batch, m, cal) for m in MODES]
        runs = run_real_many(scenarios, Path(tmp) / "modes", finished("modes", MODES))
        reals = [r for r, _ in runs]
    lap("modes (real)")

    sims = [simulate(s) for s in scenarios]
    uncals = [simulate(mode_scenario(setup, batch, m, None)) for m in MODES]
    lap("simulations")

    rows = [_row(m, r, s, u) for m, r, s, u in zip(MODES, reals, sims, uncals, strict=True)]
    workers = worker_rows(setup, cal, profile, reals, sims)
    flexrr = next(r for r in rows if r["mode"] == "flexrr")
    checks = {
        "max_abs_sim_rel_error": max(abs(float(r["sim_rel_error"])) for r in rows),
        "sim_within_10pct": all(abs(float(r["sim_rel_error"])) <= SIM_TARGET for r in rows),
        "flexrr_real_vs_ideal": float(flexrr["real_vs_ideal"]),
        "flexrr_within_20pct_of_ideal": float(flexrr["real_vs_ideal"]) <= 1.0 + IDEAL_TARGET,
    }

    runs = [("profile", profile)] + list(zip(MODES, reals, strict=True))
    for table in ("iterations", "messages", "commits"):
        pd.concat([_tag(r, table, n) for n, r in runs], ignore_index=True).to_parquet(
            out / f"real_{table}.parquet"
        )
    for table in ("iterations", "messages"):
        pd.concat(
            [_tag(s, table, m) for m, s in zip(MODES, sims, strict=True)], ignore_index=True
        ).to_parquet(out / f"sim_{table}.parquet")
    calibration = {**asdict(cal), "overrides": cal.overrides()}
    write_text(out / "calibration.json", json.dumps(calibration, indent=2))
    with (out / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    results = {
        "setup": asdict(setup),
        "batch": batch,
        "sizing": sizing,
        "calibration": calibration,
        "profile_info": _jsonable(profile.info),
        "real_info": {m: _jsonable(r.info) for m, r in zip(MODES, reals, strict=True)},
        "scenario_overrides": {
            m: [*base_overrides(setup, batch), *straggler_overrides(setup), f"mode={m}", *cal.overrides()]
            for m in MODES
        },
        "rows": rows,
        "workers": workers,
        "checks": checks,
        "wall_s": wall,
        "versions": _versions(setup.device),
    }
    write_text(out / "report.md", markdown(results))
    lap("write")
    results["wall_s"]["total"] = sum(wall.values())
    write_text(out / "results.json", json.dumps(results, indent=2, default=float))
    return results


def _versions(device: str) -> dict[str, str]:
    import torch

    v = {"python": platform.python_version(), "torch": torch.__version__, "host": platform.node()}
    if device == "cuda" and torch.cuda.is_available():
        v["gpu"] = torch.cuda.get_device_name(0)
        v["visible_gpus"] = str(torch.cuda.device_count())
    return v


def markdown(results: dict) -> str:
    """The report: real vs simulated time per iteration per mode, and FlexRR vs Ideal."""
    s = results["setup"]
    cal = results["calibration"]
    lines = [
        f"FlexRR real vs calibrated simulation: {s['machines'] * s['workers_per_machine']} workers"
        f" ({s['machines']} machines x {s['workers_per_machine']}) on {s['device']}"
        f" (gpus={s['gpus'] or 'all'}), worker(s) {s['slow_workers']} slowed {1 + s['delay']:g}x"
        f" (Slow Worker sleeps, p={s['probability']:g} per delay point), {s['iterations']} iterations,"
        f" {s['items']} items/worker (batch {results['batch']} examples/item), {s['checks']} message checks;"
        f" model {s.get('model', 'mlr')} on {s.get('data', 'synthetic')} data ({s['features']} features,"
        f" {s['classes']} classes).",
        "",
        f"Calibrated from a {s['profile_iterations']}-iteration straggler-free BSP profile:"
        f" iteration_s per worker = {', '.join(f'{t:.4f}' for t in cal['iteration_s_per_worker'])} s;"
        f" latency_s = {cal['latency_s'] * 1e3:.3f} ms; ps_sync_s = {cal['ps_sync_s'] * 1e3:.3f} ms.",
        "",
        "| mode | real s/it | sim s/it | sim error | Ideal s/it | real / Ideal | sim / Ideal"
        " | reassigned real / sim | uncalibrated sim s/it (error) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["rows"]:
        lines.append(
            f"| {r['mode']} | {r['real_time_per_iteration_s']:.4f} | {r['sim_time_per_iteration_s']:.4f}"
            f" | {100 * r['sim_rel_error']:+.1f}% | {r['ideal_time_per_iteration_s']:.4f}"
            f" | {r['real_vs_ideal']:.3f} | {r['sim_vs_ideal']:.3f}"
            f" | {100 * r['real_reassigned_fraction']:.1f}% / {100 * r['sim_reassigned_fraction']:.1f}%"
            f" | {r['uncalibrated_sim_time_per_iteration_s']:.4f}"
            f" ({100 * r['uncalibrated_sim_rel_error']:+.1f}%) |"
        )
    if results.get("workers"):
        lines += [
            "",
            "Per worker: own-items time per iteration (median, start to own items done) real and simulated,"
            " and the real compute per item over the profile's (the simulation holds it at 1).",
            "",
            "| mode | worker | calibrated s | real own s | sim own s | real compute / item vs profile |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for w in results["workers"]:
            lines.append(
                f"| {w['mode']} | {w['worker']}{' (slowed)' if w['slowed'] else ''}"
                f" | {w['calibrated_iteration_s']:.4f} | {w['real_own_s']:.4f} | {w['sim_own_s']:.4f}"
                f" | {w['real_compute_per_item_vs_profile']:.3f} |"
            )
    c = results["checks"]
    yes = {True: "yes", False: "NO"}
    lines += [
        "",
        f"- simulation within {SIM_TARGET:.0%} of real for every mode: {yes[bool(c['sim_within_10pct'])]}"
        f" (largest |error| {100 * c['max_abs_sim_rel_error']:.1f}%)",
        f"- FlexRR real within {IDEAL_TARGET:.0%} of Ideal: {yes[bool(c['flexrr_within_20pct_of_ideal'])]}"
        f" (real / Ideal = {c['flexrr_real_vs_ideal']:.3f})",
    ]
    wall = results.get("wall_s", {})
    if wall:
        lines.append("- wall time: " + ", ".join(f"{k} {v:.1f} s" for k, v in wall.items()))
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.flexrr_gpu", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="profile, run the modes for real, calibrate and simulate")
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    run.add_argument("--gpus", type=int, help="GPUs to spread the workers over (default: all visible)")
    run.add_argument("--quick", action="store_true", help="8 iterations, 3-iteration profile")
    run.add_argument("--machines", type=int)
    run.add_argument("--workers-per-machine", type=int)
    run.add_argument("--iterations", type=int)
    run.add_argument("--profile-iterations", type=int)
    run.add_argument("--items", type=int, help="items per worker")
    run.add_argument("--checks", type=int, help="message checks per iteration")
    run.add_argument("--delay", type=float, help="slow worker's delay (1.0 = runs 2x slower)")
    run.add_argument("--probability", type=float, help="slowdown probability per delay point")
    run.add_argument("--target-iteration-s", type=float)
    run.add_argument("--batch", type=int, help="examples per item (default: sized to the target)")
    run.add_argument("--features", type=int)
    run.add_argument("--classes", type=int)
    run.add_argument("--probe-round-trips", type=int)
    run.add_argument("--model", help="mlr (default), mlp, cnn or module:function (runtime/flexrr/models.py)")
    run.add_argument("--data", help="synthetic (default), synthetic_images (for cnn) or module:function")
    run.add_argument("--hidden", type=int, help="the model's width (mlp, cnn; default 32)")
    run.add_argument("--seed", type=int)
    report = sub.add_parser("report", help="print the table of a finished run")
    report.add_argument("--from", dest="source", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "report":
        path = args.source / "results.json"
        if not path.exists():
            print(f"error: {path} not found (an unfinished or missing run)", file=sys.stderr)
            return 2
        results = json.loads(path.read_text())
        if "workers" not in results:  # a run from before the per-worker table: rebuilt from its tables
            results["workers"] = workers_from_folder(results, args.source)
        print(markdown(results), end="")
        return 0
    options = {
        k: getattr(args, k)
        for k in ("gpus", "machines", "workers_per_machine", "iterations", "profile_iterations", "items",
                  "checks", "delay", "probability", "target_iteration_s", "batch", "features", "classes",
                  "probe_round_trips", "seed", "model", "data", "hidden")
    }  # fmt: skip
    setup = Setup.for_device(args.device, args.quick, **options)
    results = run_experiment(setup, args.out)
    print(markdown(results), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
