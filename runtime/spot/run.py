"""``runtime.spot.run_real``: the ``real:`` section of a ``kind: spot`` scenario on real processes, as one
:class:`RunResult` ([Proteus] §1.6 and §6.3; see docs/algorithms/proteus.md, "Real runtime"). The simulator's
prediction of the same schedule is added one layer up, by ``analysis.spot_prediction``.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
from clustertwin.runtime.spot.driver import schedule
from clustertwin.runtime.spot.fleet import MarketInputs
from clustertwin.runtime.spot.launch import run_job
from clustertwin.runtime.spot.market_launch import MarketLauncher
from clustertwin.runtime.spot.model import MLR, loss, reference
from clustertwin.runtime.spot.tables import clock_rate, evictions, iterations, progress, read_logs
from clustertwin.scenarios.results import RunResult
from clustertwin.scenarios.spot_real_results import run_frame
from clustertwin.scenarios.spot_results import to_frame
from clustertwin.scenarios.spot_schema import SpotScenario

from clustertwin.errors import InputError


def check_real(scenario: SpotScenario, cores: int | None = None, processes: int | None = None) -> None:
    """Refuse, naming the field, what a real run cannot honour or this host cannot run meaningfully.
    ``processes``: the most processes a market-driven run can hold (else ``real.processes``)."""
    real = scenario.real
    if real is None:
        raise InputError(
            f"{scenario.source}: field real",
            "--backend real needs the scenario's real: section (processes, job, eviction schedule)",
        )
    sim_only = [] if real.market else scenario.sim_only_fields()
    if sim_only:
        raise InputError(
            f"{scenario.source}: field {sim_only[0]}",
            f"a real run replays real.evictions (or real.trace) on a fixed set of processes: it has no"
            f" market to acquire from (policy {scenario.policy!r}) and no simulated machines yet, so it"
            f" cannot honour {', '.join(sim_only)}; remove them, or simulate without real",
        )
    s = scenario.stragglers
    if real.market and s is not None and s.mode not in ("bsp", "bsp_rr"):
        raise InputError(
            f"{scenario.source}: field stragglers.mode",
            f"the real AgileML workers are bulk-synchronous: mode bsp or bsp_rr, not {s.mode!r}",
        )
    if real.market and s is not None and s.model == "trace":
        raise InputError(
            f"{scenario.source}: field stragglers.model",
            "a measured straggler trace is replayed in simulation only; pick a straggler pattern",
        )
    cores = cores or os.cpu_count() or 1
    procs = real.processes.reliable + real.processes.transient if processes is None else processes
    field = "real.processes" if processes is None else "job.max_scale"
    if procs > 8 * cores:
        raise InputError(
            f"{scenario.source}: field {field}",
            f"{procs} training processes on {cores} cores would measure the machine, not AgileML;"
            f" at most {8 * cores}",
        )
    if real.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise InputError(
                f"{scenario.source}: field real.device", "device cuda but no CUDA device is visible"
            )
    if real.job.batch < procs:
        raise InputError(
            f"{scenario.source}: field real.job.batch",
            f"a global batch of {real.job.batch} cannot give each of {procs} workers an example",
        )


def run_real(
    scenario: SpotScenario,
    out_dir: Path,
    progress_cb: Callable[[float, str], None] | None = None,
) -> RunResult:
    """Run ``scenario.real`` for real: processes, evictions, recovery.

    ``out_dir`` receives the processes' logs (``logs/``) and, in checkpoint mode, the checkpoints;
    the caller writes the returned tables (``analysis.output.write_run``). ``info`` holds the final
    clock, the final model's loss and its distance to the serial reference replay of as many clocks
    (``max_abs_diff_vs_reference``: 0 up to float summation order when no acknowledged update was lost
    or applied twice), the partitions, and the clock rate before the first warning
    (``clocks_per_s_initial``, the prediction's anchor). The final parameters are attached as
    ``result.final_params``.
    """
    check_real(scenario)
    real = scenario.real
    assert real is not None
    events = schedule(scenario)
    wall0 = time.perf_counter()
    if progress_cb is not None:
        progress_cb(0.0, "starting processes")
    rec = run_job(scenario, Path(out_dir))
    if progress_cb is not None:
        progress_cb(1.0, f"{rec.final_clock} clocks")
    logs = read_logs(rec)
    it = iterations(rec, logs)
    first_warn = min((e.warn_s for e in events), default=real.duration_s)
    rate0 = clock_rate(it, min(1.0, first_warn / 4), first_warn)
    j = real.job
    problem = MLR(j.features, j.classes, j.examples, j.batch, j.lr, scenario.seed)
    ref = reference(problem, rec.final_clock)
    assert rec.final_params is not None
    diff = float(abs(ref - rec.final_params).max())
    tables = {
        "iterations": it,
        "progress": progress(it, rec),
        "evictions": evictions(rec, it, real.duration_s),
        "checkpoints": run_frame("checkpoints", rec.checkpoints),
        "epochs": run_frame("epochs", rec.epochs),
    }
    info: dict[str, Any] = {
        "backend": "real",
        "fault_tolerance": scenario.fault_tolerance,
        "reliable": real.processes.reliable,
        "transient": real.processes.transient,
        "partitions": rec.n_partitions,
        "device": real.device,
        "duration_s": real.duration_s,
        "final_clock": rec.final_clock,
        "final_loss": loss(problem, rec.final_params),
        "initial_loss": loss(problem, ref * 0.0),
        "max_abs_diff_vs_reference": diff,
        "clocks_per_s_initial": rate0,
        "migrations": rec.migrations,
        "phases": len(rec.phases),
        "wall_s": time.perf_counter() - wall0,
    }
    result = RunResult(tables=tables, info=info)
    result.final_params = rec.final_params  # type: ignore[attr-defined]
    return result


def run_market_real(
    scenario: SpotScenario,
    inputs: MarketInputs,
    out_dir: Path,
    progress_cb: Callable[[float, str], None] | None = None,
) -> RunResult:
    """Run a market-driven scenario (``real.market: true``) for real: the acquisition policy decides,
    processes are the instances it holds (see ``runtime/spot/market_launch.py``).

    The result has the simulator's tables (``scenarios.spot_results``: acquisitions, evictions, bills,
    usage, and progress in work units), times in market seconds, so one analysis serves both backends;
    and the runtime's own, in real seconds: ``iterations``, ``recoveries`` (what the job did at each
    warning and kill: the real ``evictions`` contract of ``scenarios.spot_real_results``), ``epochs`` and
    ``checkpoints``. ``info`` adds the final clock, the distance of the final model to the serial replay
    of as many clocks (``max_abs_diff_vs_reference``) and the clock/work conversion.
    """
    from clustertwin.runtime.spot.market_launch import max_machines

    check_real(scenario, processes=max_machines(inputs))
    real = scenario.real
    assert real is not None
    rates = {inputs.work_rates[m[0]] for m in inputs.series} | {inputs.work_rates[inputs.reference_type]}
    if len(rates) > 1:
        raise InputError(
            f"{scenario.source}: field market.instance_types",
            "a real run emulates every instance by one process of the same speed; the types' work rates"
            f" differ ({sorted(rates)}): list types of one work rate (or set job.work_rate)",
        )
    if scenario.billing.model == "fixed_preemptible":
        raise InputError(
            f"{scenario.source}: field billing.model",
            "a real run replays price-driven evictions; fixed_preemptible preemptions are simulated only",
        )
    wall0 = time.perf_counter()
    if progress_cb is not None:
        progress_cb(0.0, "acquiring")
    launcher = MarketLauncher(scenario, Path(out_dir), inputs)
    rec = launcher.run()
    if progress_cb is not None:
        progress_cb(1.0, f"{rec.final_clock} clocks")
    logs = read_logs(rec)
    it = iterations(rec, logs)
    j = real.job
    problem = MLR(j.features, j.classes, j.examples, j.batch, j.lr, scenario.seed)
    ref = reference(problem, rec.final_clock)
    assert rec.final_params is not None
    wpc = launcher.work_per_clock
    books = launcher.fleet.books()
    rows = launcher.progress_rows + [
        {
            "time_s": launcher.end_s,
            "clocks": rec.final_clock,
            "n_reliable": 0,
            "n_transient": 0,
            "stage": launcher.progress_rows[-1]["stage"] if launcher.progress_rows else 0,
            "migrations": launcher.ctrl.migrations,
            "event": launcher.end_reason,
        }
    ]
    progress_rows = []
    for i, row in enumerate(rows):
        nxt = rows[i + 1] if i + 1 < len(rows) else None
        dt_h = (nxt["time_s"] - row["time_s"]) / 3600.0 if nxt else 0.0
        rate = (nxt["clocks"] - row["clocks"]) * wpc / dt_h if nxt and dt_h > 0 else 0.0
        progress_rows.append({**row, "work_done": min(row["clocks"] * wpc, inputs.total_work), "rate": rate})
    done = launcher.end_reason == "job_done"
    recoveries = evictions(rec, it, launcher.end_s * launcher.f)
    # evicted by the market, or released by the policy (evictions() keeps the kill order)
    by_kill = sorted(rec.evictions, key=lambda e: e["killed_s"])
    recoveries["reason"] = pd.Series([e.get("reason", "evicted") for e in by_kill], dtype=object)
    ref_type = inputs.reference_type
    tables = {
        "acquisitions": to_frame("acquisitions", books["acquisitions"]),
        "evictions": to_frame("evictions", books["evictions"]),
        "bills": to_frame("bills", books["bills"]),
        "progress": to_frame("progress", progress_rows),
        "usage": to_frame("usage", books["usage"]),
        "iterations": it,
        "recoveries": recoveries,
        "checkpoints": run_frame("checkpoints", rec.checkpoints),
        "epochs": run_frame("epochs", rec.epochs),
    }
    info: dict[str, Any] = {
        "backend": "real",
        "market": 1,
        "fault_tolerance": scenario.fault_tolerance,
        "policy": scenario.policy,
        "total_work": inputs.total_work,
        "reference_rate": inputs.target_rate,
        "reference_on_demand_usd_per_h": inputs.target_rate
        / inputs.work_rates[ref_type]
        * inputs.on_demand_prices[ref_type],
        "completed": int(done),
        "runtime_s": launcher.end_s if done else math.nan,
        "work_done": min(rec.final_clock * wpc, inputs.total_work),
        "work_per_clock": wpc,
        "total_clocks": launcher.total_clocks,
        "real_s_per_sim_h": real.real_s_per_sim_h,
        "partitions": rec.n_partitions,
        "max_machines": launcher.max_machines,
        "final_clock": rec.final_clock,
        "final_loss": loss(problem, rec.final_params),
        "initial_loss": loss(problem, ref * 0.0),
        "max_abs_diff_vs_reference": float(abs(ref - rec.final_params).max()),
        "migrations": rec.migrations,
        "phases": len(rec.phases),
        "device": real.device,
        "wall_s": time.perf_counter() - wall0,
    }
    result = RunResult(tables=tables, info=info)
    result.final_params = rec.final_params  # type: ignore[attr-defined]
    return result
