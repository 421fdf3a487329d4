"""Gavel for real, the long runs: a scheduler killed and resumed from its journal, a job spanning two
agents' servers (torchrun's c10d rendezvous), and the own-jobs scenario with agents started by hand."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("torch")

from clustertwin.cli import main  # noqa: E402
from tests.test_runtime_gavel import check_steps_conserved  # noqa: E402
from tests.test_runtime_gavel_hosts import SECRET, _agent, _free_port, job, own_scenario  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _run_command(scenario: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "clustertwin", "run", str(scenario), "--backend", "real", "--out", str(out),
            "--quiet", "--no-plots", *extra]  # fmt: skip


@pytest.mark.slow
def test_a_killed_scheduler_resumes_from_its_journal_without_losing_finished_steps(tmp_path: Path) -> None:
    jobs = [job(60), job(400, job_type="Recommendation (batch size 512)"), job(500, arrival_s=2.0)]
    cluster = {"gpus": {"cpu": 1, "cpu_slow": 1}, "gpus_per_server": 1}
    scenario = own_scenario(tmp_path, jobs, cluster=cluster)
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(_run_command(scenario, out), env=env, start_new_session=True)
    journal = out.with_name("run.partial") / "journal.json"
    deadline = time.monotonic() + 300
    before = None
    while time.monotonic() < deadline:  # until a job has finished and later rounds ran
        if journal.is_file():
            before = json.loads(journal.read_text())
            if before["completion"] and before["rounds"] >= 3:
                break
        time.sleep(0.2)
    assert before is not None and before["completion"], "the first scheduler finished no job in time"
    os.killpg(first.pid, signal.SIGKILL)  # the scheduler, its agents and their jobs: a dead host
    first.wait()
    before = json.loads(journal.read_text())
    assert not out.exists()
    done = subprocess.run(_run_command(scenario, out, "--resume"), env=env, timeout=600)
    assert done.returncode == 0
    jobs_table, rounds = pd.read_parquet(out / "jobs.parquet"), pd.read_parquet(out / "rounds.parquet")
    check_steps_conserved(jobs_table, rounds)
    for job_id, t in before["completion"].items():  # what was finished stays finished, as it was
        assert jobs_table.set_index("job_id").loc[int(job_id), "completion_s"] == pytest.approx(t)
    assert rounds["round"].max() >= before["rounds"]
    events = pd.read_parquet(out / "events.parquet")
    assert "resumed" in set(events["kind"])


@pytest.mark.slow
def test_a_job_spans_two_agents_through_torchrun_rendezvous(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CLUSTERTWIN_SECRET", SECRET)
    port = _free_port()
    cluster = {"gpus": {"cpu": 2, "cpu_slow": 0}, "gpus_per_server": 1}
    # ResNet-18 at scale factor 2 on the table; the program is the test's own, under torchrun's gloo
    spanning = job(30, job_type="ResNet-18 (batch size 32)", scale_factor=2)
    scenario = own_scenario(
        tmp_path, [spanning], cluster=cluster, agents="remote", listen=f"127.0.0.1:{port}"
    )
    agents = [_agent(port, "cpu", "1", "127.0.0.2", SECRET), _agent(port, "cpu", "1", "127.0.0.3", SECRET)]
    out = tmp_path / "run"
    try:
        assert (
            main(["run", str(scenario), "--backend", "real", "--out", str(out), "--quiet", "--no-plots"]) == 0
        )
    finally:
        for agent in agents:
            agent.kill()
    rounds = pd.read_parquet(out / "rounds.parquet")
    check_steps_conserved(pd.read_parquet(out / "jobs.parquet"), rounds)
    assert (rounds["num_gpus"] == 2).all()


@pytest.mark.slow
def test_own_jobs_scenario_with_agents_started_by_hand_and_compared(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """The README's walk-through: the example programs, a real run with two `clustertwin agent`s, and
    `clustertwin compare` against the simulation."""
    monkeypatch.setenv("CLUSTERTWIN_SECRET", SECRET)
    monkeypatch.chdir(ROOT)
    port = _free_port()
    scenario = str(ROOT / "scenarios" / "gavel-own-jobs-cpu.yaml")
    sets = ["--set", "real.agents=remote", "--set", f"real.listen=127.0.0.1:{port}"]
    agents = [
        _agent(port, "cpu", "1", "127.0.0.1", SECRET),
        _agent(port, "cpu_slow", "1", "127.0.0.1", SECRET),
    ]
    started = time.monotonic()
    try:
        assert (
            main(["run", scenario, "--backend", "real", *sets, "--out", str(tmp_path / "real"), "--quiet"])
            == 0
        )
    finally:
        for agent in agents:
            agent.kill()
    wall = time.monotonic() - started
    assert main(["run", scenario, "--out", str(tmp_path / "sim"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "sim"), str(tmp_path / "real")]) == 0
    printed = capsys.readouterr().out
    assert "avg_jct_error=" in printed and "makespan_error=" in printed
    check_steps_conserved(pd.read_parquet(tmp_path / "real" / "jobs.parquet"),
                          pd.read_parquet(tmp_path / "real" / "rounds.parquet"))  # fmt: skip
    print(f"real run wall time {wall:.0f} s")
