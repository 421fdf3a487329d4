"""``experiments/psld_gpu.py run --device cpu --tiny``: the GPU experiment's whole pipeline on CPU.

Profiling, mxnet and PSLD for real (2 workers and 2 PSs in one launch, PS 1's NIC capped), the
calibration, the parameter-identity check against the no-reassignment reference, the re-sharding pause
and the calibrated simulations; then ``report`` renders the table. The CUDA path differs only in the
workers' device (``runtime.psld.ps.worker_device``) and is not exercised here.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch
from clustertwin.runtime.psld.run import build_job, check_real
from clustertwin.scenarios.load import load_scenario

from clustertwin.errors import InputError
from experiments import psld_gpu
from experiments.psld_gpu import main


@pytest.mark.slow
def test_tiny_cpu_run_writes_a_complete_table(tmp_path: Path, capsys) -> None:
    out = tmp_path / "psld-gpu"
    assert main(["run", "--out", str(out), "--device", "cpu", "--tiny"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["device"] == "cpu" and results["mode"] == "vanilla"
    # --tiny trains the small ResNet for real, and the simulations price its tensors
    assert results["gradient"] == "model" and results["real_model"] == "resnet_small"
    assert results["blocks"] == 29
    rows = {row["policy"]: row for row in results["table"]}
    assert set(rows) == {"mxnet", "psld"}
    for row in rows.values():
        assert all(math.isfinite(row[key]) for key in ("real_it_s", "sim_it_s", "rel_error"))
        assert row["real_it_s"] > 0 and row["sim_it_s"] > 0
    assert rows["mxnet"]["real_reassignments"] == 0 and rows["psld"]["real_reassignments"] >= 1
    # PSLD's prediction is the median over the seeds, and seed 0 (the real run's stream) is one of them
    psld = rows["psld"]
    assert psld["sim_it_s"] == psld["sim_median_it_s"] and len(psld["sim_seed_it_s"]) == psld["sim_seeds"]
    assert psld["sim_min_it_s"] <= psld["sim_it_s"] <= psld["sim_max_it_s"]
    assert psld["sim_seed0_it_s"] == psld["sim_seed_it_s"][0]
    assert math.isfinite(results["speedup_real"]) and math.isfinite(results["speedup_sim"])
    # the pause of every reassignment was measured: PREPARE barrier plus vanilla state migration
    assert results["pauses"] and all(p["pause_s"] >= p["migration_s"] > 0 for p in results["pauses"])
    assert math.isfinite(results["max_pause_s"])
    # PSLD's run, which reassigned and migrated state, ends bit-identical to the no-reassignment reference
    assert results["params_identical"] is True
    assert results["params_sha256"] == results["reference_sha256"]
    cal = results["calibration"]
    assert cal["compute_s"] > 0 and math.isfinite(cal["link_gbps"]) and cal["sum_gbytes_per_s"] > 0
    assert len(cal["link_gbps_per_ps"]) == 2 and cal["update_gbytes_per_s"] > 0
    with (out / "table.csv").open() as f:
        assert [r["policy"] for r in csv.DictReader(f)] == ["mxnet", "psld"]
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 15 and "real_psld_iterations.parquet" in files and "calibration.json" in files
    capsys.readouterr()
    assert main(["report", "--from", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| mxnet |" in text and "| psld |" in text and "| PSLD / mxnet |" in text and "pause" in text


def test_gpu_scenario_maps_onto_the_job() -> None:
    path = Path(__file__).resolve().parents[1] / "scenarios" / "psld-real-gpu.yaml"
    job = build_job(load_scenario(path, ["real.device=cpu"]))
    assert (job.device, job.gradient, job.batch, job.mode) == ("cpu", "linear", 32, "vanilla")
    assert job.throttle == {2: 1e9 / 8} and job.cpu_throttle is None
    assert (job.servers, job.workers) == (3, 4)
    if not torch.cuda.is_available():
        with pytest.raises(InputError) as err:
            check_real(load_scenario(path))
        assert err.value.where.endswith("field real.device")


@pytest.mark.parametrize(
    ("argv", "network"),
    [
        ([], ["real.model=resnet18"]),
        (["--tiny"], ["real.model=resnet_small"]),
        (["--model", "vgg_small"], ["real.model=vgg_small"]),
        (["--model", "none"], []),  # the linear-gradient stand-in on the catalog model's tensors
    ],
)
def test_the_gpu_case_trains_a_real_network_by_default(
    argv: list[str], network: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = []

    def stop(scenario, base, *args, **kwargs):
        seen.append(base)
        raise KeyboardInterrupt  # no real run here: the overrides are what is checked

    monkeypatch.setattr(psld_gpu, "real_vs_sim", stop)
    with pytest.raises(KeyboardInterrupt):
        main(["run", "--out", str(tmp_path / "x"), "--device", "cpu", *argv])
    (base,) = seen
    assert [o for o in base if o.startswith("real.model=")] == network
    scenario = load_scenario(psld_gpu.SCENARIO, base)
    assert scenario.real.model == (network[0].partition("=")[2] if network else None)


def test_iteration_rest_is_what_neither_compute_nor_a_round_trip_covers() -> None:
    import pandas as pd

    workers, blocks, n = 2, 3, 5
    # iteration k lasts 0.1 + 0.01 k s; worker w's slowest round trip in iteration k is 0.03 + 0.001 w
    iterations = pd.DataFrame({"start_s": [float(k) for k in range(n)]})
    iterations["end_s"] = iterations["start_s"] + [0.1 + 0.01 * k for k in range(n)]
    rows = [
        (w, 0.03 + 0.001 * w if b == blocks - 1 else 0.001)
        for w in range(workers)
        for _ in range(n)
        for b in range(blocks)
    ]
    samples = pd.DataFrame(rows, columns=["worker", "raw_seconds"])
    row = psld_gpu.iteration_rest(iterations, samples, workers, compute_s=0.05, skip=2)
    assert row["iteration_s"] == pytest.approx(0.13)  # the median of iterations 2, 3 and 4
    assert row["round_trip_s"] == pytest.approx(0.0305)
    assert row["rest_s"] == pytest.approx(0.13 - 0.05 - 0.0305)
    with pytest.raises(ValueError, match="no whole iterations"):
        psld_gpu.iteration_rest(iterations, samples.iloc[1:], workers, compute_s=0.05)
