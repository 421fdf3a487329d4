"""The training processes' environment (runtime.gavel.training_env): heap keeps a step's buffers, so a warm
step faults no memory in; agents and the profiler start their processes with it."""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("torch")

from clustertwin.runtime.gavel import agent, profile  # noqa: E402
from clustertwin.runtime.gavel.training_env import HEAP_TUNABLES, training_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# Minor page faults per step of the Recommendation stand-in after 20 warm steps, on one thread, over the
# given steps: a kept heap still grows now and then by a MiB (250 faults at once), which 100 steps would
# count as 2.5 a step, so the tuned heap is watched for 400; glibc's defaults fault every step's buffers
# in, which 50 steps show as well as 400.
FAULTS_PER_STEP = """
import resource, sys, torch
from pathlib import Path
from clustertwin.runtime.gavel.lease import Lease, Trainer
from clustertwin.runtime.workloads import workload_for
torch.set_num_threads(1)
t = Trainer(workload_for("Recommendation (batch size 512)"), Path(sys.argv[1]), 10**9, seed=0)
t.train(Lease(20, 3600))
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
steps = int(sys.argv[2])
t.train(Lease(steps, 3600))
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / steps)
"""


def _faults_per_step(env: dict[str, str], tmp_path: Path, steps: int) -> float:
    env = {**env, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", FAULTS_PER_STEP, str(tmp_path / "never.pt"), str(steps)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the tunables are glibc's")
def test_a_warm_step_faults_no_memory_in(tmp_path: Path) -> None:
    plain = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    assert _faults_per_step(plain, tmp_path, 50) > 100  # glibc's defaults: every step maps its buffers again
    assert _faults_per_step(training_env(plain), tmp_path, 400) < 5


def test_the_callers_values_win_and_threads_are_set() -> None:
    env = training_env({"MALLOC_TOP_PAD_": "0", "PATH": "/bin"}, threads=3)
    assert env["MALLOC_TOP_PAD_"] == "0" and env["PATH"] == "/bin" and env["OMP_NUM_THREADS"] == "3"
    assert env["MALLOC_MMAP_THRESHOLD_"] == HEAP_TUNABLES["MALLOC_MMAP_THRESHOLD_"]
    assert "OMP_NUM_THREADS" not in training_env({})


def test_agents_and_the_profiler_start_jobs_with_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in HEAP_TUNABLES:
        monkeypatch.delenv(name, raising=False)
    started: list[dict[str, str]] = []
    monkeypatch.setattr(agent.subprocess, "Popen", lambda *a, env, **k: started.append(env))
    settings = {"name": "cpu-0", "device": "cpu", "threads": 2, "slowdown": 1.0}
    opts = argparse.Namespace(secret=b"s", cores=None, cuda_devices=None, address="127.0.0.1")
    control = SimpleNamespace(address="127.0.0.1:1", get=lambda key: {"0": {"builtin": "LM (batch size 20)"}})
    worker = agent.Worker(settings, opts, control)
    job = {"job_id": 0, "job_type": "LM (batch size 20)", "checkpoint": str(tmp_path / "c.pt"), "key": "k"}
    job |= {"max_steps": 1, "max_seconds": 1.0, "total_steps": 1, "seed": 0, "slots": [0]}
    worker._start(job | {"log": str(tmp_path / "log")}, deadline=0.0)
    (env,) = started
    assert env["OMP_NUM_THREADS"] == "2"
    for environment in (env, profile._job_env()):
        assert {k: environment[k] for k in HEAP_TUNABLES} == HEAP_TUNABLES


SMALLEST_SUBNORMAL = 5e-324


def test_a_training_process_flushes_subnormals_and_a_trainer_leaves_its_caller_alone(tmp_path: Path) -> None:
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("flush-to-zero is an x86 mode here")
    from clustertwin.runtime.gavel.lease import Lease, Trainer
    from clustertwin.runtime.workloads import workload_for

    # In-process (tests, tools): building and training a Trainer must not switch the caller to
    # flush-to-zero, which would break every later subnormal computation (hypothesis refuses to run).
    trainer = Trainer(workload_for("Recommendation (batch size 512)"), tmp_path / "c.pt", 10)
    trainer.train(Lease(2, 1e9))
    assert SMALLEST_SUBNORMAL * 1.0 > 0.0
    # A job process flushes before its first operation, so subnormal results become zero there.
    code = "from clustertwin.runtime.gavel.training_env import flush_subnormals\nflush_subnormals()\n"
    code += f"print({SMALLEST_SUBNORMAL} * 1.0)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert float(out.stdout) == 0.0
