"""experiments/gavel_gpu_own_jobs.py end to end in its CPU smoke mode: the users' programs are profiled
on both worker types, sized, run for real under LAS and under min_cost at once, simulated from their own
half's profile and compared.

Slow: about 20 process starts in a row (two profiles, two real runs with their agents and jobs); each
start imports torch, about 3 s on an idle 2-core machine. The errors are not asserted: with 3-s rounds a
process start lasts about a round, longer than the simulator lets a restart cost (one round)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "experiments" / "gavel_gpu_own_jobs.py"


@pytest.mark.slow
def test_the_smoke_mode_profiles_runs_simulates_and_compares_both_policies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    import gavel_gpu_own_jobs as experiment

    assert experiment.main(["--out", str(tmp_path), "--smoke"]) == 0
    printed = capsys.readouterr().out
    results = json.loads((tmp_path / "results.json").read_text())
    programs = experiment.SMOKE_PROGRAMS
    for half in (0, 1):  # each half's profile measured every program on both worker types
        table = pd.read_csv(tmp_path / f"profile-h{half}.throughputs.csv")
        assert sorted(zip(table["job_type"], table["worker_type"], strict=True)) == sorted(
            (p.job_type, w) for p in programs for w in ("gpu", "cpu")
        )
        assert (table["throughput"] > 0).all()
    jobs = yaml.safe_load((tmp_path / "scenario.yaml").read_text())["workload"]["jobs"]
    assert [job["command"] for job in jobs] == [p.command for p in programs]
    assert [job["total_steps"] for job in jobs] == results["plan"]["steps"]
    for policy in experiment.POLICIES:
        name = f"{policy}-1"
        jobs = pd.read_parquet(tmp_path / f"real-{name}" / "jobs.parquet")
        assert jobs["completion_s"].notna().all() and list(jobs["total_steps"]) == results["plan"]["steps"]
        run = results["runs"][name]
        real_jct = (jobs["completion_s"] - jobs["arrival_s"]).mean()
        assert run["avg_jct_real_s"] == pytest.approx(real_jct)
        assert run["avg_jct_error"] == pytest.approx(run["avg_jct_sim_s"] / real_jct - 1.0)
        assert f"{policy} run 1" in printed and "avg_jct_error=" in printed and "makespan_error=" in printed
        summary = results["summary"][policy]["makespan_error"]
        assert summary["min"] == summary["mean"] == summary["max"] == run["makespan_error"]  # one run
    # Each policy ran on its own half, and was simulated with that half's profile.
    assert {results["runs"][f"{p}-1"]["half"] for p in experiment.POLICIES} == {0, 1}
    summary_las = json.loads((tmp_path / "real-las-1" / "summary.json").read_text())
    assert summary_las["scenario"]["policy"]["name"] == "las"
