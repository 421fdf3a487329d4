"""FlexRR on real gloo processes (4 workers and 2 parameter-server shards on 2 emulated hosts):
exactly-once processing checked through the trained model itself.

Under exact slack-s reads the final model does not depend on which worker processed which item, so it
must equal the serial reference; a lost, duplicated or misattributed reassigned range would change it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from clustertwin.runtime.flexrr.launch import run_real
from clustertwin.runtime.flexrr.model import Trainer, problem_for, reference
from clustertwin.scenarios.load import load_scenario

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("mode", "model"), [("flexrr", "mlr"), ("bsp_rr", "mlp")])
def test_real_workers_process_every_item_exactly_once(mode, model, tmp_path):
    s = load_scenario(
        ROOT / "scenarios" / "flexrr-default.yaml",
        [
            f"real.model={model}",
            "real.hidden=8",
            "convergence.target_loss=1.3",
            "cluster.machines=2",
            "cluster.workers_per_machine=2",
            "iterations=4",
            "items_per_worker=100",
            "rr.message_checks=10",
            "iteration_s=0.25",
            f"mode={mode}",
            "stragglers.model=power_law",
            "stragglers.alpha=2.5",  # heavy stragglers, so work is reassigned
        ],
    )
    heard: list[tuple[float, str]] = []
    result, final = run_real(s, tmp_path, lambda fraction, text: heard.append((fraction, text)))
    assert heard == [(1.0, "run 1/1 finished")]
    expected = reference(problem_for(s, 400), s.iterations, s.effective_slack)
    torch.testing.assert_close(final, expected, rtol=1e-9, atol=1e-12)
    # every update crossed the sharded parameter server: 2 shards, one per emulated host
    assert result.info["ps_bytes_pushed"] >= s.iterations * final.numel() * 8 * 4
    losses = [float(x) for x in result.info["loss_per_iteration"].split(",")]
    assert len(losses) == s.iterations + 1 and losses[-1] < losses[0]
    reached = result.info["measured_iterations_to_target"]
    assert reached != reached or losses[int(reached)] <= 1.3 < losses[int(reached) - 1]

    commits = result.tables["commits"].sort_values(["owner", "iteration", "start_item"])
    assert commits.groupby(["owner", "iteration"]).ngroups == 4 * s.iterations
    for (owner, _it), g in commits.groupby(["owner", "iteration"]):
        starts, ends = g["start_item"].to_numpy(), g["end_item"].to_numpy()
        assert starts[0] == 100 * owner and ends[-1] == 100 * (owner + 1)
        assert (starts[1:] == ends[:-1]).all()
    assert (commits["kind"] == "help").any()  # the straggler pattern did trigger reassignment

    it = result.tables["iterations"]
    done_by = it.groupby("iteration")["end_s"].max()
    for row in it.itertuples():
        if row.iteration - s.effective_slack - 1 >= 0:
            assert row.start_s >= done_by[row.iteration - s.effective_slack - 1] - 1e-6


def test_a_worker_killed_mid_run_stops_the_run_with_its_name(tmp_path, capsys):
    """SIGKILL one worker process a few seconds in: the CLI must say which worker died, exit 1, write no
    run folder, and not hang on the survivors (they block on the dead worker's gate otherwise)."""
    import os
    import signal
    import threading
    import time

    from clustertwin.cli import main

    def spawned() -> list[int]:
        pids = []
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    spawn = b"multiprocessing.spawn" in f.read()
            except (OSError, ValueError, IndexError):
                continue
            if ppid == os.getpid() and spawn:
                pids.append(int(entry))
        return sorted(pids)

    killed: list[float] = []

    def kill_one() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(spawned()) < 4:
            time.sleep(0.2)
        time.sleep(4.0)  # well into the run (imports and the first iterations)
        pids = spawned()
        if pids:
            os.kill(pids[1], signal.SIGKILL)
            killed.append(time.monotonic())

    killer = threading.Thread(target=kill_one, daemon=True)
    killer.start()
    out = tmp_path / "run"
    overrides = ["cluster.machines=2", "cluster.workers_per_machine=2", "iterations=200", "iteration_s=0.25"]
    overrides += ["items_per_worker=100", "rr.message_checks=10", "mode=flexrr"]
    argv = ["run", str(ROOT / "scenarios" / "flexrr-default.yaml"), "--backend", "real", "--out", str(out)]
    argv += ["--quiet", "--no-plots"] + [a for o in overrides for a in ("--set", o)]
    status = main(argv)
    ended = time.monotonic()
    killer.join()
    err = capsys.readouterr().err
    assert killed, "the workers never started"
    assert status == 1
    assert err.startswith("error: FlexRR worker ") and "killed by SIGKILL" in err, err
    assert ended - killed[0] < 20.0  # stopped promptly, not after the 50 s the run would take
    assert not out.exists()
    assert spawned() == []


@pytest.mark.slow
def test_the_ps_scenario_runs_for_real_and_compares_with_its_simulation(tmp_path, capsys):
    """`scenarios/flexrr-real-ps.yaml` end to end through the CLI: the MLP's loss falls to the target, and
    `compare` prints time per iteration and time to the target loss against the simulation."""
    import json

    from clustertwin.cli import main

    scenario = str(ROOT / "scenarios" / "flexrr-real-ps.yaml")
    real, sim = tmp_path / "real", tmp_path / "sim"
    assert main(["run", scenario, "--backend", "real", "--out", str(real), "--quiet", "--no-plots"]) == 0
    assert main(["run", scenario, "--out", str(sim), "--quiet", "--no-plots"]) == 0
    metrics = json.loads((real / "summary.json").read_text())["metrics"]
    assert metrics["final_loss"] < 0.6 < metrics["initial_loss"]
    assert metrics["iterations_to_target"] <= 30
    capsys.readouterr()
    assert main(["compare", str(sim), str(real)]) == 0
    printed = capsys.readouterr().out
    assert "time_per_iteration_s" in printed and "time_to_target_s" in printed


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_runs_loss_curve_is_measured_on_the_workers_data(tmp_path):
    """Data sets are generated on the device that uses them, and a CUDA generator's numbers are not the
    CPU's: the curve must come from the CUDA data the workers trained on."""
    s = load_scenario(
        ROOT / "scenarios" / "flexrr-default.yaml",
        [
            "real.device=cuda",
            "real.dtype=float32",
            "cluster.machines=2",
            "cluster.workers_per_machine=1",
            "iterations=3",
            "items_per_worker=40",
            "rr.message_checks=4",
            "iteration_s=0.1",
            "mode=bsp",
            "stragglers.model=none",
        ],
    )
    result, final = run_real(s, tmp_path)
    losses = [float(x) for x in result.info["loss_per_iteration"].split(",")]
    problem = problem_for(s, 80)
    on_cuda = Trainer(problem, "cuda:0").loss(final.to("cuda:0"))
    assert losses[-1] == pytest.approx(on_cuda, rel=1e-5)
    assert Trainer(problem).loss(final) != pytest.approx(on_cuda, rel=1e-5)  # why the device matters
