"""experiments/gavel_gpu_fidelity.py's compare step on committed GPU results: a finished run is compared
with ``clustertwin compare``; one that stopped early is compared on the jobs it finished."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"  # copies of runs under results/, without plots and logs
SCRIPT = ROOT / "experiments" / "gavel_gpu_fidelity.py"


def _compare(monkeypatch: pytest.MonkeyPatch, work: Path, *options: str) -> dict:
    """The script's command line, run in this process: the step starts its own ``clustertwin run`` and
    ``clustertwin compare`` processes, and one more interpreter around them would only add its start."""
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    import gavel_gpu_fidelity as experiment

    monkeypatch.setattr(sys, "argv", [str(SCRIPT), "compare", "--work", str(work), *options])
    assert experiment.main() == 0
    return json.loads((work / "results.json").read_text())


def test_an_unfinished_run_is_compared_on_its_finished_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "las"
    shutil.copytree(FIXTURES / "gavel-las-gpu-run2", work)
    (work / "results.json").unlink()  # written again by the compare step
    result = _compare(monkeypatch, work)
    assert result["results"] == {}
    las = result["unfinished"]["las"]
    real = pd.read_parquet(work / "real-las.partial" / "jobs.parquet")
    finished = real.dropna(subset=["completion_s"])
    assert (las["jobs_compared"], las["jobs"]) == (len(finished), len(real)) == (13, 14)
    assert las["unfinished_steps_left"] == {"8": 10279}
    jct = (finished["completion_s"] - finished["arrival_s"]).mean()
    assert abs(las["avg_jct_real_s"] - jct) < 1e-9
    assert las["makespan_error"] is None  # unknown until the run ends (written as null)
    assert (
        las["makespan_real_at_least_s"]
        == pd.read_parquet(work / "real-las.partial" / "rounds.parquet")["end_s"].max()
    )
    # The simulation ran from the committed profile and trace: every job of the trace finishes there.
    simulated = pd.read_parquet(work / "sim-las" / "jobs.parquet")
    assert simulated["completion_s"].notna().all() and len(simulated) == 14
    assert las["avg_jct_error"] == pytest.approx(las["avg_jct_sim_s"] / jct - 1.0)


@pytest.mark.slow
def test_a_finished_run_is_compared_with_its_own_policys_calibration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "ftf"
    made = shutil.ignore_patterns("compare-*", "realised-*", "results.json")
    run = FIXTURES / "gpu-suite" / "gavel-ftf-gpu"
    shutil.copytree(run, work, ignore=made)
    result = _compare(monkeypatch, work)
    ftf = result["results"]["ftf"]
    committed = json.loads((run / "compare-ftf" / "compare.json").read_text())
    for key in ("avg_jct_error", "makespan_error", "utilisation_error", "jobs_compared"):
        assert ftf[key] == committed[key], key  # the simulator is deterministic


@pytest.mark.slow
def test_realised_calibration_takes_each_pairs_rate_from_its_rounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Renewed rounds give a pair's steady rate; a pair that only started afresh gets its started rounds
    less the restart time the run measured; a pair that never trained keeps its profile."""
    work = tmp_path / "las"
    made = shutil.ignore_patterns("compare-*", "realised-*", "results.json")
    shutil.copytree(FIXTURES / "gavel-las-gpu-run4", work, ignore=made)
    result = _compare(monkeypatch, work, "--realised")
    jobs = pd.read_parquet(work / "real-las" / "jobs.parquet")[["job_id", "job_type"]]
    rounds = pd.read_parquet(work / "real-las" / "rounds.parquet").merge(jobs, on="job_id")
    restart = json.loads((work / "real-las" / "summary.json").read_text())["run"]["round_overhead_s"]
    profile = pd.read_csv(work / "profile.throughputs.csv").set_index(["job_type", "worker_type"])
    realised = pd.read_csv(work / "realised-las.throughputs.csv").set_index(["job_type", "worker_type"])
    assert realised.index.equals(profile.index)
    kinds = set()
    for key in profile.index:
        mine = rounds[(rounds["job_type"] == key[0]) & (rounds["worker_type"] == key[1])]
        renewed = mine[mine["renewed"]]
        if len(renewed):
            rate = renewed["steps"].sum() / (renewed["end_s"] - renewed["start_s"]).sum()
            kinds.add("renewed")
        elif len(mine):
            seconds = mine["end_s"] - mine["start_s"] - restart[f"{key[1]}/started"]
            rate = mine.loc[seconds > 0, "steps"].sum() / seconds[seconds > 0].sum()
            kinds.add("started")
        else:
            rate = profile.loc[key, "throughput"]
            kinds.add("profile")
        assert realised.loc[key, "throughput"] == pytest.approx(rate, abs=1e-3), key
    assert kinds == {"renewed", "started", "profile"}  # the committed run has all three
    rec = ("Recommendation (batch size 512)", "cpu")
    assert realised.loc[rec, "throughput"] > 1.2 * profile.loc[rec, "throughput"]  # what the diagnosis is for
    # Both calibrations are compared against the same real run, and they differ.
    assert result["realised"]["las"]["avg_jct_real_s"] == result["results"]["las"]["avg_jct_real_s"]
    assert result["realised"]["las"]["avg_jct_sim_s"] != result["results"]["las"]["avg_jct_sim_s"]
    assert (work / "compare-las-realised" / "per_job.csv").is_file()


def test_two_policies_pin_within_their_halves_only_where_each_half_has_a_core_per_slot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    import gavel_gpu_fidelity as experiment

    monkeypatch.setattr(experiment.os, "sched_getaffinity", lambda _: set(range(32)))
    halves = experiment.shares(["las", "ftf"], [0, 1])
    assert halves == [(list(range(16)), 0), (list(range(16, 32)), 1)]
    assert all(experiment.pinnable(cpus) for cpus, _ in halves)  # 9 slots, 16 cores each
    monkeypatch.setattr(experiment.os, "sched_getaffinity", lambda _: set(range(16)))
    assert not any(experiment.pinnable(cpus) for cpus, _ in experiment.shares(["las", "ftf"], [0, 1]))
    assert experiment.shares(["las"], [0]) == [(None, 0)]
