"""The Alibaba PAI straggler-trace loader: the bundled traces, and bad files named by file and line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from scenarios.errors import InputError
from traces.alibaba_minibatch import job_factors, trace_factors

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
