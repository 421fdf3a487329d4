"""``clustertwin run scenarios/psld-real-cpu.yaml --backend real``: PSLD on the real gloo PS (6 processes).

The run folder's tables must pass the simulator's contract, PSLD's scheduler (on rank 0, fed with the
workers' live block timings) must move the throttled PS 1's blocks away, and every worker must end with
exactly the parameters of the serial reference of the same job, which has no reassignment at all.
A scale-out activates a standby PS (``psld-real-scale-out.yaml``), which then holds migrated state, and
the parameters still match the reference. A PS SIGKILLed mid-run fails the run within seconds, naming
the PS, with no run folder and no process left behind. What the real runtime cannot run is refused with
the field named, before any process starts.
"""

from __future__ import annotations

import hashlib
import math
import os
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from clustertwin.analysis.output import read_run
from clustertwin.analysis.psld_metrics import psld_metrics
from clustertwin.runtime.psld.ps import initial_params, reference
from clustertwin.runtime.psld.run import KILL_ENV, build_job, check_real, run_real, throttles
from clustertwin.scenarios.load import load_scenario
from clustertwin.scenarios.psld_results import check_psld_tables

from clustertwin.cli import main
from clustertwin.errors import InputError

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "psld-real-cpu.yaml"
SCALE_OUT = SCENARIO.with_name("psld-real-scale-out.yaml")


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
    # The rate is measured over the iterations that start between warm-up and the end; a machine busy
    # with other tests may start fewer than two there, and then it is undefined (NaN), never a number.
    started = it["start_s"].between(info["warmup_s"], info["duration_s"], inclusive="left").sum()
    assert metrics["reassignments"] >= 1 and math.isfinite(metrics["iterations_per_s"]) == (started >= 2)


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
        ("real.model=no_such_net", "real.model"),
        ("real.model=no_such_module:build", "real.model"),
        ("real.model=mlr;cluster.servers=3", "cluster.servers"),  # MLR's 2 tensors: 2 blocks for 3 PSs
        ("cluster.workers=9", "cluster"),
    ],
)
def test_what_cannot_run_for_real_is_refused(override: str, field: str) -> None:
    scenario = load_scenario(SCENARIO, override.split(";"))
    with pytest.raises(InputError) as err:
        check_real(scenario, cores=2)
    assert err.value.where.endswith(f"field {field}")


def test_scale_out_activates_a_standby_ps_and_keeps_the_parameters() -> None:
    scenario = load_scenario(SCALE_OUT)
    result = run_real(scenario)
    check_psld_tables(result)
    re, loads = result.tables["reassignments"], result.tables["loads"]
    # the thresholds force a scale-out at the first decision: standby PS 2 joins the map (ADD_SERVER)
    first = re.iloc[0]
    assert first["action"] == "scale_out" and first["added"] == 2, re
    assert first["moved_bytes"] > 0 and first["suspended_s"] > 0
    version = loads[loads["map_version"] == 1].set_index("server")
    assert loads[loads["map_version"] == 0].set_index("server").loc[2, "blocks"] == 0
    assert version.loc[2, "blocks"] > 0  # the activated PS holds blocks (vanilla: their migrated state)
    assert result.info["standby"] == 1 and result.info["servers"] == 2
    # bit-identical to the serial reference, which has neither a reassignment nor a third PS
    job = replace(build_job(scenario), iterations=int(result.info["iterations_run"]))
    assert result.info["final_params_sha256"] == _sha(reference(job))


def _children() -> dict[int, str]:
    """This process's child processes started by multiprocessing's spawn (not yet dead: a zombie's
    command line is empty): pid -> state letter."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and b"spawn_main" in cmdline:
            out[int(entry)] = fields[0]
    return out


def test_a_killed_ps_fails_the_run_cleanly(tmp_path: Path, monkeypatch, capsys) -> None:
    # PS 1 SIGKILLs itself right after the PREPARE of the main run's iteration 1: mid-run, with the
    # workers' pushes to it in flight and PS 0 about to wait on it
    monkeypatch.setenv(KILL_ENV, "1:1")
    first_dead: list[float] = []
    stop = threading.Event()

    def watch() -> None:  # when did the first rank die (a zombie, or gone, once it was seen alive)?
        known: set[int] = set()
        while not stop.is_set() and not first_dead:
            known |= set(_children())
            for pid in known:
                try:
                    with open(f"/proc/{pid}/stat") as f:
                        dead = f.read().rsplit(")", 1)[1].split()[0] in "ZX"
                except OSError:
                    dead = True
                if dead:
                    first_dead.append(time.monotonic())
                    break
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    out = tmp_path / "run"
    argv = ["run", str(SCENARIO), "--backend", "real", "--out", str(out), "--quiet", "--no-plots"]
    try:
        code = main([*argv, "--set", "duration_s=30"])  # the CLI reports a RunFailure: error line, exit 1
        raised = time.monotonic()
    finally:
        stop.set()
        watcher.join()
    message = capsys.readouterr().err
    assert code == 1
    assert message.startswith("error: ") and "Traceback" not in message
    assert "PS 1 (rank 1) died during the run (killed by SIGKILL)" in message, message
    # bounded: the launcher noticed and stopped the group within seconds, not at a gloo timeout
    assert first_dead and raised - first_dead[0] < 15.0, (first_dead, raised)
    assert not out.exists() and not list(tmp_path.iterdir())  # no run folder claiming completion
    assert _children() == {}  # no orphan: every rank was reaped
