"""Sim-vs-real comparison of two hand-built run folders whose errors are known exactly."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from clustertwin.analysis.compare import (
    Comparison,
    compare_runs,
    ratio_table,
    relative_error,
    write_comparison,
)
from clustertwin.analysis.gavel_metrics import gavel_metrics
from clustertwin.analysis.output import write_run
from clustertwin.scenarios.results import RunResult
from test_output import CLUSTER, small_result

from clustertwin.cli import main
from clustertwin.errors import InputError

NAN = math.nan


def write(out: Path, result: RunResult, backend: str) -> Path:
    return write_run(
        out,
        scenario={"name": "small", "cluster": {"gpus": CLUSTER}},
        seed=3,
        backend=backend,
        result=result,
        metrics=gavel_metrics(result, CLUSTER),
        plots=False,
    )


def real_result() -> RunResult:
    """small_result() as reality saw it: window jobs 1 and 2 took longer (JCT 9000 s and 12600 s
    against the simulated 7200 s and 10800 s), and window job 3, unfinished in simulation, completed.
    Job 0 completed in both but is outside the window. The rounds are unchanged: 28800 busy GPU-s."""
    result = small_result()
    result.tables["jobs"]["completion_s"] = [3000.0, 9000.0, 14400.0, 14400.0, NAN]
    return result


# Simulated: avg JCT 9000 s, makespan 12600 s, utilisation 28800 / (4 * 12600) = 4/7.
# Real (common jobs 1, 2): avg JCT 10800 s, makespan 14400 s, utilisation 28800 / (4 * 14400) = 1/2.
EXPECTED = {
    "avg_jct_error": (9000 - 10800) / 10800,
    "makespan_error": (12600 - 14400) / 14400,
    "utilisation_error": (4 / 7 - 1 / 2) / (1 / 2),
    "avg_jct_sim_s": 9000.0,
    "avg_jct_real_s": 10800.0,
    "makespan_sim_s": 12600.0,
    "makespan_real_s": 14400.0,
    "jobs_compared": 2,
    "jobs_missing_in_sim": 1,
    "jobs_missing_in_real": 0,
}


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, Path]:
    sim_dir = write(tmp_path / "sim-run", small_result(), "sim")
    return sim_dir, write(tmp_path / "real-run", real_result(), "real")


def test_errors_are_those_of_the_simulation_against_reality(runs: tuple[Path, Path]) -> None:
    c = compare_runs(*runs)
    assert c.avg_jct_error == pytest.approx(-1 / 6)
    assert c.makespan_error == pytest.approx(-0.125)
    assert c.utilisation_error == pytest.approx(1 / 7)
    assert (c.utilisation_sim, c.utilisation_real) == (pytest.approx(4 / 7), pytest.approx(0.5))
    assert c.windowed
    assert (c.jobs_missing_in_sim, c.jobs_missing_in_real) == ([3], [])
    assert c.per_job["job_id"].tolist() == [1, 2]  # job 0 is outside the window
    assert c.per_job["job_type"].tolist() == ["LSTM", "ResNet-18"]
    assert c.per_job["ratio"].tolist() == pytest.approx([9000 / 7200, 12600 / 10800])
    assert c.ratio_quantiles()["ratio_max"] == pytest.approx(1.25)


def test_without_a_window_on_both_sides_all_completed_jobs_count(tmp_path: Path) -> None:
    real = real_result()
    real.tables["jobs"]["in_window"] = False
    c = compare_runs(write(tmp_path / "s", small_result(), "sim"), write(tmp_path / "r", real, "real"))
    assert not c.windowed
    assert c.per_job["job_id"].tolist() == [0, 1, 2]
    assert c.avg_jct_sim_s == pytest.approx((3600 + 7200 + 10800) / 3)
    assert c.avg_jct_real_s == pytest.approx((3000 + 9000 + 12600) / 3)
    assert c.jobs_missing_in_sim == [3]


def test_cli_prints_key_values_and_writes_the_files(runs: tuple[Path, Path], capsys) -> None:
    sim_dir, real_dir = runs
    assert main(["compare", str(sim_dir), str(real_dir)]) == 0
    printed = capsys.readouterr().out.splitlines()
    values = dict(line.split("=", 1) for line in printed if "=" in line and " " not in line)
    for key, expected in EXPECTED.items():
        assert float(values[key]) == pytest.approx(expected), key
    assert list(values)[:8] == [
        "avg_jct_error", "makespan_error", "utilisation_error", "avg_jct_sim_s", "avg_jct_real_s",
        "makespan_sim_s", "makespan_real_s", "utilisation_sim",
    ]  # fmt: skip
    assert any("1.250" in line for line in printed)  # job 1's ratio in the table

    out = real_dir / "compare-vs-sim-run"
    assert printed[-1] == str(out)
    assert sorted(p.name for p in out.iterdir()) == ["compare.json", "jct_ratio_cdf.png", "per_job.csv"]
    figures = json.loads((out / "compare.json").read_text())
    for key, expected in EXPECTED.items():
        assert figures[key] == pytest.approx(expected), key
    assert figures["jobs_missing_in_sim_ids"] == [3] and figures["windowed"] is True
    with open(out / "per_job.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["job_id"], r["job_type"]) for r in rows] == [("1", "LSTM"), ("2", "ResNet-18")]
    assert [float(r["real_jct_s"]) / float(r["sim_jct_s"]) for r in rows] == pytest.approx(
        [float(r["ratio"]) for r in rows]
    )
    assert (out / "jct_ratio_cdf.png").read_bytes().startswith(b"\x89PNG")


def test_rerun_replaces_files_and_leaves_no_temporaries(runs: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    (out).mkdir()
    (out / "compare.json").write_text("stale")
    assert main(["compare", *map(str, runs), "--out", str(out)]) == 0
    assert main(["compare", *map(str, runs), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["compare.json", "jct_ratio_cdf.png", "per_job.csv"]
    assert json.loads((out / "compare.json").read_text())["jobs_compared"] == 2


def test_failed_write_keeps_the_old_file(runs: tuple[Path, Path], tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "cmp"
    write_comparison(compare_runs(*runs), out)
    before = (out / "per_job.csv").read_text()

    def crash(self: pd.DataFrame, path: Path, **kwargs: object) -> None:
        Path(path).write_text("half")
        raise OSError("disk full")

    monkeypatch.setattr(pd.DataFrame, "to_csv", crash)
    with pytest.raises(OSError):
        write_comparison(compare_runs(*runs), out)
    assert (out / "per_job.csv").read_text() == before
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_missing_folder_is_an_input_error(runs: tuple[Path, Path], tmp_path: Path, capsys) -> None:
    missing = tmp_path / "nope"
    assert main(["compare", str(missing), str(runs[1])]) == 2
    assert capsys.readouterr().err.startswith(f"error: {missing}: no such folder")
    not_a_run = tmp_path / "empty"
    not_a_run.mkdir()
    assert main(["compare", str(runs[0]), str(not_a_run)]) == 2
    assert f"error: {not_a_run}: not a clustertwin run folder" in capsys.readouterr().err


def test_no_common_job_names_the_folder(runs: tuple[Path, Path], tmp_path: Path) -> None:
    sim_dir, _ = runs
    nothing_done = small_result()
    nothing_done.tables["jobs"]["completion_s"] = NAN
    empty = write(tmp_path / "unfinished", nothing_done, "real")
    with pytest.raises(InputError) as caught:
        compare_runs(sim_dir, empty)
    assert caught.value.where == str(empty) and "no job in the measured window completed" in str(caught.value)

    # Both runs finished window jobs, but different ones.
    other = small_result()
    other.tables["jobs"]["completion_s"] = [3600.0, NAN, NAN, 9000.0, NAN]
    disjoint = write(tmp_path / "disjoint", other, "real")
    with pytest.raises(InputError, match=f"completed both in this run and in {sim_dir}") as caught:
        compare_runs(sim_dir, disjoint)
    assert caught.value.where == str(disjoint)


def test_different_workloads_are_refused(runs: tuple[Path, Path], tmp_path: Path) -> None:
    other = real_result()
    other.tables["jobs"]["job_type"] = ["ResNet-18", "Transformer", "ResNet-18", "A3C", "LSTM"]
    with pytest.raises(InputError, match="job 1 is 'Transformer' here but 'LSTM'"):
        compare_runs(runs[0], write(tmp_path / "other", other, "real"))


def test_output_path_that_is_a_file_is_refused(runs: tuple[Path, Path], tmp_path: Path, capsys) -> None:
    target = tmp_path / "file"
    target.write_text("mine")
    assert main(["compare", *map(str, runs), "--out", str(target)]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert target.read_text() == "mine"


def test_relative_error_has_no_value_without_a_scale() -> None:
    assert relative_error(110.0, 100.0) == pytest.approx(0.1)
    assert math.isnan(relative_error(1.0, 0.0)) and math.isnan(relative_error(NAN, 1.0))


def test_ratio_table_shows_at_most_30_jobs_furthest_from_one_first() -> None:
    n = 40
    sim = np.full(n, 100.0)
    real = sim * np.linspace(0.9, 1.1, n)
    real[7], real[30] = 300.0, 25.0  # 3x and 0.25x: the two worst
    per_job = pd.DataFrame(
        {"job_id": np.arange(n), "job_type": ["LSTM"] * n, "sim_jct_s": sim, "real_jct_s": real,
         "ratio": real / sim}
    )  # fmt: skip
    c = Comparison(Path("s"), Path("r"), per_job, True, 100.0, 100.0, 1.0, 1.0, 0.5, 0.5)
    table = ratio_table(c)
    assert table.row_count == 30
    assert list(table.columns[0].cells)[:2] == ["30", "7"]  # |log 0.25| > |log 3|
