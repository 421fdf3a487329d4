"""The Alibaba PAI straggler-trace loader: the bundled traces, and bad files named by file and line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from clustertwin.traces.alibaba_minibatch import job_factors, trace_factors

from clustertwin.errors import InputError

HEADER = "worker,time,batch_time_norm\n"


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(HEADER + body)
    return path


def test_bundled_jobs_give_one_series_per_worker_around_one() -> None:
    for job in (1, 2, 3, 4):
        series = job_factors(job)
        assert len(series) == 10
        assert all(len(s) > 0 for s in series)
        assert np.median(np.concatenate(series)) == pytest.approx(1.0)


def test_series_follow_time_order_and_the_median(tmp_path: Path) -> None:
    path = write(tmp_path, "1,2,40\n0,2,20\n0,1,10\n1,1,30\n")
    assert trace_factors(path) == ((10 / 25, 20 / 25), (30 / 25, 40 / 25))


@pytest.mark.parametrize(
    ("body", "where", "message"),
    [
        ("0,1,10\n0,2,abc\n", ":3", "batch_time_norm: 'abc' is not a number"),
        ("0,1,10\n0,x,5\n", ":3", "time: 'x' is not a number"),
        ("0,1,10\n1,1,-4\n", ":3", "-4 is not a positive time"),
        ("0,1,10\n1,1,0\n", ":3", "0 is not a positive time"),
        ("0,1,10\n1.5,1,4\n", ":3", "is not a worker id"),
        ("0,1,10\n2,1,4\n", "", r"workers \[1\] have no samples"),
        ("0,1,\n", ":2", "is not a number"),
    ],
)
def test_bad_rows_name_the_line(tmp_path: Path, body: str, where: str, message: str) -> None:
    path = write(tmp_path, body)
    with pytest.raises(InputError, match=message) as err:
        trace_factors(path)
    assert err.value.where == f"{path}{where}"


def test_missing_column_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("worker,time\n0,1\n")
    with pytest.raises(InputError, match="missing columns"):
        trace_factors(path)
    with pytest.raises(InputError, match="cannot read"):
        trace_factors(tmp_path / "nope.csv")


def test_a_scenario_replays_a_user_trace_relative_to_its_file(tmp_path: Path) -> None:
    from clustertwin.scenarios.load import load_scenario
    from clustertwin.sim import run_scenario

    (tmp_path / "t.csv").write_text(HEADER + "0,1,10\n0,2,10\n1,1,30\n1,2,30\n")
    base = Path(__file__).resolve().parents[1] / "scenarios" / "flexrr-default.yaml"
    data = yaml.safe_load(base.read_text())
    data["stragglers"] = {"model": "trace", "trace_file": "t.csv"}  # in the file: relative to it
    scenario_file = tmp_path / "s.yaml"
    scenario_file.write_text(yaml.safe_dump(data))
    small = ["cluster.machines=2", "cluster.workers_per_machine=2", "iterations=3", "items_per_worker=50"]
    small += ["rr.message_checks=5", "rr.helper_group_size=2", "mode=bsp"]
    traced = load_scenario(scenario_file, small)
    assert traced.stragglers.trace_file == str(tmp_path / "t.csv")
    plain = load_scenario(base, [*small, "stragglers.model=none"])
    slow = run_scenario(traced).info["makespan_s"]
    # Trace workers 1 and 3 run at 30/20 = 1.5x the median; BSP waits for them every iteration.
    assert slow == pytest.approx(1.5 * run_scenario(plain).info["makespan_s"], rel=0.02)


def test_helper_groups_larger_than_the_cluster_are_refused() -> None:
    from clustertwin.scenarios.load import load_scenario

    base = Path(__file__).resolve().parents[1] / "scenarios" / "flexrr-default.yaml"
    too_large = "rr.helper_group_size=200 is larger than the cluster of 128 workers"
    with pytest.raises(InputError, match=too_large):
        load_scenario(base, ["rr.helper_group_size=200"])
