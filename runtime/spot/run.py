"""``runtime.spot.run_real``: a ``kind: spot_real`` scenario on real processes, with the simulator's
prediction of the same schedule, as one :class:`RunResult` (seed 003 §1.6 and §6.3; see docs/proteus.md,
"Real runtime")."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clustertwin.runtime.spot.driver import schedule
from clustertwin.runtime.spot.launch import run_job
from clustertwin.runtime.spot.model import MLR, loss, reference
from clustertwin.runtime.spot.predict import prediction_tables
from clustertwin.runtime.spot.tables import clock_rate, evictions, iterations, progress, read_logs
from clustertwin.scenarios.results import RunResult
from clustertwin.scenarios.spot_real_results import to_frame
from clustertwin.scenarios.spot_real_schema import SpotRealScenario

from clustertwin.errors import InputError


def check_real(scenario: SpotRealScenario, cores: int | None = None) -> None:
    """Refuse, naming the field, what this host cannot run meaningfully."""
    cores = cores or os.cpu_count() or 1
    procs = scenario.processes.reliable + scenario.processes.transient
    if procs > 8 * cores:
        raise InputError(
            f"{scenario.source}: field processes",
            f"{procs} training processes on {cores} cores would measure the machine, not AgileML;"
            f" at most {8 * cores}",
        )
    if scenario.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise InputError(f"{scenario.source}: field device", "device cuda but no CUDA device is visible")
    if scenario.job.batch < procs:
        raise InputError(
            f"{scenario.source}: field job.batch",
            f"a global batch of {scenario.job.batch} cannot give each of {procs} workers an example",
        )


def run_real(
    scenario: SpotRealScenario,
    out_dir: Path,
    progress_cb: Callable[[float, str], None] | None = None,
) -> RunResult:
    """Run ``scenario`` for real (processes, evictions, recovery) and predict it with ``sim.spot``.

    ``out_dir`` receives the processes' logs (``logs/``) and, in checkpoint mode, the checkpoints;
    the caller writes the returned tables (``analysis.output.write_run``). ``info`` holds the final
    clock, the final model's loss and its distance to the serial reference replay of as many clocks
    (``max_abs_diff_vs_reference``: 0 up to float summation order when no acknowledged update was lost
    or applied twice), the initial clock rate, and the prediction's scalars. The final parameters are
    attached as ``result.final_params``.
    """
    check_real(scenario)
    events = schedule(scenario)
    wall0 = time.perf_counter()
    if progress_cb is not None:
        progress_cb(0.0, "starting processes")
    rec = run_job(scenario, Path(out_dir))
    if progress_cb is not None:
        progress_cb(1.0, f"{rec.final_clock} clocks")
    logs = read_logs(rec)
    it = iterations(rec, logs)
    first_warn = min((e.warn_s for e in events), default=scenario.duration_s)
    rate0 = clock_rate(it, min(1.0, first_warn / 4), first_warn)
    part_bytes = 8.0 * math.ceil(scenario.job.features * scenario.job.classes / rec.n_partitions)
    pred, curve, pinfo = prediction_tables(scenario, events, part_bytes, rate0)
    j = scenario.job
    problem = MLR(j.features, j.classes, j.examples, j.batch, j.lr, scenario.seed)
    ref = reference(problem, rec.final_clock)
    assert rec.final_params is not None
    diff = float(abs(ref - rec.final_params).max())
    tables = {
        "iterations": it,
        "progress": progress(it, rec),
        "evictions": evictions(rec, it, pred, scenario.duration_s),
        "checkpoints": to_frame("checkpoints", rec.checkpoints),
        "epochs": to_frame("epochs", rec.epochs),
        "prediction": to_frame("prediction", curve.to_dict("records")),
    }
    info: dict[str, Any] = {
        "backend": "real",
        "fault_tolerance": scenario.fault_tolerance,
        "reliable": scenario.processes.reliable,
        "transient": scenario.processes.transient,
        "partitions": rec.n_partitions,
        "device": scenario.device,
        "duration_s": scenario.duration_s,
        "final_clock": rec.final_clock,
        "final_loss": loss(problem, rec.final_params),
        "initial_loss": loss(problem, ref * 0.0),
        "max_abs_diff_vs_reference": diff,
        "clocks_per_s_initial": rate0,
        "migrations": rec.migrations,
        "phases": len(rec.phases),
        **pinfo,
        "wall_s": time.perf_counter() - wall0,
    }
    result = RunResult(tables=tables, info=info)
    result.final_params = rec.final_params  # type: ignore[attr-defined]
    return result
