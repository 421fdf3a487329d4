"""``experiments/flexrr_gpu.py`` run tiny on CPU processes (gloo).

The GPU paths (``real.device: cuda``) are not exercised here; the steps are the same: profile,
calibrate, the four modes for real in one launch, the calibrated simulations, the table and the report.
"""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pandas as pd
import pytest
import torch
from clustertwin.scenarios.flexrr_setup import profiles
from clustertwin.scenarios.results import RunResult

from experiments import flexrr_gpu as fg

TINY = fg.Setup.for_device(
    "cpu",
    machines=2,
    workers_per_machine=1,
    iterations=3,
    profile_iterations=2,
    items=40,
    checks=4,
    batch=1,
    features=8,
    classes=3,
    pool=None,
    probe_round_trips=5,
)
FINITE = (
    "real_time_per_iteration_s",
    "sim_time_per_iteration_s",
    "sim_rel_error",
    "ideal_time_per_iteration_s",
    "real_vs_ideal",
    "sim_vs_ideal",
)


# The experiment runs once for the module (about 15 s on 2 cores): with the other experiments, slow.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    out = tmp_path_factory.mktemp("flexrr-gpu")
    lines: list[str] = []
    results = fg.run_experiment(TINY, out, echo=lambda line, **k: lines.append(line))
    results["echo"] = lines
    return out, results


def test_each_run_reports_as_it_ends(experiment):
    _, results = experiment
    done = [line.split(": ", 1)[1].split(" done")[0] for line in results["echo"] if " done, " in line]
    assert done == ["profile", *fg.MODES]
    scenarios = [fg.profile_scenario(TINY, 1), fg.mode_scenario(TINY, 1, "bsp", None)]
    assert all(not s.real.record_loss for s in scenarios)
    assert all("loss_per_iteration" not in info for info in results["real_info"].values())


def test_worker_table_sets_each_workers_real_time_against_the_simulation(experiment):
    out, results = experiment
    rows = results["workers"]
    assert [(r["mode"], r["worker"]) for r in rows] == [(m, w) for m in fg.MODES for w in range(TINY.workers)]
    real_it = pd.read_parquet(out / "real_iterations.parquet")
    sim_it = pd.read_parquet(out / "sim_iterations.parquet")
    for r in rows:
        for table, key in ((real_it, "real_own_s"), (sim_it, "sim_own_s")):
            t = table[(table["run"] == r["mode"]) & (table["worker"] == r["worker"])]
            assert r[key] == pytest.approx((t["own_done_s"] - t["start_s"]).median())
        assert r["real_compute_per_item_vs_profile"] > 0
        assert r["slowed"] == (r["worker"] in TINY.slow_workers)
    # the simulation runs the undelayed worker at its calibrated speed
    fast = [r for r in rows if not r["slowed"] and r["mode"] == "bsp"]
    assert all(r["sim_own_s"] == pytest.approx(r["calibrated_iteration_s"]) for r in fast)


def test_table_has_every_mode_with_finite_columns(experiment):
    out, results = experiment
    rows = {r["mode"]: r for r in results["rows"]}
    assert set(rows) == set(fg.MODES)
    for r in rows.values():
        for key in FINITE:
            assert math.isfinite(r[key]), (r["mode"], key)
        real, sim = r["real_time_per_iteration_s"], r["sim_time_per_iteration_s"]
        assert real > 0 and sim > 0
        assert r["sim_rel_error"] == pytest.approx((sim - real) / real)
    csv_rows = pd.read_csv(out / "results.csv")
    assert list(csv_rows["mode"]) == list(fg.MODES)
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) <= 15, files
    real_it = pd.read_parquet(out / "real_iterations.parquet")
    assert set(real_it["run"]) == {"profile", *fg.MODES}
    messages = pd.read_parquet(out / "real_messages.parquet")
    flexrr_msgs = messages[messages["run"] == "flexrr"]
    assert (flexrr_msgs["kind"] == "ProgressReport").any()  # the runtime now logs its messages
    assert (flexrr_msgs["arrived_s"] >= flexrr_msgs["sent_s"]).all()


def test_calibration_comes_from_the_profiling_run(experiment):
    out, results = experiment
    cal = json.loads((out / "calibration.json").read_text())
    it = pd.read_parquet(out / "real_iterations.parquet")
    prof = it[it["run"] == "profile"]
    own = (prof["own_done_s"] - prof["start_s"]).groupby(prof["worker"]).median()
    np.testing.assert_allclose(cal["iteration_s_per_worker"], own.sort_index().to_numpy())
    assert cal["latency_s"] == pytest.approx(results["profile_info"]["probe_one_way_s"])
    last_done = prof.groupby("iteration")["end_s"].max()
    later = prof[prof["iteration"] >= 1]
    gaps = later["start_s"].to_numpy() - last_done.loc[later["iteration"] - 1].to_numpy()
    assert cal["ps_sync_s"] == pytest.approx(max(0.0, gaps.mean()))
    assert results["profile_info"]["probe_round_trips"] == TINY.probe_round_trips  # one pair
    # the modes ran (and were simulated) with those parameters: Ideal is built from them
    params = fg.Calibration(**{k: cal[k] for k in ("iteration_s_per_worker", "latency_s", "ps_sync_s")})
    scenario = fg.mode_scenario(TINY, 1, "flexrr", params)
    assert [p.iteration_s for p in profiles(scenario)] == pytest.approx(cal["iteration_s_per_worker"])
    for row in results["rows"]:  # real and simulated runs saw the same calibrated Ideal
        assert set(params.overrides()) <= set(results["scenario_overrides"][row["mode"]])
        sim_ideal = row["sim_time_per_iteration_s"] / row["sim_vs_ideal"]
        assert sim_ideal == pytest.approx(row["ideal_time_per_iteration_s"])
        real_ideal = results["real_info"][row["mode"]]["ideal_s"] / TINY.iterations
        assert real_ideal == pytest.approx(row["ideal_time_per_iteration_s"])


def test_report_prints_the_table(experiment, capsys):
    out, _ = experiment
    assert fg.main(["report", "--from", str(out)]) == 0
    text = capsys.readouterr().out
    for mode in fg.MODES:
        assert f"| {mode} |" in text
    assert "FlexRR real within 20% of Ideal" in text
    assert fg.main(["report", "--from", str(out / "nowhere")]) == 2


def test_report_rebuilds_the_worker_table_of_an_older_run(experiment, tmp_path, capsys):
    out, results = experiment
    saved = json.loads((out / "results.json").read_text())
    expected = fg.markdown(saved)
    del saved["workers"]  # as written before the table existed
    (tmp_path / "results.json").write_text(json.dumps(saved))
    for name in ("real_iterations.parquet", "sim_iterations.parquet"):
        (tmp_path / name).write_bytes((out / name).read_bytes())
    assert fg.main(["report", "--from", str(tmp_path)]) == 0
    assert capsys.readouterr().out == expected
    assert "| bsp | 0 (slowed) |" in expected


def _profile_result(per_item: list[float], gap: float, iterations: int = 4) -> RunResult:
    """A synthetic BSP profile: worker w processes for per_item[w] * 10 s, then everyone waits for the
    slowest and starts ``gap`` after its completion."""
    rows, t = [], 0.0
    for k in range(iterations):
        ends = [t + 10 * p for p in per_item]
        for w in range(len(per_item)):
            rows.append((w, w % 2, k, t, ends[w], ends[w], 10, 0))
        t = max(ends) + gap
    cols = ["worker", "machine", "iteration", "start_s", "own_done_s", "end_s", "items", "items_reassigned"]
    info = {"probe_one_way_s": 0.0007, "probe_round_trips": 10, "compute_s_per_worker": "1.0,2.0"}
    return RunResult(tables={"iterations": pd.DataFrame(rows, columns=cols)}, info=info)


def test_calibrate_measures_processing_gate_and_latency():
    scenario = fg.profile_scenario(TINY, 1)
    cal = fg.calibrate(_profile_result([0.03, 0.05], gap=0.004), scenario)
    assert cal.iteration_s_per_worker == pytest.approx([0.3, 0.5])
    # worker 0 waits 0.2 s for worker 1 each iteration, but the gate delay is measured from the last
    # completion: exactly the gap
    assert cal.ps_sync_s == pytest.approx(0.004)
    assert cal.latency_s == pytest.approx(0.0007)
    assert statistics.fmean(cal.iteration_s_per_worker) == pytest.approx(0.4)
    assert set(cal.reasons) == {"iteration_s_per_worker", "latency_s", "ps_sync_s"}
    with pytest.raises(ValueError, match="round trips"):
        bad = _profile_result([0.03, 0.05], 0.004)
        bad.info.pop("probe_one_way_s")
        fg.calibrate(bad, scenario)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_tiny_experiment_on_cuda(tmp_path):
    """On a GPU host only: the same steps with ``real.device: cuda`` (float32, sized batch)."""
    setup = fg.Setup.for_device(
        "cuda", quick=True, iterations=3, profile_iterations=2, items=100, checks=10,
        target_iteration_s=0.05, probe_round_trips=5,
    )  # fmt: skip
    results = fg.run_experiment(setup, tmp_path, echo=lambda *a, **k: None)
    assert {r["mode"] for r in results["rows"]} == set(fg.MODES)
    assert all(math.isfinite(r["sim_rel_error"]) for r in results["rows"])
    assert results["real_info"]["flexrr"]["devices"].startswith("cuda:0")
