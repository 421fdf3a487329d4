"""The command line, with a fake simulator: exit codes, messages, and what is (not) written."""

from __future__ import annotations

import io
import json
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest
from clustertwin.policies import registry as policy_registry
from clustertwin.scenarios.gavel_schema import Scenario
from rich.console import Console
from test_output import small_result

from clustertwin import kinds
from clustertwin.cli import main
from clustertwin.errors import InputError
from clustertwin.progress import progress_bar

VALID = """\
name: tiny
kind: gavel
cluster:
  gpus: {v100: 2, k80: 2}
  gpus_per_server: 2
  prices: {v100: 3.6, k80: 0.36}
workload:
  generate: {num_jobs: 5}
policy:
  name: las
"""


class FakeSim:
    """Stands in for kind gavel's simulator; optionally fails the way a real run can."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error
        self.calls: list[Scenario] = []

    def __call__(self, scenario: Scenario, progress) -> object:
        self.calls.append(scenario)
        progress(0.5, "half way")
        if self.error is not None:
            raise self.error
        return small_result()


def use_simulator(monkeypatch: pytest.MonkeyPatch, fake: FakeSim) -> None:
    # The fake stands in for the whole simulation, its preparation included.
    monkeypatch.setitem(kinds.KINDS, "gavel", replace(kinds.get_kind("gavel"), simulate=fake, prepare=None))


@pytest.fixture
def fake_sim(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeSim:
    fake = FakeSim()
    use_simulator(monkeypatch, fake)
    monkeypatch.setattr(policy_registry, "make_policy", lambda name, **params: object())
    monkeypatch.chdir(tmp_path)
    return fake


def scenario_file(tmp_path: Path, text: str = VALID) -> str:
    path = tmp_path / "tiny.yaml"
    path.write_text(text)
    return str(path)


def test_run_writes_a_complete_folder(fake_sim: FakeSim, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert main(["run", scenario_file(tmp_path), "--out", str(out), "--quiet"]) == 0
    assert capsys.readouterr().out.strip() == str(out.absolute())
    assert fake_sim.calls[0].name == "tiny"
    names = {p.name for p in out.iterdir()}
    assert {"summary.json", "jobs.parquet", "rounds.parquet", "events.parquet", "jct_cdf.png"} <= names
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scenario"]["name"] == "tiny" and summary["backend"] == "sim"
    assert summary["metrics"]["avg_jct_h"] == 2.5
    assert all(isinstance(v, int | float) for v in summary["metrics"].values())
    assert summary["run"]["wall_s"] == 0.5  # the executor's own wall time is kept


def test_run_defaults_to_bundled_scenario_and_runs_folder(fake_sim: FakeSim, tmp_path: Path, capsys) -> None:
    assert main(["run", "--set", "seed=4", "--no-plots"]) == 0
    out = tmp_path / "runs" / "gavel-default-seed4"
    assert sorted(p.name for p in out.iterdir()) == [
        "events.parquet", "jobs.parquet", "rounds.parquet", "summary.json",
    ]  # fmt: skip
    printed = capsys.readouterr().out
    assert "average JCT (window)" in printed and "2.50 h" in printed
    assert fake_sim.calls[0].seed == 4


@pytest.mark.parametrize(
    ("text", "overrides", "expected"),
    [
        ("name: tiny\ncluster: [oops\n", [], "tiny.yaml:3:1: malformed YAML"),
        (
            VALID.replace("  gpus_per_server", "  gpu_per_server"),
            [],
            "tiny.yaml:5: field cluster.gpu_per_server",
        ),
        (VALID, ["cluster.gpus.v100"], "--set cluster.gpus.v100: expected key.sub=value"),
        (VALID, ["cluster.gpus.v100=two"], "--set cluster.gpus.v100=two: field cluster.gpus.v100"),
        (VALID.replace("num_jobs: 5", "num_jobs: lots"), [], "tiny.yaml:8: field workload.generate.num_jobs"),
    ],
)
def test_bad_input_exits_2_naming_file_and_field(
    fake_sim: FakeSim, tmp_path: Path, capsys, text: str, overrides: list[str], expected: str
) -> None:
    argv = ["run", scenario_file(tmp_path, text), "--out", str(tmp_path / "out")]
    for item in overrides:
        argv += ["--set", item]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and expected in err
    assert not (tmp_path / "out").exists()
    assert fake_sim.calls == []


def test_unknown_policy_fails_before_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    fake = FakeSim()
    use_simulator(monkeypatch, fake)
    path = scenario_file(tmp_path, VALID.replace("name: las", "name: no-such-policy"))
    assert main(["run", path, "--out", str(tmp_path / "out")]) == 2
    assert f"error: {path}: field policy: unknown policy 'no-such-policy'" in capsys.readouterr().err
    assert fake.calls == [] and not (tmp_path / "out").exists()


def test_real_backend_needs_a_real_section(fake_sim: FakeSim, tmp_path: Path, capsys) -> None:
    assert main(["run", scenario_file(tmp_path), "--backend", "real"]) == 2
    assert "field real" in capsys.readouterr().err
    assert fake_sim.calls == [] and not (tmp_path / "runs").exists()


def test_output_folder_that_is_not_a_run_is_refused_before_running(
    fake_sim: FakeSim, tmp_path: Path, capsys
) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("precious")
    assert main(["run", scenario_file(tmp_path), "--out", str(tmp_path / "mine")]) == 2
    assert "not a clustertwin run" in capsys.readouterr().err
    assert fake_sim.calls == [] and (tmp_path / "mine" / "thesis.tex").read_text() == "precious"


@pytest.mark.parametrize(
    ("error", "code"), [(KeyboardInterrupt(), 130), (InputError("trace.txt:3", "bad column"), 2)]
)
def test_failures_during_the_run_write_nothing(
    monkeypatch: pytest.MonkeyPatch, fake_sim: FakeSim, tmp_path: Path, error: BaseException, code: int
) -> None:
    use_simulator(monkeypatch, FakeSim(error))
    assert main(["run", scenario_file(tmp_path), "--out", str(tmp_path / "out")]) == code
    assert not (tmp_path / "out").exists()


def test_validate(fake_sim: FakeSim, tmp_path: Path, capsys) -> None:
    path = scenario_file(tmp_path)
    assert main(["validate", path]) == 0
    assert capsys.readouterr().out == "ok\n"
    assert main(["validate", path, "--set", "mechanism.round_s=-1"]) == 2
    assert "field mechanism.round_s" in capsys.readouterr().err


def test_plot_lists_the_pngs(fake_sim: FakeSim, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    main(["run", scenario_file(tmp_path), "--out", str(out), "--no-plots", "--quiet"])
    capsys.readouterr()
    assert main(["plot", str(out)]) == 0
    listed = capsys.readouterr().out.split()
    assert listed == [str(out / n) for n in ("jct_cdf.png", "cluster_usage.png", "gpu_hours_by_job_type.png")]
    assert main(["plot", str(tmp_path)]) == 2


def test_reproduce_and_bench_dispatch(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    calls = []
    reproduce = types.SimpleNamespace(reproduce=lambda name, quick, **_: calls.append((name, quick)) or 1)
    bench = types.SimpleNamespace(bench_gavel=lambda emit: calls.append("bench") or emit("key", 1))
    monkeypatch.setitem(sys.modules, "clustertwin.reproduce", reproduce)
    monkeypatch.setitem(sys.modules, "clustertwin.bench_gavel", bench)
    assert main(["reproduce", "gavel", "--quick"]) == 1
    assert main(["bench", "gavel"]) == 0
    assert calls == [("gavel", True), "bench"]
    assert capsys.readouterr().out == "key=1\n"
    assert main(["bench", "spot"]) == 2  # a kind without a benchmark
    assert "unknown benchmark; known: gavel, flexrr, pipedream" in capsys.readouterr().err


def test_bench_scale_dispatch(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    calls = []
    bench = types.SimpleNamespace(
        bench_gavel_scale=lambda emit: calls.append("scale") or emit("scale_10k_s", 1)
    )
    monkeypatch.setitem(sys.modules, "clustertwin.bench_gavel", bench)
    assert main(["bench", "gavel", "--scale"]) == 0
    assert calls == ["scale"] and capsys.readouterr().out == "scale_10k_s=1\n"
    assert main(["bench", "flexrr", "--scale"]) == 2  # a kind without a scale benchmark
    assert "no scale benchmark" in capsys.readouterr().err


def test_progress_bar_draws_only_on_a_terminal() -> None:
    plain = io.StringIO()
    with progress_bar("work", console=Console(file=plain)) as progress:
        progress(0.5, "half")
    assert plain.getvalue() == ""
    terminal = io.StringIO()
    with progress_bar("work", console=Console(file=terminal, force_terminal=True)) as progress:
        progress(0.5, "half")
    assert "work" in terminal.getvalue()
    quiet = io.StringIO()
    with progress_bar("work", quiet=True, console=Console(file=quiet, force_terminal=True)) as progress:
        progress(1.0, "done")
    assert quiet.getvalue() == ""


NO_MEMORY_PLAN = ["--set", "schedule=2bw", "--set", "planner.memory_aware=false"]


def test_a_pipeline_that_does_not_fit_exits_2_naming_device_and_bytes(tmp_path: Path, capsys) -> None:
    # The bundled pipeline with 2BW's two weight versions and no recomputation needs > 16 GiB on stage 1
    # when the planner is told to ignore memory.
    out = tmp_path / "run"
    status = main(["run", "scenarios/pipedream-default.yaml", *NO_MEMORY_PLAN, "--out", str(out)])
    err = capsys.readouterr().err
    assert status == 2
    assert "scenarios/pipedream-default.yaml" in err and "out of memory" in err
    assert "GiB" in err and "chunk" in err
    assert not out.exists()


def test_a_spot_real_section_is_not_simulated(capsys) -> None:
    # A spot scenario's real: section is a real run whose tables carry the simulator's prediction; `run`
    # without --backend real must refuse it by name rather than simulate something else.
    status = main(["run", "scenarios/spot-real-schedule-cpu.yaml", "--out", "/nonexistent/never-written"])
    assert status == 2
    assert "field real" in capsys.readouterr().err


def test_an_unusable_output_location_exits_2_before_running(
    fake_sim: FakeSim, tmp_path: Path, capsys
) -> None:
    (tmp_path / "file").write_text("x")
    out = tmp_path / "file" / "run"
    assert main(["run", scenario_file(tmp_path), "--out", str(out)]) == 2
    assert "runs through a file" in capsys.readouterr().err
    assert fake_sim.calls == []


def test_an_os_error_on_a_given_path_is_a_message_not_a_traceback(tmp_path: Path, capsys) -> None:
    (tmp_path / "file").write_text("x")
    assert main(["report", str(tmp_path / "file" / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err


@pytest.mark.parametrize(
    ("trace", "expected"),
    [
        ("garbage line here\n", "a Gavel trace has 10 or 7"),
        ("", "trace has no jobs"),
        ("NoSuchJob (batch size 32)\tx\t.\t--max-steps\t0\t150\t1\t1\t-1\t0\n", "job type 'NoSuchJob"),
    ],
)
def test_validate_finds_what_run_would_refuse(tmp_path: Path, capsys, trace: str, expected: str) -> None:
    (tmp_path / "my.trace").write_text(trace)
    overrides = ["--set", f"workload.trace={tmp_path / 'my.trace'}", "--set", "workload.generate=null"]
    assert main(["validate", "scenarios/gavel-default.yaml", *overrides]) == 2
    assert expected in capsys.readouterr().err


def test_a_real_run_without_torch_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real_find_spec(name, *a)
    )
    status = main(["run", "scenarios/gavel-real-cpu.yaml", "--backend", "real", "--out", str(tmp_path / "r")])
    assert status == 2
    assert "pip install 'clustertwin[runtime]'" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_the_printed_summary_says_why_jobs_are_left_unfinished() -> None:
    from rich.console import Console

    summary = kinds.get_kind("gavel").summary
    console = Console(width=200, record=True)
    console.print(summary({"jobs_total": 300, "jobs_completed": 299, "avg_jct_s": 3600.0}, {}))
    text = console.export_text()
    assert "299 of 300 jobs completed" in text and "measured window" in text
    console = Console(width=200, record=True)
    console.print(summary({"jobs_total": 5, "jobs_completed": 5}, {}))
    assert "of 5 jobs" not in console.export_text()


def test_validate_refuses_a_pipeline_that_does_not_fit(capsys) -> None:
    assert main(["validate", "scenarios/pipedream-default.yaml", *NO_MEMORY_PLAN]) == 2
    assert "out of memory" in capsys.readouterr().err
    assert main(["validate", "scenarios/pipedream-default.yaml"]) == 0
