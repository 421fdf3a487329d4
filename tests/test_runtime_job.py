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


# Each example at a tiny size: the two language models, the recommendation model and ResNet-50's shape.
EXAMPLES = {
    "transformer_lm": ["--dim", "16", "--layers", "1", "--context", "8", "--vocab", "50"],
    "lstm_lm": ["--dim", "8", "--hidden", "8", "--layers", "1", "--context", "4", "--vocab", "50"],
    "recommendation": ["--users", "30", "--items", "20", "--dim", "4", "--hidden", "8", "--batch-size", "8"],
    "resnet_cifar": ["--depth", "50", "--width", "2", "--batch-size", "2"],
}


def test_the_example_programs_run_alone(tmp_path: Path) -> None:
    """Each trains its steps on the device it is given (the CPU here), saves, and a second run resumes."""

    def start(name: str, steps: int) -> subprocess.Popen:
        command = [sys.executable, str(ROOT / "examples" / f"{name}.py"), "--steps", str(steps),
                   *EXAMPLES[name], "--checkpoint", str(tmp_path / f"{name}.pt")]  # fmt: skip
        return subprocess.Popen(
            command, env=_env(CLUSTERTWIN_DEVICE="cpu"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip

    # The programs run at once: one interpreter start, not four; the two newest resume too.
    for steps, first, names in ((3, 0, list(EXAMPLES)), (5, 3, ["lstm_lm", "recommendation"])):
        running = {name: start(name, steps) for name in names}
        for name, process in running.items():
            out, err = process.communicate(timeout=180)
            assert process.returncode == 0, err
            assert f"steps {first}-{steps}" in out, (name, out)
            assert torch.load(tmp_path / f"{name}.pt", weights_only=True)["step"] == steps
            assert not math.isnan(float(out.rsplit("loss", 1)[1]))


def test_resnet50_has_resnet50s_weights() -> None:
    """The depth-50 network at the paper's width is ResNet-50's size: 23.5M weights for 10 classes."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("resnet_cifar", ROOT / "examples" / "resnet_cifar.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with torch.device("meta"):  # shapes only, no memory
        weights = sum(p.numel() for p in module.ResNet(64, depth=50).parameters())
        assert 23.4e6 < weights < 23.6e6
        assert sum(p.numel() for p in module.ResNet(64, depth=18).parameters()) < 12e6


def test_the_device_is_the_worker_types() -> None:
    from clustertwin.runtime.job import device

    assert device({"CLUSTERTWIN_DEVICE": "cpu"}) == torch.device("cpu")
    assert device({"CLUSTERTWIN_DEVICE": "cuda", "LOCAL_RANK": "1"}) == torch.device("cuda", 1)
    assert device({}).type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="cpu or cuda"):
        device({"CLUSTERTWIN_DEVICE": "tpu"})


def test_a_job_says_when_it_has_trained_its_first_steps(tmp_path: Path) -> None:
    """The ready file (a profiler's background job) appears once READY_STEPS steps are done, not before."""
    from clustertwin.runtime.job import READY_STEPS

    ready = tmp_path / "ready"
    seen = []
    job = Job(READY_STEPS + 3, torch.nn.Linear(1, 1), session=Session(ready=ready))
    for step in job:
        seen.append((step, ready.is_file()))
    assert seen == [(s, s >= READY_STEPS) for s in range(READY_STEPS + 3)]


def test_an_agent_tells_a_job_its_device_and_a_cpu_worker_shows_it_no_gpu() -> None:
    import argparse

    from clustertwin.runtime.gavel.agent import Worker

    class Control:
        address = "127.0.0.1:1"

        def get(self, key: str) -> dict:
            return {}

    opts = argparse.Namespace(secret=b"secret", cuda_devices=[5, 6], cores=None)
    job = {
        "key": "j/0",
        "checkpoint": "c.pt",
        "total_steps": 9,
        "max_steps": 3,
        "max_seconds": 2.0,
        "slots": [1],
    }
    for kind, visible in (("cuda", "6"), ("cpu", "")):
        worker = Worker({"device": kind, "threads": 1, "slowdown": 1.0}, opts, Control())  # type: ignore[arg-type]
        env = worker._environment(job, {"env": {}})
        assert (env["CLUSTERTWIN_DEVICE"], env["CUDA_VISIBLE_DEVICES"]) == (kind, visible)
