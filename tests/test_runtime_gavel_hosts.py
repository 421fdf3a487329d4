"""Gavel for real across hosts: agents started by hand on their own addresses, the authenticated control
channel, users' own programs as jobs, and bad input (missing agents, failing commands)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

pytest.importorskip("torch")

from clustertwin.runtime.gavel.control import ControlClient, ControlServer, Refused, job_token  # noqa: E402
from clustertwin.runtime.gavel.run import RealGavel  # noqa: E402
from clustertwin.scenarios.load import load_scenario  # noqa: E402

from clustertwin.cli import main  # noqa: E402
from clustertwin.errors import RunFailure  # noqa: E402
from tests.test_runtime_gavel import check_steps_conserved  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "tests" / "job_program.py"
SECRET = "correct-horse-battery-staple-0123456789"


def own_scenario(tmp_path: Path, jobs: list[dict], cluster: dict | None = None, **real) -> Path:
    """A scenario of ``jobs`` (users' programs) on the bundled CPU table's worker types."""
    data = {
        "name": "own-jobs-test", "kind": "gavel",
        "cluster": cluster or {"gpus": {"cpu": 1, "cpu_slow": 1}, "gpus_per_server": 1},
        "throughputs": str(ROOT / "scenarios/traces/gavel-real-cpu.throughputs.csv"),
        "workload": {"jobs": jobs},
        "policy": {"name": "las", "params": {"aware": True}},
        "mechanism": {"round_s": 4.0, "min_reset_interval_s": 0.0, "preemption_overhead_s": 1.0,
                      "overhead_model": "restart"},
        "real": {"workers": {"cpu": {"device": "cpu"}, "cpu_slow": {"device": "cpu", "slowdown": 2.0}},
                 "grace_s": 30.0, **real},
    }  # fmt: skip
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def job(steps: int, command: str | None = None, job_type: str = "LM (batch size 20)", **extra) -> dict:
    return {"job_type": job_type, "command": command or f"python {PROGRAM} --step-s 0.02",
            "total_steps": steps, **extra}  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _agent(port: int, worker_type: str, devices: str, address: str, secret: str | None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "CLUSTERTWIN_SECRET"}
    env.update({"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    if secret is not None:
        env["CLUSTERTWIN_SECRET"] = secret
    command = [sys.executable, "-m", "clustertwin", "agent", "--scheduler", f"127.0.0.1:{port}",
               "--type", worker_type, "--devices", devices, "--address", address, "--wait", "60"]  # fmt: skip
    return subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)


def test_the_control_channel_hears_only_holders_of_the_secret() -> None:
    server = ControlServer("127.0.0.1", 0, SECRET.encode())
    try:
        with pytest.raises(Refused):
            ControlClient(server.address, b"wrong", connect_s=5)
        with pytest.raises(Refused):  # a job token opens its own keys only
            ControlClient(server.address, job_token(SECRET.encode(), "job/1/0"), job="job/2/0", connect_s=5)
        agent = ControlClient(server.address, SECRET.encode(), connect_s=5)
        agent.put("hello/x", {"type": "cpu"})
        with pytest.raises(Refused, match="may not write"):
            agent.put("plan/0/cpu-0", {"jobs": []})  # plans are the scheduler's alone
        with pytest.raises(Refused, match="may not write"):
            agent.put("catalog", {})
        server.put("job/1/0/lease/1", {"stop": True})
        mine = ControlClient(
            server.address, job_token(SECRET.encode(), "job/1/0"), job="job/1/0", connect_s=5
        )
        assert mine.get("job/1/0/lease/1") == {"stop": True}
        mine.put("job/1/0/report/0", {"end_step": 3})
        for forbidden in ("job/2/0/report/0", "job/1/0/lease/2", "plan/0/cpu-0"):
            with pytest.raises(Refused):
                mine.put(forbidden, {})
        with pytest.raises(Refused):
            mine.get("hello/x")
        assert len(server.refused) == 2 and not any(SECRET in why for why in server.refused)
        assert not server.has("plan/0/cpu-0") and not server.has("catalog")
    finally:
        server.close()


def test_an_agent_without_the_secret_is_refused_and_runs_nothing() -> None:
    server = ControlServer("127.0.0.1", 0, SECRET.encode())
    try:
        server.put("catalog", {"0": {"command": ["touch", "/nonexistent/never"]}})
        port = server.port
        agents = [_agent(port, "cpu", "1", "127.0.0.2", None), _agent(port, "cpu", "1", "127.0.0.3", "guess")]
        outs = [a.communicate(timeout=60)[1] for a in agents]
        assert [a.returncode for a in agents] == [2, 2]
        assert "no shared secret" in outs[0] and "refused" in outs[1]
        assert server.keys("hello/") == [] and server.keys("ready/") == []
        assert "guess" not in "".join(server.refused)
    finally:
        server.close()


def test_missing_and_unfit_agents_end_the_run_with_a_clear_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CLUSTERTWIN_SECRET", SECRET)
    port = _free_port()
    scenario = load_scenario(own_scenario(tmp_path, [job(10)], agents="remote", listen=f"127.0.0.1:{port}",
                                          agent_timeout_s=8.0))  # fmt: skip
    real = RealGavel(scenario, tmp_path / "work")
    # A cpu agent with two devices where the cluster's cpu servers hold one: turned away, with the reason.
    unfit = None

    def offer_unfit() -> None:
        nonlocal unfit
        unfit = _agent(port, "cpu", "2", "127.0.0.2", SECRET)

    import threading

    timer = threading.Timer(0.5, offer_unfit)
    timer.start()
    try:
        with pytest.raises(RunFailure) as failure:
            real.run()
    finally:
        timer.join()
    assert unfit is not None
    unfit.wait(timeout=30)
    message = str(failure.value)
    assert "cpu-0 (cpu, 1 devices)" in message and "cpu_slow-0" in message
    assert "servers hold 1 devices each; this agent offers 2" in message
    assert unfit.returncode == 2 and "servers hold 1 devices" in unfit.stderr.read()


def test_no_secret_for_remote_agents_is_an_input_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("CLUSTERTWIN_SECRET", raising=False)
    path = own_scenario(tmp_path, [job(10)], agents="remote")
    assert main(["run", str(path), "--backend", "real", "--out", str(tmp_path / "out"), "--quiet"]) == 2


def test_two_agents_on_their_own_addresses_run_users_programs(tmp_path: Path, monkeypatch) -> None:
    """Two hosts emulated on one machine: agents started by hand with `clustertwin agent` on 127.0.0.2 and
    127.0.0.3 serve a scheduler that waits for them; the jobs are the user's program."""
    monkeypatch.setenv("CLUSTERTWIN_SECRET", SECRET)
    port = _free_port()
    path = own_scenario(tmp_path, [job(40), job(60, job_type="Recommendation (batch size 512)")],
                        agents="remote", listen=f"127.0.0.1:{port}")  # fmt: skip
    agents = [
        _agent(port, "cpu", "1", "127.0.0.2", SECRET),
        _agent(port, "cpu_slow", "1", "127.0.0.3", SECRET),
    ]
    out = tmp_path / "run"
    try:
        assert main(["run", str(path), "--backend", "real", "--out", str(out), "--quiet", "--no-plots"]) == 0
        assert [a.wait(timeout=30) for a in agents] == [0, 0]
    finally:
        for agent in agents:
            agent.kill()
    jobs, rounds = pd.read_parquet(out / "jobs.parquet"), pd.read_parquet(out / "rounds.parquet")
    check_steps_conserved(jobs, rounds)
    for folder in (out, tmp_path):  # the run folder, the scenario, the logs: nowhere is the secret
        for file in folder.rglob("*"):
            if file.is_file():
                assert SECRET.encode() not in file.read_bytes(), file
    assert all(SECRET not in agent.stderr.read() for agent in agents)


def test_failing_commands_become_failed_jobs_and_the_run_finishes(tmp_path: Path) -> None:
    """A command that does not exist and a program that exits at once are tried real.max_tries times, then
    given up; the good job finishes and its results are kept."""
    jobs = [job(30), job(30, command="no-such-program --flag"),
            job(30, command="python -c 'import sys; sys.exit(3)'")]  # fmt: skip
    cluster = {"gpus": {"cpu": 3, "cpu_slow": 0}, "gpus_per_server": 3}
    scenario = load_scenario(own_scenario(tmp_path, jobs, cluster=cluster, max_tries=2))
    result = RealGavel(scenario, tmp_path / "work").run()
    events, table = result.tables["events"], result.tables["jobs"].set_index("job_id")
    abandoned = events[events["kind"] == "job_abandoned"].set_index("job_id")["detail"]
    assert sorted(abandoned.index) == [1, 2]
    assert "No such file or directory" in abandoned[1] and "exit 3" in abandoned[2]
    assert table.loc[0, "steps_done"] == 30 and table.loc[0, "completion_s"] > 0
    assert table.loc[[1, 2], "completion_s"].isna().all()
    assert set(result.info["failed_jobs"]) == {"1", "2"}


def test_trace_and_scenario_jobs_become_the_agents_catalog(tmp_path: Path) -> None:
    """What an agent may run: a trace row's command in its working directory with Gavel's step flag, a
    scenario job's command, directory and environment; bundled stand-ins where the trace says so."""
    from clustertwin.errors import InputError

    (tmp_path / "jobs").mkdir()
    trace = tmp_path / "jobs" / "t.trace"
    trace.write_text(
        "LM (batch size 20)\tpython3 train.py --lr 0.1\tlm\t--num_steps\t0\t50\t1\t1\t-1\t0\n"
        "LM (batch size 40)\tpython3 -m clustertwin.runtime.gavel.job_main\t.\t\t0\t60\t1\t1\t-1\t0\n"
    )
    from_trace = [f"workload.trace={trace}", "workload.jobs=null"]
    scenario = load_scenario(own_scenario(tmp_path, [job(10)]), from_trace)
    catalog = RealGavel(scenario, tmp_path / "w").catalog
    # Checkpoints and logs are named absolutely: a job runs in its own working directory.
    assert RealGavel(scenario, Path("relative-work")).workdir.is_absolute()
    assert catalog["0"] == {"command": ["python3", "train.py", "--lr", "0.1", "--num_steps", "50"],
                            "cwd": str(tmp_path / "jobs" / "lm"), "env": {}}  # fmt: skip
    assert catalog["1"] == {"builtin": "LM (batch size 40)"}
    builtin = load_scenario(own_scenario(tmp_path, [job(10)]), [*from_trace, "real.commands=builtin"])
    assert RealGavel(builtin, tmp_path / "w").catalog["0"] == {"builtin": "LM (batch size 20)"}
    own = load_scenario(own_scenario(tmp_path, [job(10, "python x.py", env={"A": "1"}, working_dir="sub")]))
    assert RealGavel(own, tmp_path / "w").catalog["0"] == {
        "command": ["python", "x.py"], "cwd": str((tmp_path / "sub").resolve()), "env": {"A": "1"}
    }  # fmt: skip
    two = {"gpus": {"cpu": 2, "cpu_slow": 0}, "gpus_per_server": 2}
    spanning = job(10, "./train.sh", job_type="ResNet-18 (batch size 32)", scale_factor=2)
    ranks = own_scenario(tmp_path, [spanning], cluster=two)
    with pytest.raises(InputError, match="must start with python"):
        RealGavel(load_scenario(ranks), tmp_path / "w")
    unknown = own_scenario(tmp_path, [job(10, job_type="GPT (batch size 1)")])
    with pytest.raises(InputError, match=r"workload.jobs.0.job_type.*not in the throughput table"):
        RealGavel(load_scenario(unknown), tmp_path / "w")
