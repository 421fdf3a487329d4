"""``clustertwin sweep`` as a user runs it, in a subprocess: against a multi-process Ray cluster started
here (standing in for a remote one), and killed mid-sweep then resumed."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from test_sweep import free_port, write_spec

pytest.importorskip("ray", reason="needs the sweep extra: pip install -e '.[sweep]'")

BIN = Path(sys.executable).parent
CLUSTERTWIN = str(BIN / "clustertwin")
RAY = str(BIN / "ray")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "RAY_AUTH"))}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return env | extra


def _stop(process: subprocess.Popen) -> None:
    """End a process started here and everything in its process group (its own session)."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=5)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture
def ray_cluster() -> Iterator[tuple[str, dict[str, str]]]:
    """A Ray head node with 2 CPUs on a free port, in its own session, with token authentication as a
    remote cluster would have; its address and the environment a driver needs to join it."""
    env = _env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    port = free_port()
    temp = tempfile.mkdtemp(prefix="rayt", dir="/tmp")  # short: Ray's socket paths are length-limited
    head = subprocess.Popen(
        [RAY, "start", "--head", "--block", f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
         "--disable-usage-stats", f"--temp-dir={temp}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        yield f"127.0.0.1:{port}", env
    finally:
        _stop(head)
        shutil.rmtree(temp, ignore_errors=True)


def test_same_spec_runs_on_a_ray_cluster_by_address(
    tmp_path: Path, ray_cluster: tuple[str, dict[str, str]]
) -> None:
    address, env = ray_cluster
    spec, out = write_spec(tmp_path), tmp_path / "out"
    command = [CLUSTERTWIN, "sweep", str(spec), "--out", str(out), "--address", address]
    deadline = time.monotonic() + 90
    while True:  # the head takes a few seconds to come up
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
        if done.returncode != 2 or "no Ray cluster reachable" not in done.stderr:
            break
        assert time.monotonic() < deadline, done.stderr
        time.sleep(2)
    assert done.returncode == 0, done.stderr
    table = pd.read_parquet(out / "results.parquet")
    assert len(table) == 8 and set(table["status"]) == {"ok"}
    assert table["avg_jct_h"].notna().all()
    assert done.stdout.strip().endswith("results.parquet")
    # Same numbers as a run of the same point outside Ray: the workers ran the scenario of the spec.
    first = table.iloc[0]
    from clustertwin.sweep import plan_sweep, simulate

    plan = plan_sweep(spec)
    assert simulate(plan.scenarios[first["run"]])["avg_jct_h"] == pytest.approx(first["avg_jct_h"])


def _session_processes(sid: int) -> list[str]:
    """The commands of the live processes whose POSIX session id is ``sid`` (a driver started with setsid)."""
    import psutil

    found = []
    for process in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if os.getsid(process.pid) == sid and process.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(" ".join(process.info["cmdline"] or [])[:80])
        except (ProcessLookupError, PermissionError):
            continue
    return found


def test_killed_driver_resumes_without_redoing_finished_runs(tmp_path: Path) -> None:
    # 12 runs of a few tenths of a second each, one at a time, so the driver can be killed mid-way.
    spec = write_spec(
        tmp_path,
        "name: k\nscenario: tiny.yaml\nset: [workload.generate.num_jobs=20]\n"
        "grid:\n  loads: [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]\n  seeds: [0, 1]\n",
    )
    out = tmp_path / "out"
    runs = out / "runs"
    command = [CLUSTERTWIN, "sweep", str(spec), "--out", str(out), "--workers", "1"]
    driver = subprocess.Popen(
        command, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while len(list(runs.glob("*.json"))) < 3:
            assert driver.poll() is None, "the sweep ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(driver.pid, signal.SIGKILL)  # no clean-up, no results table
        driver.wait(timeout=30)
        # Ray's processes, its agents included, die with the driver (the reaper ends the agents).
        deadline = time.monotonic() + 30
        while _session_processes(driver.pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _session_processes(driver.pid) == []
    finally:
        _stop(driver)  # Ray's processes of that driver, in its session
    before = {p.name: p.stat().st_mtime_ns for p in runs.glob("*.json")}
    assert 3 <= len(before) < 12
    assert not (out / "results.parquet").exists()

    done = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert f"12 runs, {len(before)} already done, {12 - len(before)} to run" in done.stderr
    assert f"[{len(before) + 1}/12] ok" in done.stderr and "[12/12] ok" in done.stderr  # progress lines
    assert "done: 12 ok, 0 failed, 0 not run" in done.stderr
    after = {p.name: p.stat().st_mtime_ns for p in runs.glob("*.json")}
    assert len(after) == 12
    assert all(after[name] == mtime for name, mtime in before.items())  # finished runs untouched
    table = pd.read_parquet(out / "results.parquet")
    assert len(table) == 12 and set(table["status"]) == {"ok"}
