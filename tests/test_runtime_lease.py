"""Training under leases: a preempted job resumes at the right step with bit-identical state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from clustertwin.runtime.gavel.lease import Lease, load, run_lease  # noqa: E402
from clustertwin.runtime.workloads import Workload, workload_for  # noqa: E402

FAMILIES = ["image", "language", "recommendation"]


def _states_equal(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_states_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_states_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    return a == b


@pytest.mark.parametrize("family", FAMILIES)
def test_preempted_job_resumes_bit_identical(tmp_path: Path, family: str) -> None:
    workload = Workload(family, 4)
    straight, split = tmp_path / "straight.pt", tmp_path / "split.pt"
    report = run_lease(workload, straight, Lease(6, 1e9), total_steps=100)
    assert (report.start_step, report.end_step) == (0, 6)
    first = run_lease(workload, split, Lease(2, 1e9), total_steps=100)
    second = run_lease(workload, split, Lease(4, 1e9), total_steps=100)
    assert (first.end_step, second.start_step, second.end_step) == (2, 2, 6)
    a = load(straight, workload, 0, torch.device("cpu"))
    b = load(split, workload, 0, torch.device("cpu"))
    assert a.step == b.step == 6
    assert _states_equal(a.model.state_dict(), b.model.state_dict())
    assert _states_equal(a.optimizer.state_dict(), b.optimizer.state_dict())


def test_lease_never_runs_past_the_job_or_the_clock(tmp_path: Path) -> None:
    workload = Workload("recommendation", 4)
    ckpt = tmp_path / "job.pt"
    done = run_lease(workload, ckpt, Lease(50, 1e9), total_steps=5)
    assert done.end_step == 5
    assert run_lease(workload, ckpt, Lease(50, 1e9), total_steps=5).steps == 0
    timed = run_lease(workload, tmp_path / "timed.pt", Lease(10_000, 0.2), total_steps=10_000)
    assert 0 < timed.steps < 10_000 and timed.seconds < 5.0
    assert load(tmp_path / "timed.pt", workload, 0, torch.device("cpu")).step == timed.end_step


def test_slowdown_emulates_a_slower_type(tmp_path: Path) -> None:
    # Image steps are long enough (tens of ms) that scheduling noise on a busy machine cannot hide a 3x.
    workload = Workload("image", 8)
    # The process's first steps pay one-time kernel set-up (seconds on a loaded machine); keep it out.
    run_lease(workload, tmp_path / "warm.pt", Lease(2, 1e9), total_steps=100)
    fast = run_lease(workload, tmp_path / "f.pt", Lease(6, 1e9), total_steps=100)
    slow = run_lease(workload, tmp_path / "s.pt", Lease(6, 1e9), total_steps=100, slowdown=3.0)
    assert slow.throughput < fast.throughput / 1.8


class _PacedWorkload(Workload):
    """A tiny model whose steps take ``step_s`` (slept, so a busy test machine barely moves them) and
    whose first step in a process pays ``first_step_s`` more, as lazy kernel set-up does."""

    step_s, first_step_s = 0.02, 1.0

    def model(self) -> torch.nn.Module:
        return torch.nn.Linear(4, 1)

    def batch(self, seed: int, step: int, rank: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        first = not getattr(self, "_paid", False)
        object.__setattr__(self, "_paid", True)
        time.sleep(self.step_s + (self.first_step_s if first else 0.0))
        return torch.ones(2, 4), torch.zeros(2, 1)

    def loss(self, model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return torch.nn.functional.mse_loss(model(batch[0]), batch[1])


def test_lease_second_half_leaves_the_one_time_costs_out(tmp_path: Path) -> None:
    workload = _PacedWorkload("recommendation", 2)
    report = run_lease(workload, tmp_path / "job.pt", Lease(10**9, 2.0), total_steps=10**9)
    # The window opens at the first step that begins after half the lease (1 s) and runs to its end.
    assert 0 < report.window_steps < report.steps
    assert 0 < report.window_seconds <= report.seconds - 1.0 + 1e-6
    window_rate = report.window_steps / report.window_seconds
    # Steady steps take at least step_s, so no honest window runs faster than 1 / step_s ...
    assert 0.6 / workload.step_s < window_rate <= 1.0 / workload.step_s
    # ... while the whole lease's rate carries the 1 s one-time cost: about half the steady rate.
    assert report.throughput < 0.7 * window_rate
    # A lease bounded by steps has no second half to speak of.
    assert run_lease(workload, tmp_path / "n.pt", Lease(3, 1e9), total_steps=100).window_steps == 0


def test_gavel_job_types_map_to_families() -> None:
    assert workload_for("ResNet-18 (batch size 64)").family == "image"
    assert workload_for("LM (batch size 20)").family == "language"
    assert workload_for("Recommendation (batch size 512)").family == "recommendation"
    with pytest.raises(KeyError, match="no runtime workload"):
        workload_for("GPT-5 (batch size 1)")


def _job_args(tmp_path: Path, max_steps: int) -> list[str]:
    return [
        "--job-type", "ResNet-18 (batch size 32)", "--checkpoint", str(tmp_path / "ckpt.pt"),
        "--report", str(tmp_path / "report.json"), "--max-steps", str(max_steps), "--max-seconds", "600",
        "--total-steps", "5",
    ]  # fmt: skip


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "OMP_NUM_THREADS": "1"}


def test_job_process_trains_one_lease_and_reports(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "clustertwin.runtime.gavel.job_main", *_job_args(tmp_path, 3)]
    for expected in ((0, 3), (3, 5)):  # the second lease stops at the job's total steps
        subprocess.run(command, check=True, env=_env(), capture_output=True, timeout=120)
        report = json.loads((tmp_path / "report.json").read_text())
        assert (report["start_step"], report["end_step"]) == expected and report["throughput"] > 0


def test_distributed_job_process_under_torchrun(tmp_path: Path) -> None:
    """Two gloo ranks train one lease together, rank 0 saves once, and the next lease resumes there."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    command = [*torchrun, "-m", "clustertwin.runtime.gavel.job_main", *_job_args(tmp_path, 2)]
    for expected in ((0, 2), (2, 4)):
        subprocess.run(command, check=True, env=_env(), capture_output=True, timeout=180)
        report = json.loads((tmp_path / "report.json").read_text())
        assert (report["start_step"], report["end_step"]) == expected


def test_renewed_leases_train_on_from_memory_and_save_only_when_stopped(tmp_path: Path) -> None:
    """The renewal protocol of the job API, spoken by a bundled job: lease 0 from the environment the agent
    gives, lease 1 renewed through the control channel (no save in between), then stop: the checkpoint
    equals one straight run of the same steps."""
    from clustertwin.runtime.gavel.control import ControlServer, job_token

    secret = b"a-test-secret"
    control = ControlServer("127.0.0.1", 0, secret)
    ckpt = tmp_path / "renewed.pt"
    env = {
        **_env(), "CLUSTERTWIN_CONTROL": control.address, "CLUSTERTWIN_JOB_KEY": "job/7/0",
        "CLUSTERTWIN_JOB_TOKEN": job_token(secret, "job/7/0").decode(), "CLUSTERTWIN_CHECKPOINT": str(ckpt),
        "CLUSTERTWIN_TOTAL_STEPS": "100", "CLUSTERTWIN_LEASE_STEPS": "2", "CLUSTERTWIN_LEASE_SECONDS": "600",
    }  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-m", "clustertwin.runtime.gavel.job_main", "--job-type",
         "Recommendation (batch size 512)"], env=env,
    )  # fmt: skip
    try:
        first = control.wait_for(["job/7/0/report/0"], time.monotonic() + 120)["job/7/0/report/0"]
        assert (first["start_step"], first["end_step"], first["saved"]) == (0, 2, False)
        assert not ckpt.exists()  # a lease that may be renewed leaves nothing on disk
        control.put("job/7/0/lease/1", {"max_steps": 3, "max_seconds": 600})
        second = control.wait_for(["job/7/0/report/1"], time.monotonic() + 60)["job/7/0/report/1"]
        assert (second["start_step"], second["end_step"], second["load_s"]) == (2, 5, 0.0)
        control.put("job/7/0/lease/2", {"stop": True})
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()
        control.close()
    assert control.get("job/7/0/saved") == 5
    workload = workload_for("Recommendation (batch size 512)")
    # The job process ran on one thread (OMP_NUM_THREADS=1); so does the straight run, since a matmul
    # split over more threads sums in another order and the two would differ in the last bits.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_lease(workload, tmp_path / "straight.pt", Lease(5, 1e9), total_steps=100)
    finally:
        torch.set_num_threads(threads)
    a = load(ckpt, workload, 0, torch.device("cpu"))
    b = load(tmp_path / "straight.pt", workload, 0, torch.device("cpu"))
    assert a.step == b.step == 5
    assert _states_equal(a.model.state_dict(), b.model.state_dict())
    assert _states_equal(a.optimizer.state_dict(), b.optimizer.state_dict())
