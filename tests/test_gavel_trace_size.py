"""A generated continuous trace must keep jobs arriving until the measured window is done: a fixed
``num_jobs`` that ends too early is refused by name; ``num_jobs: auto`` sizes the trace from the window."""

from __future__ import annotations

import pytest
from clustertwin.scenarios.load import load_scenario
from clustertwin.sim.gavel.setup import run

from clustertwin.errors import InputError

SCENARIO = """\
name: sized
kind: gavel
seed: 3
cluster:
  gpus: {v100: 2, k80: 2}
  gpus_per_server: 2
workload:
  generate: {num_jobs: NUM, jobs_per_hour: 0.15}
  window: [8, 16]
policy:
  name: las
"""


def _run(tmp_path, num_jobs: str):
    path = tmp_path / f"sized-{num_jobs}.yaml"
    path.write_text(SCENARIO.replace("NUM", num_jobs))
    return run(load_scenario(str(path), []))


def test_a_trace_that_ends_before_the_window_is_refused_by_name(tmp_path) -> None:
    with pytest.raises(InputError, match=r"field workload\.generate\.num_jobs: the last of 16 jobs arrives"):
        _run(tmp_path, "16")


def test_auto_measures_the_window_as_a_trace_long_enough(tmp_path) -> None:
    # Prefix-stable generation and a simulation that stops when the window is done make every trace that
    # outlasts the window give the same window.
    auto, long = _run(tmp_path, "auto"), _run(tmp_path, "100")
    window = auto.tables["jobs"]["in_window"]
    a = auto.tables["jobs"][window].reset_index(drop=True)
    b = long.tables["jobs"][long.tables["jobs"]["in_window"]].reset_index(drop=True)
    assert a.equals(b)
    assert auto.info["num_jobs"] < 100
    assert a["completion_s"].max() <= auto.tables["jobs"]["arrival_s"].max()


def test_an_input_error_survives_the_trip_from_a_worker_process() -> None:
    import pickle

    err = pickle.loads(pickle.dumps(InputError("scenario.yaml: field x", "bad")))
    assert (err.where, err.message, str(err)) == (
        "scenario.yaml: field x",
        "bad",
        "scenario.yaml: field x: bad",
    )
