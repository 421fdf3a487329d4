"""The ``kind: pipedream`` scenario: schema, the bundled default, ``sim.pipedream.run`` and metrics."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml
from clustertwin.analysis.pipedream_metrics import pipedream_metrics
from clustertwin.scenarios.pipedream_results import check_pipedream_tables
from clustertwin.scenarios.pipedream_schema import PipeDreamScenario
from clustertwin.sim.pipedream import run
from pydantic import ValidationError

from clustertwin.errors import InputError

DEFAULT = Path(__file__).resolve().parents[1] / "scenarios" / "pipedream-default.yaml"


def scenario(**changes) -> PipeDreamScenario:
    data = yaml.safe_load(DEFAULT.read_text())
    for key, value in changes.items():
        target = data
        *path, last = key.split(".")
        for part in path:
            target = target.setdefault(part, {})
        target[last] = value
    return PipeDreamScenario.model_validate(data)


def test_default_scenario_runs_and_meets_the_table_contract():
    result = run(scenario())
    check_pipedream_tables(result)
    ops = result.tables["ops"]
    compute = ops[ops["kind"].isin(["F", "B"])]
    assert len(compute) == 2 * result.info["microbatches"] * len(result.tables["stages"])
    assert (ops["end_s"] >= ops["start_s"]).all()
    metrics = pipedream_metrics(result)
    assert metrics["throughput_samples_per_s"] > 0
    assert 0 <= metrics["bubble_fraction"] < 1
    assert metrics["peak_memory_gib_max"] <= 16.0
    assert {f"peak_memory_gib_dev{d}" for d in range(8)} <= set(metrics)


def test_same_scenario_same_event_log():
    a = run(scenario(schedule="flush", microbatches=16, **{"memory.recompute": True}))
    b = run(scenario(schedule="flush", microbatches=16, **{"memory.recompute": True}))
    pd.testing.assert_frame_equal(a.tables["ops"], b.tables["ops"])


@pytest.mark.parametrize("schedule", ["gpipe", "flush", "2bw", "interleaved"])
def test_sync_schedules_run_straight_pipelines(schedule):
    extra = {"chunks_per_device": 2} if schedule == "interleaved" else {}
    result = run(
        scenario(
            schedule=schedule,
            microbatches=8,
            microbatch_size=16,
            **{"model.profile": "resnet50", "memory.recompute": True},
            **extra,
        )
    )
    stages = result.tables["stages"]
    assert (stages["replicas"] == 1).all()
    assert len(stages) == 8 * extra.get("chunks_per_device", 1)


def test_gpipe_runs_out_of_memory_where_flush_fits():
    # GPipe stashes all m microbatches; Flush at most p − s ([Narayanan] §3.4: GPipe OOMs first).
    base = {"model.profile": "vgg16", "microbatch_size": 32, "microbatches": 32, "cluster.memory_gib": 20.0}
    run(scenario(schedule="flush", **base))
    # The memory-aware planner finds no GPipe plan that fits; without it the executor runs out of memory.
    # Either way it is bad input (the CLI exits 2) with the executor's or the planner's own message.
    with pytest.raises(InputError, match="no plan fits 20.00 GiB"):
        run(scenario(schedule="gpipe", **base))
    with pytest.raises(InputError, match="out of memory") as err:
        run(scenario(schedule="gpipe", **base, **{"planner.memory_aware": False}))
    assert "GiB" in str(err.value)


def test_data_parallel_pipelines_widen_the_all_reduce():
    one = run(scenario(schedule="flush", microbatches=8, **{"memory.recompute": True}))
    two = run(scenario(schedule="flush", microbatches=8, data_parallel=2, **{"memory.recompute": True}))
    assert two.info["simulated_devices"] == 4
    # One pipeline updates locally; two all-reduce every stage's gradients across the copies.
    assert not (one.tables["ops"]["kind"] == "allreduce").any()
    with_weights = int((two.tables["stages"]["parameter_bytes"] > 0).sum())
    assert (two.tables["ops"]["kind"] == "allreduce").sum() == with_weights > 0
    assert two.info["makespan_s"] > 0
    assert pipedream_metrics(two)["samples"] == 2 * 8 * 32


def test_heterogeneous_speeds_change_the_makespan():
    base = {"schedule": "flush", "microbatches": 8, "memory.recompute": True}
    even = run(scenario(**base))
    slow = run(scenario(**base, **{"cluster.speeds": [1.0, 1.0, 1.0, 0.25, 1.0, 1.0, 1.0, 1.0]}))
    assert slow.info["makespan_s"] > even.info["makespan_s"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"chunks_per_device": 2}, "interleaved"),
        ({"schedule": "flush", "in_flight": [2, 1]}, "in_flight"),
        ({"cluster.speeds": [1.0]}, "one value per device"),
        ({"planner.mode": "manual"}, "stages exactly when mode is manual"),
        ({"model.profile": "/no/such/graph.txt"}, "bundled model"),
        ({"colour": "red"}, "Extra inputs"),
    ],
)
def test_invalid_scenarios_are_rejected(changes, message):
    with pytest.raises(ValidationError, match=message):
        scenario(**changes)


def test_manual_stages():
    stages = [{"first": 0, "last": 30, "replicas": 7}, {"first": 31, "last": 40, "replicas": 1}]
    result = run(scenario(**{"planner.mode": "manual", "planner.stages": stages}))
    assert result.info["config"] == "7-1"


def test_run_folder_round_trip_and_plots(tmp_path):
    from clustertwin.analysis.pipedream_plots import plot_pipedream_run

    result = run(scenario(schedule="flush", microbatches=8, **{"memory.recompute": True}))
    for name, table in result.tables.items():
        table.to_parquet(tmp_path / f"{name}.parquet", index=False)
    paths = plot_pipedream_run(tmp_path)
    assert [p.name for p in paths] == ["timeline.png", "memory.png"]
    assert all(p.stat().st_size > 1000 for p in paths)


def test_entry_point_stays_a_function_after_the_runner_is_imported():
    # A submodule named like the entry point would replace it on the package after its first import.
    import importlib

    import clustertwin.sim.pipedream.runner  # noqa: F401

    from clustertwin import sim

    importlib.import_module("clustertwin.sim.pipedream.executor")
    assert callable(sim.pipedream.run) and not isinstance(sim.pipedream.run, type(importlib))
