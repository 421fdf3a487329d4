"""Metrics from hand-built event tables, the table contract, and atomic run folders."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from clustertwin.analysis import output as run_output
from clustertwin.analysis.gavel_metrics import gavel_metrics
from clustertwin.analysis.gavel_plots import plot_run
from clustertwin.analysis.output import read_run, write_run
from clustertwin.scenarios.results import RunResult, check_tables

from clustertwin.errors import InputError

NAN, INF = math.nan, math.inf
CLUSTER = {"v100": 2, "k80": 2}
PRICES = {"v100": 3.6, "k80": 0.36}


def small_result() -> RunResult:
    """Five jobs on 2 V100 + 2 K80 over three rounds (the expected metrics are worked out below)."""
    jobs = pd.DataFrame(
        {
            "job_id": np.arange(5, dtype="int64"),
            "job_type": ["ResNet-18", "LSTM", "ResNet-18", "A3C", "LSTM"],
            "scale_factor": np.array([1, 2, 1, 1, 1], dtype="int64"),
            "weight": [1.0, 1.0, 5.0, 1.0, 1.0],
            "arrival_s": [0.0, 0.0, 1800.0, 3600.0, 3600.0],
            "first_start_s": [0.0, 0.0, 3600.0, 3600.0, NAN],
            "completion_s": [3600.0, 7200.0, 12600.0, NAN, NAN],
            "total_steps": [100.0, 200.0, 300.0, 400.0, 500.0],
            "steps_done": [100.0, 200.0, 300.0, 50.0, 0.0],
            "slo_deadline_s": [INF, 5000.0, INF, 9000.0, INF],
            "in_window": [False, True, True, True, False],
        }
    )
    rounds = pd.DataFrame(
        {
            "round": np.array([0, 0, 1, 1, 1, 2], dtype="int64"),
            "start_s": [0.0, 0.0, 3600.0, 3600.0, 3600.0, 7200.0],
            "end_s": [3600.0, 3600.0, 7200.0, 7200.0, 7200.0, 12600.0],
            "job_id": np.array([0, 1, 1, 2, 3, 2], dtype="int64"),
            "worker_type": ["v100", "k80", "v100", "v100", "k80", "v100"],
            "num_gpus": np.array([1, 2, 1, 1, 1, 2], dtype="int64"),
            "consolidated": [True, False, True, True, True, True],
            "renewed": [False, False, True, False, False, True],
            "steps": [100.0, 100.0, 100.0, 100.0, 50.0, 200.0],
            "shared_with": np.array([-1, -1, 2, 1, -1, -1], dtype="int64"),
        }
    )
    events = pd.DataFrame(
        {
            "time_s": [0.0, 3600.0, 12600.0],
            "kind": ["arrival", "completion", "completion"],
            "job_id": np.array([0, 0, 2], dtype="int64"),
            "detail": ["", "", ""],
        }
    )
    return RunResult(tables={"jobs": jobs, "rounds": rounds, "events": events}, info={"wall_s": 0.5})


def test_metrics_from_hand_built_tables() -> None:
    m = gavel_metrics(small_result(), CLUSTER, PRICES)
    # Window jobs 1, 2 completed with JCT 7200 s and 10800 s; job 3 is unfinished.
    assert (m["jobs_total"], m["jobs_completed"], m["jobs_in_window"], m["jobs_window_unfinished"]) == (
        5,
        3,
        3,
        1,
    )
    assert m["avg_jct_s"] == 9000.0 and m["avg_jct_h"] == 2.5
    assert m["median_jct_s"] == 9000.0
    assert m["p90_jct_s"] == pytest.approx(10440.0)
    assert m["p99_jct_s"] == pytest.approx(10764.0)
    assert m["makespan_s"] == 12600.0
    # Busy GPU-seconds: V100 3600 + 3600 (the shared pair counted once) + 2*5400; K80 2*3600 + 3600.
    assert m["utilisation_v100"] == pytest.approx(18000 / (2 * 12600))
    assert m["utilisation_k80"] == pytest.approx(10800 / (2 * 12600))
    assert m["utilisation"] == pytest.approx(28800 / (4 * 12600))
    assert m["cost_usd"] == pytest.approx(18000 * 3.6 / 3600 + 10800 * 0.36 / 3600)
    # Job 1 finished after its deadline; job 3 was unfinished when the run ended past its deadline.
    assert m["slo_violations"] == 2
    assert m["num_rounds"] == 3


def test_metrics_without_completions_are_nan_with_the_same_keys() -> None:
    result = small_result()
    result.tables["jobs"]["completion_s"] = NAN
    m = gavel_metrics(result, CLUSTER, None)
    assert set(gavel_metrics(small_result(), CLUSTER, None)) == set(m)
    assert "cost_usd" not in m
    assert math.isnan(m["avg_jct_s"]) and math.isnan(m["makespan_s"]) and math.isnan(m["utilisation"])
    assert m["jobs_window_unfinished"] == 3


def test_check_tables_names_missing_and_mistyped_columns() -> None:
    check_tables(small_result())
    result = small_result()
    result.tables["rounds"] = result.tables["rounds"].drop(columns="shared_with")
    result.tables["jobs"]["job_id"] = result.tables["jobs"]["job_id"].astype("int32")
    del result.tables["events"]
    with pytest.raises(ValueError) as caught:
        check_tables(result)
    message = str(caught.value)
    assert "rounds.shared_with is missing" in message
    assert "jobs.job_id has dtype int32, expected int64" in message
    assert "table 'events' is missing" in message


def write(out: Path, plots: bool = False) -> Path:
    result = small_result()
    return write_run(
        out,
        scenario={"name": "small", "cluster": {"gpus": CLUSTER}},
        seed=3,
        backend="sim",
        result=result,
        metrics=gavel_metrics(result, CLUSTER, PRICES),
        plots=plots,
    )


def test_write_then_read_round_trips(tmp_path: Path) -> None:
    out = write(tmp_path / "runs" / "small-seed3", plots=True)
    assert sorted(p.name for p in out.iterdir()) == [
        "cluster_usage.png", "events.parquet", "gpu_hours_by_job_type.png", "jct_cdf.png",
        "jobs.parquet", "rounds.parquet", "summary.json",
    ]  # fmt: skip
    assert [p.name for p in out.parent.iterdir()] == ["small-seed3"]  # no staging left behind
    summary, result = read_run(out)
    assert (summary["seed"], summary["backend"], summary["run"]) == (3, "sim", {"wall_s": 0.5})
    assert summary["scenario"]["name"] == "small"
    assert {"python", "numpy", "pandas"} <= set(summary["versions"])
    assert summary["tables"] == {"jobs": 5, "rounds": 6, "events": 3}
    assert all(isinstance(v, int | float) for v in summary["metrics"].values())
    assert summary["metrics"]["avg_jct_h"] == 2.5
    for name, table in small_result().tables.items():
        pd.testing.assert_frame_equal(result.tables[name], table, check_dtype=False)
        assert list(result.tables[name].dtypes.astype(str)) == list(table.dtypes.astype(str))


def test_nan_metrics_become_json_null(tmp_path: Path) -> None:
    result = small_result()
    write_run(
        tmp_path / "r", scenario={}, seed=0, backend="sim", result=result, metrics={"x": NAN}, plots=False
    )
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["metrics"] == {"x": None}


def test_nested_metrics_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="metrics must map names to numbers"):
        write_run(
            tmp_path / "r", scenario={}, seed=0, backend="sim", result=small_result(), metrics={"x": {}}
        )
    assert not (tmp_path / "r").exists()


def fail(*args: object, **kwargs: object) -> None:
    raise RuntimeError("crash while writing")


def test_crash_while_writing_leaves_no_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_output, "plot_run", fail)
    with pytest.raises(RuntimeError):
        write(tmp_path / "run", plots=True)
    assert list(tmp_path.iterdir()) == []


def test_crash_while_replacing_keeps_the_old_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = write(tmp_path / "run")
    before = (out / "summary.json").read_text()
    monkeypatch.setattr(run_output, "plot_run", fail)
    with pytest.raises(RuntimeError):
        write(out, plots=True)
    assert (out / "summary.json").read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_failed_final_rename_restores_the_old_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = write(tmp_path / "run")
    (out / "marker").write_text("old")
    rename = Path.rename

    def flaky(self: Path, target: Path) -> Path:
        if ".writing-" in self.name:
            raise OSError("disk gone")
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", flaky)
    with pytest.raises(OSError):
        write(out)
    assert (out / "marker").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_rewrite_replaces_the_whole_folder(tmp_path: Path) -> None:
    out = write(tmp_path / "run")
    (out / "marker").write_text("old")
    write(out)
    assert not (out / "marker").exists()
    assert (out / "summary.json").is_file()


def test_refuses_to_replace_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="not a clustertwin run"):
        write(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_plot_run_recreates_pngs(tmp_path: Path) -> None:
    out = write(tmp_path / "run")
    paths = plot_run(out)
    assert [p.name for p in paths] == ["jct_cdf.png", "cluster_usage.png", "gpu_hours_by_job_type.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in paths)


def test_plot_and_read_refuse_a_folder_without_a_run(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no Gavel event tables"):
        plot_run(tmp_path)
    with pytest.raises(InputError, match="not a clustertwin run folder"):
        read_run(tmp_path)
