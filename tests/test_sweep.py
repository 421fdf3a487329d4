"""``clustertwin sweep``: bad input fails fast before anything runs; runs are isolated, resumable, and go
to a local Ray or to a Ray cluster given by address. Grids are tiny (a 4-GPU cluster, 6 jobs)."""

from __future__ import annotations

import importlib.util
import json
import socket
import time
from pathlib import Path

import pandas as pd
import pytest
import sweep_helpers
from sweep_helpers import CountingRunner, marks

from clustertwin.cli import main
from clustertwin.errors import InputError
from clustertwin.sweep import plan_sweep, run_sweep

TINY = """\
name: tiny
kind: gavel
cluster:
  gpus: {v100: 2, k80: 2}
  gpus_per_server: 2
workload:
  generate: {num_jobs: 6, jobs_per_hour: 2.0}
policy:
  name: las
"""

SPEC = """\
name: tiny-sweep
scenario: tiny.yaml
grid:
  policies:
    aware: [policy.params.aware=true]
    agnostic: [policy.params.aware=false]
  loads: [1.0, 4.0]
  seeds: [0, 1]
report: {x: load, series: [policy]}
"""


def write_spec(folder: Path, text: str = SPEC, name: str = "spec.yaml") -> Path:
    (folder / "tiny.yaml").write_text(TINY)
    path = folder / name
    path.write_text(text)
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---------------------------------------------------------------------------------------------------
# Planning and bad input: nothing runs, nothing is written, exit status 2


def test_plan_expands_the_grid_in_file_order(tmp_path: Path) -> None:
    plan = plan_sweep(write_spec(tmp_path))
    assert plan.columns == ["policy", "load", "seed"]
    assert len(plan.points) == 8 and len({p.key for p in plan.points}) == 8
    first = plan.points[0]
    assert first.values == {"policy": "aware", "load": 1.0, "seed": 0}
    assert first.overrides == ("policy.params.aware=true", "workload.generate.jobs_per_hour=1.0", "seed=0")
    scenario = plan.scenarios[first.key]
    assert scenario.policy.params == {"aware": True} and scenario.seed == 0
    assert scenario.workload.generate.jobs_per_hour == 1.0


def test_any_field_is_an_axis_and_set_applies_to_every_run(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        "name: s\nscenario: tiny.yaml\nset: [workload.generate.num_jobs=4]\n"
        "grid:\n  mechanism.round_s: [120, 360.5]\n  policy.name: [las, fifo]\n",
    )
    plan = plan_sweep(spec)
    assert plan.columns == ["mechanism.round_s", "policy.name"]
    assert [s.mechanism.round_s for s in plan.scenarios.values()] == [120, 120, 360.5, 360.5]
    assert {s.policy.name for s in plan.scenarios.values()} == {"las", "fifo"}
    assert all(s.workload.generate.num_jobs == 4 for s in plan.scenarios.values())


@pytest.mark.parametrize(
    ("grid", "line", "expected"),
    [
        # The last value only is bad: every point is checked before anything runs.
        ("  seeds: [0, 1]\n  workload.generate.num_jobz: [3]\n", 5, "unknown field 'num_jobz'"),
        ("  workload.generate.num_jobs: [3, 0]\n", 4, "greater than 0"),
        ("  policies:\n    a: [policy.name=las]\n    b: [policy.name=nope]\n", 6, "unknown policy 'nope'"),
        ("  policies:\n    a: [policy.params.speed=3]\n", 5, "bad parameters"),
        ("  seeds: []\n", 4, "field grid.seeds: no values, so the grid is empty"),
        ("  mechanism.round_s: []\n", 3, "grid axis 'mechanism.round_s' has no values, so the grid is empty"),
        ("  {}\n", 3, "the grid has no axes"),
        ("  loads: [fast]\n", 4, "field grid.loads.0"),
    ],
)
def test_bad_grid_is_an_input_error_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], grid: str, line: int, expected: str
) -> None:
    spec = write_spec(tmp_path, f"name: bad\nscenario: tiny.yaml\ngrid:\n{grid}")
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {spec}:") and expected in err, err
    assert f"{spec}:{line}:" in err, err
    assert not out.exists()


def test_unknown_spec_field_and_missing_scenario(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "name: s\nscenario: tiny.yaml\ngird: {seeds: [0]}\n")
    with pytest.raises(InputError, match=r"spec.yaml:3: field gird: unknown field 'gird'"):
        plan_sweep(spec)
    spec = write_spec(tmp_path, "name: s\nscenario: nope.yaml\ngrid: {seeds: [0]}\n")
    with pytest.raises(InputError, match=r"spec.yaml:2: field scenario: cannot read"):
        plan_sweep(spec)


def test_unreachable_address_fails_fast(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path)
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    assert main(["sweep", str(spec), "--out", str(tmp_path / "out"), "--address", address]) == 2
    assert time.monotonic() - started < 10
    err = capsys.readouterr().err
    assert f"error: --address {address}: no Ray cluster reachable there" in err
    assert not (tmp_path / "out").exists()
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o2"), "--address", "nonsense"]) == 2
    assert "expected HOST:PORT" in capsys.readouterr().err


def test_refuses_a_folder_of_something_else(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="not a sweep folder"):
        run_sweep(spec, tmp_path / "busy")


# ---------------------------------------------------------------------------------------------------
# Running on a local Ray: a run that kills its worker, then resuming


def test_crashed_run_is_recorded_and_rerun_resumes(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="needs the sweep extra: pip install -e '.[sweep]'")
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sweep_helpers)  # the workers cannot import tests/
    spec, out = write_spec(tmp_path), tmp_path / "out"
    first, second, third = (tmp_path / name for name in ("m1", "m2", "m3"))
    for folder in (first, second, third):
        folder.mkdir()

    # Aware runs of seed 1 kill their own worker process (2 of the 8 runs). The sweep goes on and
    # records them.
    assert run_sweep(spec, out, workers=2, quiet=True, runner=CountingRunner(first, crash_seed=1)) == 1
    assert len(marks(first)) == 8
    table = pd.read_parquet(out / "results.parquet")
    assert len(table) == 8
    crashed = (table["seed"] == 1) & (table["policy"] == "aware")
    assert set(table.loc[crashed, "status"]) == {"failed"} and set(table.loc[~crashed, "status"]) == {"ok"}
    errors = table.loc[crashed, "error"]
    assert errors.str.contains("Worker|died|crash", case=False).all(), list(errors)
    assert table.loc[~crashed, "avg_jct_h"].notna().all() and table.loc[crashed, "avg_jct_h"].isna().all()
    records = [json.loads(p.read_text()) for p in (out / "runs").glob("*.json")]
    assert len(records) == 8 and not list((out / "runs").glob(".*"))  # no temporary files left

    # A rerun redoes nothing: finished runs, ok or failed, are kept.
    assert run_sweep(spec, out, quiet=True, runner=CountingRunner(second)) == 1
    assert marks(second) == []
    # --retry-failed runs exactly the failed ones, which now succeed (one worker process is enough for two).
    assert run_sweep(spec, out, workers=1, quiet=True, retry_failed=True, runner=CountingRunner(third)) == 0
    assert marks(third) == ["seed1-True", "seed1-True"]
    table = pd.read_parquet(out / "results.parquet")
    assert len(table) == 8 and set(table["status"]) == {"ok"}
    assert table.groupby("policy")["avg_jct_h"].count().to_dict() == {"agnostic": 4, "aware": 4}


def test_without_ray_nothing_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real_find_spec(name, *a)
    )
    out = tmp_path / "out"
    assert main(["sweep", str(write_spec(tmp_path)), "--out", str(out)]) == 2
    assert "needs Ray" in capsys.readouterr().err
    assert not out.exists()
