"""``experiments/psld_stragglers_gpu.py``: Fig. 14 on the real runtime (mxnet and PSLD at each number of
1 Gbit/s PSs, next to the calibrated simulator). The CPU ``--tiny`` run exercises the whole pipeline; the
CUDA path differs only in the workers' device."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from clustertwin.runtime.psld.run import build_job
from clustertwin.scenarios.load import load_scenario

from experiments.psld_stragglers_gpu import SCENARIO, growth, links, main, plan

TINY = ["cluster.workers=2", "cluster.servers=4", "real.device=cpu"]


def test_every_ps_gets_an_emulated_nic_the_first_k_at_1_gbit() -> None:
    job = build_job(load_scenario(SCENARIO, [*TINY, links(2, 4)]))
    assert job.throttle == {0: 1e9 / 8, 1: 1e9 / 8, 2: 10e9 / 8, 3: 10e9 / 8}


def test_plan_runs_profiling_then_both_policies_per_k() -> None:
    runs = plan(TINY, (1, 3), 2.0, 4.0, 1.0)
    assert list(runs) == ["profiling", "mxnet-k1", "psld-k1", "mxnet-k3", "psld-k3"]
    assert "stragglers=[]" in runs["profiling"]
    assert links(3, 4) in runs["psld-k3"] and "policy=psld" in runs["psld-k3"]


@pytest.mark.parametrize("ks", [(0, 1), (1, 4), ()])
def test_plan_refuses_k_that_leaves_no_fast_ps(ks: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="--k"):
        plan(TINY, ks, 2.0, 4.0, 1.0)


def test_growth_is_the_speedup_at_the_largest_k_over_the_smallest() -> None:
    rows = [
        {"policy": "mxnet", "k": 1, "real_it_s": 0.5},
        {"policy": "psld", "k": 1, "real_it_s": 2.0},
        {"policy": "mxnet", "k": 4, "real_it_s": 0.5},
        {"policy": "psld", "k": 4, "real_it_s": 1.5},
    ]
    assert growth(rows, "real") == pytest.approx({"k1": 4.0, "k4": 3.0, "growth": 0.75})


@pytest.mark.slow
def test_tiny_cpu_run_writes_the_table_and_every_speedup_row(tmp_path: Path, capsys) -> None:
    out = tmp_path / "fig14"
    assert main(["run", "--out", str(out), "--device", "cpu", "--tiny", "--seeds", "2"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["ks"] == [1, 2] and (results["workers"], results["servers"]) == (2, 4)
    rows = {(r["policy"], r["k"]): r for r in results["table"]}
    assert set(rows) == {("mxnet", 1), ("psld", 1), ("mxnet", 2), ("psld", 2)}
    for row in rows.values():
        assert row["real_it_s"] > 0 and row["sim_it_s"] > 0 and math.isfinite(row["rel_error"])
        assert row["noisy_sim_min_it_s"] <= row["noisy_sim_median_it_s"] <= row["noisy_sim_max_it_s"]
    for k in (1, 2):
        mxnet, psld = rows["mxnet", k], rows["psld", k]
        assert mxnet["real_reassignments"] == 0 and psld["real_reassignments"] >= 1
        # timing noise only perturbs what a scheduler reads: mxnet's noisy range is its one noiseless rate
        assert mxnet["noisy_sim_min_it_s"] == mxnet["noisy_sim_max_it_s"] == mxnet["sim_it_s"]
    for side in ("real", "sim", "noisy_sim_median"):
        s = results["speedup"][side]
        assert s["k2"] / s["k1"] == pytest.approx(s["growth"])
        assert s["k1"] == pytest.approx(rows["psld", 1][f"{side}_it_s"] / rows["mxnet", 1][f"{side}_it_s"])
    assert (out / "real_psld-k2_loads.parquet").exists() and (
        out / "sim_mxnet-k1_iterations.parquet"
    ).exists()
    capsys.readouterr()
    assert main(["report", "--from", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| 2 | psld |" in text and "S(2) / S(1)" in text and "| real |" in text and "(medians)" in text
    # resim recomputes the simulations from results.json alone: the noiseless ones exactly
    assert main(["resim", "--from", str(out), "--seeds", "2"]) == 0
    again = {(r["policy"], r["k"]): r for r in json.loads((out / "resim.json").read_text())["table"]}
    assert all(again[key]["sim_it_s"] == pytest.approx(row["sim_it_s"]) for key, row in rows.items())
    assert all(again[key]["real_it_s"] == row["real_it_s"] for key, row in rows.items())


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "--from", "{tmp}"],
        ["resim", "--from", "{tmp}"],
        ["resim", "--from", "{tmp}", "--seeds", "0"],
    ],
)
def test_bad_arguments_exit_2_with_a_message(tmp_path: Path, argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main([a.format(tmp=tmp_path) for a in argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "results.json" in err or "at least one simulation" in err
