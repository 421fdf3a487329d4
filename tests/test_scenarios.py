"""Scenario loading: the bundled default, --set overrides, path resolution and error messages."""

from __future__ import annotations

from pathlib import Path

import pytest
from clustertwin.scenarios.gavel_schema import Scenario
from clustertwin.scenarios.load import DEFAULT_SCENARIO, load_scenario, scenario_to_dict
from hypothesis import given, settings
from hypothesis import strategies as st

from clustertwin.errors import InputError

MINIMAL = """\
name: small
kind: gavel
cluster:
  gpus: {v100: 4, k80: 8}
workload:
  generate: {num_jobs: 20}
policy:
  name: las
"""


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(path: Path | None, overrides: list[str] | tuple[str, ...] = ()) -> str:
    with pytest.raises(InputError) as caught:
        load_scenario(path, overrides)
    return str(caught.value)


def test_default_scenario_is_the_papers_cluster_with_a_small_workload() -> None:
    scenario = load_scenario(None)
    assert scenario.kind == "gavel"
    assert scenario.cluster.gpus == {"v100": 36, "p100": 36, "k80": 36}
    assert scenario.cluster.servers() == {"v100": 9, "p100": 9, "k80": 9}
    assert scenario.workload.generate is not None and scenario.workload.generate.num_jobs == "auto"
    assert scenario.workload.generate.jobs_per_hour == 4.0
    assert scenario.workload.window == (50, 250)
    assert (scenario.policy.name, scenario.policy.params) == ("las", {"aware": True})
    assert scenario.mechanism.round_s == 360.0


def test_defaults_fill_omitted_sections(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, MINIMAL))
    assert scenario.seed == 0
    assert scenario.throughputs == "simulation"
    assert scenario.cluster.server_size("k80") == 4
    assert scenario.mechanism.min_reset_interval_s == 1920.0
    assert scenario.workload.window is None


def test_overrides_parse_values_as_yaml() -> None:
    scenario = load_scenario(
        None,
        ["policy.params.aware=false", "cluster.gpus.v100=8", "seed=7", "workload.window=[0, 100]",
         "cluster.gpus_per_server={v100: 8, p100: 4, k80: 4}"],
    )  # fmt: skip
    assert scenario.policy.params == {"aware": False}
    assert scenario.cluster.gpus["v100"] == 8
    assert scenario.cluster.servers()["v100"] == 1
    assert scenario.seed == 7
    assert scenario.workload.window == (0, 100)


def test_override_creates_missing_mappings(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, MINIMAL), ["policy.params.aware=true"])
    assert scenario.policy.params == {"aware": True}


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=-50, max_value=200))
def test_gpu_count_override_accepted_exactly_when_whole_servers(count: int) -> None:
    if count >= 0 and count % 4 == 0:
        assert load_scenario(None, [f"cluster.gpus.k80={count}"]).cluster.gpus["k80"] == count
    else:
        message = error_of(None, [f"cluster.gpus.k80={count}"])
        assert f"--set cluster.gpus.k80={count}" in message
        assert "cluster" in message


def test_trace_path_is_relative_to_the_scenario_file(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "t.trace").write_text("")
    text = MINIMAL.replace("generate: {num_jobs: 20}", "trace: traces/t.trace")
    scenario = load_scenario(write(tmp_path, text))
    assert scenario.workload.trace == str((tmp_path / "traces" / "t.trace").resolve())


def test_override_path_is_relative_to_the_working_directory(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "here.trace").write_text("")
    monkeypatch.chdir(tmp_path)
    scenario = load_scenario(None, ["workload.generate=null", "workload.trace=here.trace"])
    assert scenario.workload.trace == str((tmp_path / "here.trace").resolve())


def test_missing_trace_names_field_and_resolved_path(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL.replace("generate: {num_jobs: 20}", "trace: nowhere.trace"))
    message = error_of(path)
    assert f"{path}:6: field workload.trace" in message
    assert str(tmp_path / "nowhere.trace") in message


def test_malformed_yaml_names_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "name: x\ncluster:\n  gpus: {v100: 4\n")
    message = error_of(path)
    assert message.startswith(f"{path}:4:1: malformed YAML")


def test_unknown_field_names_line_and_allowed_fields(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL.replace("  gpus:", "  gpu_count: 3\n  gpus:"))
    message = error_of(path)
    assert f"{path}:4: field cluster.gpu_count: unknown field 'gpu_count'" in message
    assert "allowed fields here: gpus, gpus_per_server, prices" in message


def test_bad_value_names_its_line_and_the_value(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL.replace("v100: 4", "v100: many"))
    message = error_of(path)
    assert f"{path}:4: field cluster.gpus.v100: Input should be a valid integer (got 'many')" == message


def test_yaml_booleans_are_not_numbers(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL.replace("num_jobs: 20", "num_jobs: yes"))
    assert "field workload.generate.num_jobs" in error_of(path)


def test_missing_field_points_at_its_parent(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL.replace("policy:\n  name: las\n", "policy:\n  params: {}\n"))
    assert f"{path}:7: field policy.name: required field is missing" == error_of(path)


def test_duplicate_key_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "seed: 1\nseed: 2\n")
    assert f"{path}:10: field seed: appears twice" == error_of(path)


def test_several_problems_are_all_listed(tmp_path: Path) -> None:
    path = write(
        tmp_path, MINIMAL.replace("v100: 4", "v100: -4").replace("name: small", "name: small\nseed: -1")
    )
    message = error_of(path)
    assert "2 problems" in message
    assert f"{path}:2: field seed" in message
    assert f"{path}:5: field cluster.gpus.v100" in message


@pytest.mark.parametrize(
    ("kind", "expected"), [("kind: flexxr", "got 'flexxr'"), ("", "required field is missing")]
)
def test_unknown_or_missing_kind_names_the_kinds(tmp_path: Path, kind: str, expected: str) -> None:
    path = write(tmp_path, MINIMAL.replace("kind: gavel", kind))
    message = error_of(path)
    assert "field kind: expected one of gavel, flexrr, pipedream, spot" in message and expected in message


@pytest.mark.parametrize("kind", ["flexrr", "pipedream", "spot"])
def test_every_kind_reports_errors_with_file_line_and_allowed_fields(tmp_path: Path, kind: str) -> None:
    path = write(tmp_path, f"name: x\nkind: {kind}\nbogus: 1\n")
    message = error_of(path)
    assert message.startswith(
        f"{path}:3: field bogus: unknown field 'bogus'; allowed fields here: name, kind"
    )


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("cluster.gpus.v100", "expected key.sub=value"),
        ("cluster..v100=3", "expected key.sub=value"),
        ("cluster.gpus.v100=[1,", "the value is not valid YAML"),
        ("seed.offset=1", "seed is 0, not a mapping"),
        ("cluster.gpus.v100=-8", "field cluster.gpus.v100: Input should be greater than or equal to 0"),
        ("mechanism.round_s=fast", "field mechanism.round_s: Input should be a valid number"),
        (
            "cluster.gpus_per_server=x",
            "field cluster.gpus_per_server: Input should be a valid integer (got 'x')",
        ),
    ],
)
def test_bad_override_is_named(override: str, expected: str) -> None:
    message = error_of(None, [override])
    assert f"--set {override}" in message
    assert expected in message


def test_model_rule_broken_by_override_names_file_line_and_override() -> None:
    message = error_of(None, ["workload.generate=null"])
    assert message.startswith(f"{DEFAULT_SCENARIO}:")
    assert "field workload: give exactly one of trace" in message
    assert "(after --set workload.generate=null)" in message


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["cluster.gpus={v100: 0, p100: 0, k80: 0}"], "at least one worker type needs GPUs"),
        (["cluster.gpus.v100=6"], "gpus.v100=6 is not a multiple of gpus_per_server=4"),
        (["cluster.prices={v100: 1.0}"], "prices must give one price per worker type"),
        (["cluster.gpus_per_server={v100: 4}"], "gpus_per_server must name exactly the worker types"),
        (["workload.window=[250, 50]"], "window [250, 50) is empty"),
        (["workload.generate.num_jobs=300", "workload.window=[0, 400]"], "generate makes only 300 jobs"),
        (["name=has space"], "field name: String should match pattern"),
        (["throughputs=measured.json"], "expected simulation or physical or a throughput JSON file"),
    ],
)
def test_consistency_rules(overrides: list[str], expected: str) -> None:
    assert expected in error_of(None, overrides)


def test_unreadable_file_is_an_input_error(tmp_path: Path) -> None:
    assert "cannot read the scenario file" in error_of(tmp_path / "absent.yaml")


def test_a_file_that_is_not_utf8_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: a\nkind: gavel\n# caf\u00e9\n".encode("latin-1"))
    assert error_of(path) == f"{path}:3: not UTF-8 text (byte 0xe9); save the file as UTF-8"


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    assert "a scenario is a mapping of fields" in error_of(write(tmp_path, "- a\n- b\n"))


def test_scenario_dict_round_trips() -> None:
    scenario = load_scenario(None, ["cluster.gpus_per_server={v100: 4, p100: 4, k80: 2}"])
    data = scenario_to_dict(scenario)
    assert data["workload"]["window"] == [50, 250]
    again = Scenario.model_validate(data)
    assert scenario_to_dict(again) == data and again.cluster == scenario.cluster
    assert scenario.source == str(DEFAULT_SCENARIO)


@pytest.mark.parametrize(
    ("scenario", "override", "field", "known"),
    [
        ("psld", "policy=nope", "policy", "byteps, mxnet, psld, psld_noexplore, strawman, tensorflow"),
        ("flexrr", "mode=nope", "mode", "bsp, bsp_rr, flexrr, ssp"),
        (
            "flexrr",
            "stragglers.model=nope",
            "stragglers.model",
            "disrupted_machine, none, power_law, slow_worker, trace, uneven",
        ),
    ],
)
def test_registry_fields_list_the_known_names(scenario: str, override: str, field: str, known: str) -> None:
    message = error_of(Path(f"scenarios/{scenario}-default.yaml"), [override])
    assert f"field {field}:" in message and "'nope'" in message and f"known: {known}" in message


def test_a_registered_placement_policy_runs_without_touching_an_executor() -> None:
    from clustertwin.policies.psld.policies import PLACEMENT, Placement
    from clustertwin.sim.psld import run

    @PLACEMENT.register("all_on_first")
    class AllOnFirst(Placement):
        """Every block on the first PS."""

        def layout(self, tensors, servers, block_bytes, rng, small):  # type: ignore[no-untyped-def]
            blocks, _ = PLACEMENT.get("psld")().layout(tensors, servers, block_bytes, rng, small)
            return blocks, [servers[0]] * len(blocks)

    try:
        scenario = load_scenario(
            Path("scenarios/psld-default.yaml"), ["policy=all_on_first", "duration_s=5", "warmup_s=1"]
        )
        loads = run(scenario).tables["loads"]
        assert set(loads[loads["bytes"] > 0]["server"]) == {0}
    finally:
        PLACEMENT.unregister("all_on_first")


def test_a_registered_straggler_model_runs_without_touching_an_executor() -> None:
    from clustertwin.policies.flexrr import stragglers
    from clustertwin.policies.flexrr.straggler_models import STRAGGLERS, StragglerModel
    from clustertwin.sim.flexrr import run

    @STRAGGLERS.register("first_twice_as_slow")
    class FirstTwiceAsSlow(StragglerModel):
        """Worker 0 at half speed."""

        def profiles(self, p, times, machines, rng):  # type: ignore[no-untyped-def]
            return [stragglers.nominal(t * (2.0 if w == 0 else 1.0)) for w, t in enumerate(times)]

    try:
        base = ["mode=bsp", "iterations=3", "cluster.machines=2", "cluster.workers_per_machine=2"]
        plain = run(load_scenario(Path("scenarios/flexrr-default.yaml"), [*base, "stragglers.model=none"]))
        slowed = load_scenario(
            Path("scenarios/flexrr-default.yaml"), [*base, "stragglers.model=first_twice_as_slow"]
        )
        # BSP without reassignment waits for the slow worker every iteration: twice the makespan
        assert run(slowed).info["makespan_s"] == pytest.approx(2 * plain.info["makespan_s"], rel=0.01)
    finally:
        STRAGGLERS.unregister("first_twice_as_slow")
