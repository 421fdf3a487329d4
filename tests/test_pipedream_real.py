"""``clustertwin run --backend real`` for ``kind: pipedream``: a real model is profiled, planned by the
scenario's planner, run on gloo processes executing the schedule's op lists, and simulated from its own
profile; the run folder's measured profile drives a simulation that ``compare`` sets against it."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from clustertwin.runtime.pipedream.distributed import boundaries  # noqa: E402
from clustertwin.runtime.pipedream.models import ModelSource, SequentialWorkload, trace_shapes  # noqa: E402
from clustertwin.scenarios.pipedream_real_section import (  # noqa: E402
    PIPEDREAM_CHUNKS_TABLE,
    PIPEDREAM_LAYERS_TABLE,
    PIPEDREAM_STAGE_TIMES_TABLE,
)
from clustertwin.scenarios.pipedream_results import PIPEDREAM_TABLES  # noqa: E402

from clustertwin import api  # noqa: E402
from clustertwin.errors import InputError  # noqa: E402
from clustertwin.kinds import get_kind  # noqa: E402
from clustertwin.pipedream_real import check  # noqa: E402
from experiments.pipedream_real_resimulate import _variants  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "pipedream-real-cpu.yaml"
# Two gloo processes, a tiny CNN, a straight pipeline: the whole path in a few seconds.
TINY = [
    "cluster.servers=1",
    "cluster.devices_per_server=2",
    "schedule=flush",
    "microbatch_size=2",
    "microbatches=4",
    "real.options={channels: [4, 8], convs_per_block: 1, image: 8, hidden: 16, fc_layers: 1, classes: 5}",
    "real.profile_iterations=1",
    "real.warmup_batches=0",
    "real.ddp_baseline=false",
]


def test_tiny_real_run_writes_the_simulations_tables_and_compares(tmp_path: Path) -> None:
    real = api.run(SCENARIO, "real", [*TINY, "real.ddp_baseline=true"], tmp_path / "real", plots=False)
    tables = real.tables
    for name, columns in PIPEDREAM_TABLES.items():
        assert set(columns) <= set(tables[name].columns), name
    assert list(tables["layers"].columns) == list(PIPEDREAM_LAYERS_TABLE)
    # Every op of the flush schedule ran once, on the device and stage the plan put it on.
    ops = tables["ops"]
    stages = tables["stages"]
    assert len(stages) == 2 and stages["replicas"].tolist() == [1, 1]
    assert len(ops) == 2 * (2 * 4 + 1)
    assert sorted(ops.loc[ops["kind"] == "F", "device"].value_counts().tolist()) == [4, 4]
    assert (ops["end_s"] >= ops["start_s"]).all()
    assert tables["stages"]["last_layer"].iloc[-1] == len(tables["layers"]) - 1
    # Every stage was also timed whole, and its simulated ops cost what it measured.
    assert list(tables["chunks"].columns) == list(PIPEDREAM_CHUNKS_TABLE)
    timed = tables["chunks"].set_index(["first_layer", "last_layer"])
    for st in stages.itertuples():
        assert timed.loc[(st.first_layer, st.last_layer), "forward_s"] > 0
    # Each rank timed its stage inside the run, alone and beside ring traffic.
    times = tables["stage_times"]
    assert list(times.columns) == list(PIPEDREAM_STAGE_TIMES_TABLE)
    mine = times[times["plan"] == "plan"]
    assert sorted(zip(mine["device"], mine["stage"], strict=True)) == [(0, 0), (1, 1)]
    assert (mine[["forward_s", "backward_s", "forward_traffic_s", "backward_traffic_s"]] > 0).all().all()
    metrics = real.metrics
    assert metrics["throughput_samples_per_s"] > 0 and metrics["own_sim_throughput_samples_per_s"] > 0
    variants = ("profile", "no_traffic", "in_run")
    assert {f"own_sim_{v}_throughput_error" for v in variants} <= set(metrics)
    # The run folder alone gives its own simulation back, variant by variant.
    [(_, measured_tput, errors), (_, ddp_tput, _)] = _variants(tmp_path / "real")
    assert ddp_tput == pytest.approx(metrics["ddp_throughput_samples_per_s"])
    assert measured_tput == pytest.approx(metrics["throughput_samples_per_s"])
    assert errors["+slowdown (own_sim)"] == pytest.approx(metrics["own_sim_throughput_error"])
    assert errors["profile"] == pytest.approx(metrics["own_sim_profile_throughput_error"])
    assert errors["in-run stage times"] == pytest.approx(metrics["own_sim_in_run_throughput_error"])
    assert metrics["peak_memory_gib_max"] > 0
    # The measured profile plans the same stages in simulation; compare reads both folders.
    measured = f"model.profile={tmp_path / 'real'}"
    sim = api.run(SCENARIO, "sim", [*TINY, measured], tmp_path / "sim", plots=False)
    assert sim.tables["stages"][["first_layer", "last_layer"]].equals(stages[["first_layer", "last_layer"]])
    # ... and costs its stages as the run timed them whole.
    for st in sim.tables["stages"].itertuples():
        assert st.forward_s == pytest.approx(timed.loc[(st.first_layer, st.last_layer), "forward_s"])
    compared = get_kind("pipedream").comparison.compare(tmp_path / "sim", tmp_path / "real", tmp_path / "cmp")
    assert set(compared.pairs) == {"throughput_samples_per_s", "peak_memory_gib_max"}
    assert compared.pairs["throughput_samples_per_s"][1] == pytest.approx(metrics["throughput_samples_per_s"])
    # Simulating the run folder with the run's own plan gives back the run's own simulation, with each
    # ingredient of the measured model switched as the run's variants switch it.
    exact = {"rel": 1e-9, "abs": 0.0}
    for key in ("makespan_s", "throughput_samples_per_s", "peak_memory_gib_max"):
        assert sim.metrics[key] == pytest.approx(metrics[f"own_sim_{key}"], **exact), key
    variants = {
        "profile": ["model.measured={rendezvous: false, transfer_slowdown: false}"],
        "no_traffic": ["model.measured.transfer_slowdown=false"],
        "in_run": ["model.measured.stage_times=in_run"],
    }
    for variant, options in variants.items():
        other = api.run(SCENARIO, "sim", [*TINY, measured, *options], tmp_path / variant, plots=False)
        error = other.metrics["throughput_samples_per_s"] / metrics["throughput_samples_per_s"] - 1.0
        assert error == pytest.approx(metrics[f"own_sim_{variant}_throughput_error"], **exact), variant
    # The cluster's links instead of the probed one change the answer (the option is honoured).
    cluster = api.run(SCENARIO, "sim", [*TINY, measured, "model.measured.link=cluster"], tmp_path / "c")
    assert cluster.metrics["makespan_s"] != pytest.approx(sim.metrics["makespan_s"], **exact)
    # The data-parallel baseline, planned by hand as the run ran it, gives back its own simulation too
    # (the probed all-reduce and the baseline's own stage times and slowdown).
    last = len(tables["layers"]) - 1
    ddp_plan = [
        "schedule=1f1b",
        "planner.mode=manual",
        f"planner.stages=[{{first: 0, last: {last}, replicas: 2}}]",
    ]
    ddp_sim = api.run(SCENARIO, "sim", [*TINY, measured, *ddp_plan], tmp_path / "ddp", plots=False)
    assert ddp_sim.metrics["throughput_samples_per_s"] == pytest.approx(
        metrics["ddp_own_sim_throughput_samples_per_s"], **exact
    )
    assert (ddp_sim.tables["ops"]["kind"] == "allreduce").any()
    # The baseline's own op table: every rank's forwards, backwards and updates, timed.
    ddp_ops = tables["ddp_ops"]
    assert list(ddp_ops.columns) == list(PIPEDREAM_TABLES["ops"])
    kinds = ddp_ops.groupby("device")["kind"].value_counts().unstack(fill_value=0)
    assert sorted(kinds.index) == [0, 1] and (kinds["F"] == kinds["B"]).all() and (kinds["F"] > 0).all()
    assert kinds["F"].sum() == (ddp_sim.tables["ops"]["kind"] == "F").sum()
    assert (ddp_ops["stage"] == 0).all() and (ddp_ops["end_s"] >= ddp_ops["start_s"]).all()
    assert ddp_ops["end_s"].max() <= 2 * kinds["F"].sum() / metrics["ddp_throughput_samples_per_s"] * 1.001


def test_measured_options_need_a_run_folder() -> None:
    with pytest.raises(InputError, match="measured"):
        api.load(SCENARIO, ["model.measured.rendezvous=false"])


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("data_parallel=2", "data_parallel"),
        ("memory.recompute=true", "memory.recompute"),
        ("memory.optimizer_factor=2", "memory.optimizer_factor"),
        ("memory.gradient_buffer=persistent", "memory.gradient_buffer"),
        ("optimizer_step_ms=1", "optimizer_step_ms"),
        ("vertical_sync=true", "vertical_sync"),
    ],
)
def test_sections_a_real_run_cannot_honour_are_refused_by_name(override: str, field: str) -> None:
    extra = ["schedule=flush"] if override.startswith("data_parallel") else []
    scenario = api.load(SCENARIO, [*extra, override])
    check(scenario, "sim")  # the simulator honours them
    with pytest.raises(InputError, match=field):
        check(scenario, "real")


def test_a_real_run_needs_its_section() -> None:
    scenario = api.load(ROOT / "scenarios" / "pipedream-default.yaml")
    with pytest.raises(InputError, match="real"):
        check(scenario, "real")


def user_model(width: int = 6) -> list[torch.nn.Module]:
    """A user's model for ``module:function``: a list of layers with differently shaped outputs."""
    return [torch.nn.Linear(4, width), torch.nn.Tanh(), torch.nn.Linear(width, 3)]


def test_a_users_model_is_cut_where_the_plan_says_with_per_boundary_shapes() -> None:
    source = ModelSource.of("tests.test_pipedream_real:user_model", {"width": 5}, 1, [4], 0)
    layers = source.layers()
    x, _ = source.microbatch(0, 2, (), 1)
    shapes, dtypes = trace_shapes(layers, x)
    assert shapes == ((2, 5), (2, 5), (2, 3))
    workload = SequentialWorkload(source, 2, ((0, 0), (1, 2)), shapes, dtypes, 1)
    assert boundaries(workload, 2) == [((2, 5), torch.float32)]
    # A chunk's weights are those of the whole model's same layers, whichever cut builds them.
    chunk = workload.chunk(1, 2, torch.device("cpu"))
    torch.testing.assert_close(chunk[1].weight, source.layers()[2].weight)
    x, y = workload.microbatch(3, torch.device("cpu"))
    assert x.shape == (2, 4) and y.shape == (2,) and int(y.max()) < 3


@pytest.mark.parametrize("name", ["gpt", "vgg", "resnet", "gnmt"])
def test_builtin_models_build_a_chain_with_a_class_dimension(name: str) -> None:
    source = ModelSource.of(name, {}, 0, None, 0)
    layers = source.layers()
    x, _ = source.microbatch(0, 2, (), 1)
    shapes, _ = trace_shapes(layers, x)
    assert len(layers) >= 3 and shapes[-1][0] == 2 and shapes[-1][-1] > 1


@pytest.mark.slow
def test_the_cpu_scenario_runs_for_real_within_two_minutes(tmp_path: Path) -> None:
    import time

    began = time.perf_counter()
    out = api.run(SCENARIO, "real", [], tmp_path / "real", plots=False)
    assert time.perf_counter() - began < 120
    assert out.metrics["ddp_throughput_samples_per_s"] > 0
    assert len(out.tables["devices"]) == 4


def test_run_measurements_are_keyed_by_a_stages_layers(tmp_path: Path) -> None:
    """A plan's stages take the run's in-run times and slowdown where their layers are a stage the run
    held, and none elsewhere; the link as probed, the plan's all-reduce before the baseline's."""
    import json

    import pandas as pd
    from clustertwin.policies.pipedream.partition import StagePlan
    from clustertwin.sim.pipedream.measured import read_run

    layers = pd.DataFrame({c: [0.0] * 4 for c in PIPEDREAM_LAYERS_TABLE})
    layers["layer"] = range(4)
    layers.to_parquet(tmp_path / "layers.parquet")
    stages = pd.DataFrame({"stage": [0, 1], "first_layer": [0, 2], "last_layer": [1, 3]})
    stages.to_parquet(tmp_path / "stages.parquet")
    rows = [  # plan, device, stage, forward, backward, forward with traffic, backward with traffic
        ("plan", 0, 0, 1.0, 2.0, 1.5, 2.0),
        ("plan", 1, 1, 4.0, 8.0, 5.0, 6.0),
        ("ddp", 0, 0, 10.0, 20.0, float("nan"), float("nan")),
        ("ddp", 1, 0, 30.0, 40.0, float("nan"), float("nan")),
    ]
    pd.DataFrame(rows, columns=list(PIPEDREAM_STAGE_TIMES_TABLE)).to_parquet(tmp_path / "stage_times.parquet")
    facts = {"link_latency_us": 5.0, "link_bandwidth_gbs": 2.0, "sync_busbw_gbs_r2": 3.0}
    facts |= {"ddp_sync_busbw_gbs_r2": 9.0, "ddp_sync_busbw_gbs_r4": 7.0}
    (tmp_path / "summary.json").write_text(json.dumps({"run": facts}))
    run = read_run(tmp_path)
    assert run.collective == ((2, 3e9), (4, 7e9))
    network = run.network()
    assert network.intra_bandwidth == network.inter_bandwidth == 2e9
    assert network.inter_latency == pytest.approx(5e-6)
    ran = (StagePlan(0, 1, 1), StagePlan(2, 3, 1))
    assert run.stage_in_run(ran) == {0: (1.0, 2.0), 1: (4.0, 8.0)}
    assert run.stage_slowdown(ran) == [(0.5, 0.0), (0.25, 0.0)]  # never below 0
    other = (StagePlan(0, 2, 1), StagePlan(3, 3, 1))
    assert run.stage_in_run(other) == {} and run.stage_slowdown(other) == [(0.0, 0.0), (0.0, 0.0)]
    whole = (StagePlan(0, 3, 2),)  # the baseline's stage: its mean over devices, no traffic measured
    assert run.stage_in_run(whole) == {0: (20.0, 30.0)} and run.stage_slowdown(whole) == [(0.0, 0.0)]
