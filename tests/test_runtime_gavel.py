"""Gavel for real on CPU workers: rounds, preemption and resume, and faults (killed agents and jobs)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("torch")

from clustertwin.runtime.gavel.run import RealGavel  # noqa: E402
from clustertwin.scenarios.load import load_scenario  # noqa: E402

from clustertwin.cli import main  # noqa: E402
from tests.test_gavel_renewal import assert_rounds_follow_plans, record_plans  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def check_steps_conserved(jobs: pd.DataFrame, rounds: pd.DataFrame) -> None:
    """Every finished job made exactly its steps: none lost, none counted twice."""
    made = rounds.groupby("job_id")["steps"].sum()
    for row in jobs.itertuples():
        assert row.completion_s == row.completion_s, f"job {row.job_id} did not finish"
        assert made[row.job_id] == row.total_steps == row.steps_done


@pytest.mark.slow
def test_real_cpu_run_preempts_resumes_and_matches_the_table_contract(tmp_path: Path) -> None:
    """The acceptance run: >=4 jobs on 2 worker types through >=3 rounds, with preemption and resume."""
    out = tmp_path / "real"
    assert main(["run", str(ROOT / "scenarios/gavel-real-cpu.yaml"), "--backend", "real", "--out", str(out),
                 "--quiet", "--no-plots"]) == 0  # fmt: skip
    jobs = pd.read_parquet(out / "jobs.parquet")
    rounds = pd.read_parquet(out / "rounds.parquet")
    assert len(jobs) >= 4 and rounds["round"].nunique() >= 3
    assert set(rounds["worker_type"]) == {"cpu", "cpu_slow"}
    check_steps_conserved(jobs, rounds)
    # Preempted and resumed: some job sat out a round before its last one, or moved between types.
    resumed = False
    for _, mine in rounds.groupby("job_id"):
        ran = sorted(mine["round"])
        gaps = any(b - a > 1 for a, b in zip(ran, ran[1:], strict=False))
        resumed |= gaps or mine["worker_type"].nunique() > 1
    assert resumed
    assert rounds["renewed"].any()  # a job kept its workers and its process across rounds
    # A round in which some job did not finish lasts at least round_s (12 s here), as in the simulator:
    # no round starts before its nominal boundary, however short the leases' restarts turned out.
    starts = rounds.groupby("round")["start_s"].first()
    completed = set(jobs["completion_s"].dropna())
    for r, nxt in zip(starts.index, starts.index[1:], strict=False):
        ends = rounds.loc[rounds["round"] == r, "end_s"]
        if not ends.isin(completed).all():
            assert starts[nxt] - starts[r] >= 12.0 - 1e-6, (r, starts[r], starts[nxt])
    assert main(["run", str(ROOT / "scenarios/gavel-real-cpu.yaml"), "--backend", "sim", "--out",
                 str(tmp_path / "sim"), "--quiet", "--no-plots"]) == 0  # fmt: skip
    assert main(["compare", str(tmp_path / "sim"), str(out)]) == 0


def _kill_when(predicate, action, stop: threading.Event) -> threading.Thread:
    def watch() -> None:
        while not stop.is_set():
            if predicate():
                action()
                return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_killed_agent_and_killed_job_lose_no_step(tmp_path: Path) -> None:
    """Users' programs (the job API) on agents that die: an agent killed mid-round and a job process killed
    mid-lease resume from their last checkpoints, and no step is lost or counted twice."""
    from tests.test_runtime_gavel_hosts import PROGRAM, job, own_scenario

    command = f"python {PROGRAM} --step-s 0.03 --tag {tmp_path / 'work'}"
    jobs = [job(300, command), job(400, command, job_type="Recommendation (batch size 512)"),
            job(250, command, job_type="LM (batch size 40)")]  # fmt: skip
    cluster = {"gpus": {"cpu": 2, "cpu_slow": 2}, "gpus_per_server": 2}
    scenario = load_scenario(own_scenario(tmp_path, jobs, cluster=cluster, grace_s=30.0),
                             ["mechanism.round_s=6", "mechanism.preemption_overhead_s=2"])  # fmt: skip
    real = RealGavel(scenario, tmp_path / "work", snapshot_dir=tmp_path / "partial")
    plans = record_plans(real.scheduler)
    stop = threading.Event()

    def plan_published(r: int) -> bool:
        control = getattr(real, "control", None)
        return control is not None and any(control.has(f"plan/{r}/{a.name}") for a in real.agents)

    def kill_agent() -> None:
        time.sleep(2.0)  # mid-round: its jobs are running
        busy = [a for a in real.agents if real.control.get(f"plan/1/{a.name}")["jobs"]]
        if busy and not stop.is_set():
            os.kill(busy[0].process.pid, signal.SIGKILL)

    def kill_a_job() -> None:
        time.sleep(3.0)
        # Only this run's job processes (their checkpoints live under its work folder), and only while
        # the run is on: a stray kill must never reach another test's processes.
        found = subprocess.run(["pgrep", "-f", str(tmp_path / "work")], capture_output=True, text=True)
        pids = found.stdout.split()
        if pids and not stop.is_set():
            os.kill(int(pids[0]), signal.SIGKILL)

    watchers = [_kill_when(lambda: plan_published(1), kill_agent, stop),
                _kill_when(lambda: plan_published(3), kill_a_job, stop)]  # fmt: skip
    try:
        result = real.run()
    finally:
        stop.set()
        for watcher in watchers:
            watcher.join()
    events = result.tables["events"]
    assert "agent_lost" in set(events["kind"])
    # Its connection closed, so the round did not wait for it until the scheduler's deadline (round_s +
    # grace_s + 10 s): it ended with the other agent's jobs, which end by round_s + grace_s at the latest.
    rounds = result.tables["rounds"]
    lost_at = float(events[events["kind"] == "agent_lost"]["time_s"].iloc[0])
    began = float(rounds[rounds["start_s"] <= lost_at]["start_s"].max())
    assert lost_at - began < scenario.mechanism.round_s + scenario.real.grace_s + 5.0
    assert "job_failed" in set(events["kind"])
    check_steps_conserved(result.tables["jobs"], result.tables["rounds"])
    # Renewed exactly as the scheduler planned, the killed processes included (their next lease was
    # planned as a fresh start, not as a renewal of a process that is gone).
    assert_rounds_follow_plans(result.tables["rounds"], plans)
    # After every round the tables so far were rewritten: the last snapshot holds every round.
    snapshot = pd.read_parquet(tmp_path / "partial" / "rounds.parquet")
    assert len(snapshot) == len(result.tables["rounds"])


def test_no_round_starts_before_its_nominal_boundary(tmp_path: Path) -> None:
    """An over-stated restart overhead (9 s of a 10 s round) makes the first round's leases, which start
    their processes, end early; the next round still starts no sooner than round_s after it, as the
    simulator's rounds do, unless every job of the round finished in it."""
    trace = tmp_path / "jobs.trace"
    trace.write_text("".join(
        f"{t}\tcmd\t.\t--steps\t0\t{steps}\t1\t1\t-1\t0\n"
        for t, steps in [("LM (batch size 20)", 400), ("Recommendation (batch size 512)", 600)]
    ))  # fmt: skip
    scenario = load_scenario(
        ROOT / "scenarios/gavel-real-cpu.yaml",
        [
            f"workload.trace={trace}",
            "mechanism.round_s=10",
            "mechanism.preemption_overhead_s=9",
            "real.commands=builtin",
        ],  # fmt: skip
    )
    tables = RealGavel(scenario, tmp_path / "work").run().tables
    rounds, jobs = tables["rounds"], tables["jobs"]
    check_steps_conserved(jobs, rounds)
    starts = rounds.groupby("round")["start_s"].first()
    assert len(starts) >= 2
    completed = set(jobs["completion_s"])
    early = [
        (r, nxt)
        for r, nxt in zip(starts.index, starts.index[1:], strict=False)
        if not rounds.loc[rounds["round"] == r, "end_s"].isin(completed).all()
    ]
    assert early  # rounds in which some lease ran its (short) full time
    for r, nxt in early:
        assert starts[nxt] - starts[r] >= 10.0 - 1e-6, (r, starts[r], starts[nxt])
    # The first round's leases ended well before the next round began: the rule, not slow restarts, is
    # what kept it 10 s long. (How early they end depends on the host's load: process start is most of it.)
    first = rounds[rounds["round"] == starts.index[0]]
    assert first["end_s"].max() < starts.iloc[1] - 0.25


def test_progress_counts_rounds_and_steps_not_only_finished_jobs(tmp_path: Path) -> None:
    scenario = load_scenario(ROOT / "scenarios" / "gavel-real-cpu.yaml")
    run = RealGavel(scenario, tmp_path)  # built, not started: no process runs
    total = sum(int(j.spec.total_steps) for j in run.jobs)
    first = run.jobs[0].spec
    run.known_step[first.job_id] = int(first.total_steps) // 2
    fraction, text = run._progress(3)
    assert fraction == pytest.approx((int(first.total_steps) // 2) / total) and 0 < fraction < 1
    assert text == f"round 3, {int(first.total_steps) // 2}/{total} steps, 0/{len(run.jobs)} jobs done"
