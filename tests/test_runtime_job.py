"""The job API (``runtime.job``): a user's loop trains whole jobs alone, and leases under a scheduler with
checkpoints that resume bit-identically."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from clustertwin.runtime.job import Job, Session  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _train(session: Session, total: int = 30) -> tuple[Job, torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    job = Job(total, {"model": model, "optimizer": optimizer}, session=session)
    for step in job:
        g = torch.Generator().manual_seed(step)
        x = torch.randn(4, 3, generator=g)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return job, model, optimizer


def test_a_job_run_by_hand_trains_every_step_and_saves(tmp_path: Path) -> None:
    job, _, _ = _train(Session(checkpoint=tmp_path / "c.pt"), total=12)
    assert job.step == 12 and [(s.start_step, s.end_step) for s in job.leases] == [(0, 12)]
    assert torch.load(tmp_path / "c.pt", weights_only=True)["step"] == 12
    again, _, _ = _train(Session(checkpoint=tmp_path / "c.pt"), total=12)  # nothing left to do
    assert again.leases[-1].steps == 0


def test_leases_resume_bit_identical_to_a_straight_run(tmp_path: Path) -> None:
    _, straight, straight_opt = _train(Session(), total=10)
    split = tmp_path / "split.pt"
    for steps, report in ((3, "a.json"), (4, "b.json"), (100, "c.json")):
        job, model, optimizer = _train(
            Session(checkpoint=split, lease_steps=steps, report=tmp_path / report), total=10
        )
    reports = [json.loads((tmp_path / n).read_text()) for n in ("a.json", "b.json", "c.json")]
    assert [(r["start_step"], r["end_step"], r["saved"]) for r in reports] == [
        (0, 3, True), (3, 7, True), (7, 10, True)
    ]  # fmt: skip
    for a, b in zip(straight.state_dict().values(), model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert torch.equal(
        straight_opt.state_dict()["state"][0]["momentum_buffer"],
        optimizer.state_dict()["state"][0]["momentum_buffer"],
    )


def test_a_lease_ends_by_the_clock(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)
    job = Job(10**6, model, session=Session(lease_seconds=0.3, report=tmp_path / "r.json"))
    for _ in job:
        time.sleep(0.01)
    report = json.loads((tmp_path / "r.json").read_text())
    assert 0 < report["end_step"] < 10**6 and 0.3 <= report["seconds"] < 3.0
    assert 0 < report["window_steps"] < report["end_step"]


def test_save_and_load_callables(tmp_path: Path) -> None:
    kept = {"value": 0}

    def run() -> Job:
        session = Session(checkpoint=tmp_path / "c.pt", lease_steps=2, report=tmp_path / "r.json")
        job = Job(
            5, save=lambda: {"kept": dict(kept)}, load=lambda d: kept.update(d["kept"]), session=session
        )
        for _ in job:
            kept["value"] += 1
        return job

    run()
    kept["value"] = -100  # what the process held is lost; the checkpoint is what counts
    run()
    assert kept["value"] == 4
    with pytest.raises(ValueError, match="state"):
        Job(5)


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **extra}


def test_the_example_programs_run_alone(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "transformer_lm.py"), "--steps", "3", "--dim", "16",
         "--layers", "1", "--context", "8", "--vocab", "50", "--checkpoint", str(tmp_path / "lm.pt")],
        env=_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "steps 0-3" in done.stdout
    assert torch.load(tmp_path / "lm.pt", weights_only=True)["step"] == 3
    assert not math.isnan(float(done.stdout.rsplit("loss", 1)[1]))
