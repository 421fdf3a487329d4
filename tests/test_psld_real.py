"""``clustertwin run scenarios/psld-real-cpu.yaml --backend real``: PSLD on the real gloo PS (6 processes).

The run folder's tables must pass the simulator's contract, PSLD's scheduler (on rank 0, fed with the
workers' live block timings) must move the throttled PS 1's blocks away, and every worker must end with
exactly the parameters of the serial reference of the same job, which has no reassignment at all.
What the real runtime cannot run is refused with the field named, before any process starts.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import replace
from pathlib import Path

import pytest

from analysis.output import read_run
from analysis.psld_metrics import psld_metrics
from clustertwin.cli import main
from runtime.psld.ps import initial_params, reference
from runtime.psld.run import build_job, check_real, throttles
from scenarios.errors import InputError
from scenarios.load import load_scenario
from scenarios.psld_results import check_psld_tables

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "psld-real-cpu.yaml"


def _sha(tensor) -> str:
    return hashlib.sha256(tensor.numpy().tobytes()).hexdigest()


def test_real_run_moves_load_off_the_throttled_server(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["run", str(SCENARIO), "--backend", "real", "--out", str(out), "--quiet", "--no-plots"]) == 0
    summary, result = read_run(out)
    assert summary["backend"] == "real"
    check_psld_tables(result)
    info = result.info
    it, loads, re = result.tables["iterations"], result.tables["loads"], result.tables["reassignments"]
    assert len(it) == info["iterations_run"] >= 5
    assert (it["end_s"] > it["start_s"]).all() and it["start_s"].is_monotonic_increasing
    # PSLD unloaded PS 1 (throttled): its share of the bytes fell to at most 25% of the model
    first = loads[loads["map_version"] == 0].set_index("server")["bytes"]
    last = loads[loads["map_version"] == loads["map_version"].max()].set_index("server")["bytes"]
    assert first[1] > 0.45 * info["model_bytes"]
    assert last[1] <= 0.25 * info["model_bytes"]
    assert len(re) >= 1 and re["action"].iloc[0] == "reassign" and re["moved_bytes"].iloc[0] > 0
    assert (it["map_version"].diff().fillna(0) >= 0).all() and it["map_version"].iloc[-1] >= 1
    assert len(result.tables["reports"]) >= 2 and set(result.tables["changes"]["server"]) == {1}
    # every worker ended with the serial reference of the same job (no reassignment in the reference)
    scenario = load_scenario(SCENARIO)
    job = replace(build_job(scenario), iterations=int(info["iterations_run"]))
    expected = reference(job)
    assert info["final_params_sha256"] == _sha(expected)
    assert _sha(expected) != _sha(initial_params(job.numel))  # training moved the parameters
    metrics = psld_metrics(result)
    assert metrics["reassignments"] >= 1 and math.isfinite(metrics["iterations_per_s"])


def test_job_uses_the_model_tensors_and_the_simulators_layouts() -> None:
    scenario = load_scenario(SCENARIO)
    job = build_job(scenario)
    assert job.numel * 8 == sum(b.nbytes for b in job.blocks) == 46_758_048  # ResNet-18's fp32 bytes
    assert all(b.nbytes <= scenario.block_bytes and b.offset % 8 == 0 for b in job.blocks)
    assert job.owners == tuple(i % 2 for i in range(len(job.blocks)))  # PSLD starts round-robin
    assert job.report_every == 2 and job.scheduler is not None and job.scheduler.cooldown_reports == 1
    assert throttles(scenario) == {1: 0.5e9 / 8}
    mxnet = build_job(load_scenario(SCENARIO, ["policy=mxnet"]))
    assert mxnet.report_every == 0 and mxnet.scheduler is None and len(set(mxnet.owners)) == 2
    cpu = load_scenario(SCENARIO, ["stragglers=[{server: 0, what: cpu, value: 0.5}]"])
    assert throttles(cpu) == {0: 0.5 * 2.0e9}  # 0.5 cores x costs.sum_gbytes_per_core_s


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("cluster.standby=1", "cluster.standby"),
        ("removals=[{time_s: 1.0, server: 0}]", "removals"),
        ("regimes={levels: [1.0]}", "regimes"),
        ("stragglers=[{server: 1, start_s: 2.0}]", "stragglers[0].start_s"),
        ("stragglers=[{server: 1, end_s: 2.0}]", "stragglers[0].end_s"),
        ("stragglers=[{server: 1}, {server: 1, what: cpu}]", "stragglers[1].server"),
        ("cluster.workers=9", "cluster"),
    ],
)
def test_what_cannot_run_for_real_is_refused(override: str, field: str) -> None:
    scenario = load_scenario(SCENARIO, [override])
    with pytest.raises(InputError) as err:
        check_real(scenario, cores=2)
    assert err.value.where.endswith(f"field {field}")
