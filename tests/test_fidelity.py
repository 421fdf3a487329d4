"""The fidelity suite (`clustertwin validate --backend cpu|gpu`): its table, resuming, and the arguments."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from clustertwin import fidelity, kinds
from clustertwin.cli import main
from clustertwin.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
FLEXRR = ROOT / "scenarios" / "validation" / "flexrr-real-cpu.yaml"
GPU_RESULTS = ROOT / "tests" / "fixtures" / "gpu-suite"  # the GPU suite's tables, from results/
# A real run of a few seconds: one machine of 2 workers (3 processes with its PS shard, each importing
# torch), 2 iterations of 40 items at 0.25 s each.
TINY = [
    "cluster={machines: 1, workers_per_machine: 2}",
    "iterations=2",
    "items_per_worker=40",
    "iteration_s=0.25",
    "rr.message_checks=4",
]


def use_flexrr(monkeypatch: pytest.MonkeyPatch, **changes) -> None:
    """Kind flexrr with its simulator or real runner replaced for the test."""
    monkeypatch.setitem(kinds.KINDS, "flexrr", replace(kinds.get_kind("flexrr"), **changes))


def write_suite(tmp_path: Path, cases: list[dict], backend: str = "cpu") -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(json.dumps({backend: cases}))  # JSON is YAML
    return path


def flexrr_case(name: str, mode: str, metrics=("time_per_iteration_s", "makespan_s")) -> dict:
    return {
        "name": name,
        "scenario": str(FLEXRR),
        "overrides": [*TINY, f"mode={mode}"],
        "metrics": list(metrics),
    }


def suite_args(suite: Path, out: Path, *extra: str) -> list[str]:
    return ["validate", "--backend", "cpu", "--suite", str(suite), "--out", str(out), "--quiet", *extra]


def rows_of(out: Path) -> list[dict]:
    return json.loads((out / fidelity.TABLE_JSON).read_text())["rows"]


def test_suite_compares_real_and_sim_then_skips_finished_cases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    suite = write_suite(tmp_path, [flexrr_case("flexrr-bsp", "bsp")])
    out = tmp_path / "out"
    assert main(suite_args(suite, out)) == 0
    printed = capsys.readouterr().out
    assert "time_per_iteration_s" in printed and str(out / fidelity.TABLE_MD) in printed

    rows = rows_of(out)
    assert [(r["kind"], r["case"], r["metric"]) for r in rows] == [
        ("flexrr", "flexrr-bsp", "time_per_iteration_s"),
        ("flexrr", "flexrr-bsp", "makespan_s"),
    ]
    for row in rows:
        assert all(math.isfinite(row[key]) for key in ("sim", "real", "error"))
        assert row["error"] == pytest.approx((row["sim"] - row["real"]) / row["real"])
        assert row["note"] == ""
    makespan = rows[1]
    # Two iterations of at least 0.25 s each, and the real run was really run (and wrote its folder).
    assert makespan["real"] >= 0.5 and makespan["sim"] >= 0.5
    real_summary = json.loads((out / "cases" / "flexrr-bsp" / "real" / "summary.json").read_text())
    assert real_summary["backend"] == "real" and real_summary["metrics"]["makespan_s"] == makespan["real"]
    assert "| flexrr | flexrr-real-cpu (" in (out / fidelity.TABLE_MD).read_text()

    # A rerun skips the finished case: nothing runs (both executors would crash) and the table stays.
    def crash(*args, **kwargs):
        raise RuntimeError("boom: should not have run")

    use_flexrr(monkeypatch, simulate=crash, run_real=crash)
    result = out / "cases" / "flexrr-bsp" / fidelity.RESULT
    before = result.read_text()
    assert main(suite_args(suite, out)) == 0
    assert result.read_text() == before and rows_of(out) == rows

    # A changed entry is not "finished": it runs again, here crashes, and the suite exits 1 naming it.
    suite = write_suite(tmp_path, [flexrr_case("flexrr-bsp", "bsp", metrics=["makespan_s"])])
    assert main(suite_args(suite, out)) == 1
    err = capsys.readouterr().err
    assert "error: case flexrr-bsp: RuntimeError: boom" in err
    assert result.read_text() == before  # the earlier result is kept, not half-overwritten
    assert "boom" in (out / "cases" / "flexrr-bsp" / "error.txt").read_text()
    assert json.loads((out / fidelity.TABLE_JSON).read_text())["failures"] == {
        "flexrr-bsp": "RuntimeError: boom: should not have run"
    }


def test_a_kind_without_real_backend_is_reported_not_crashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    simulate = kinds.get_kind("flexrr").simulate
    calls = []

    def counted(scenario, progress):
        calls.append(scenario.name)
        return simulate(scenario, progress)

    use_flexrr(monkeypatch, simulate=counted, run_real=None)
    suite = write_suite(tmp_path, [flexrr_case("later", "flexrr", metrics=["makespan_s"])])
    out = tmp_path / "out"
    assert main(suite_args(suite, out)) == 0
    (row,) = rows_of(out)
    assert row["note"] == fidelity.NO_REAL_BACKEND
    assert row["sim"] > 0 and row["real"] is None and row["error"] is None
    assert "no real backend" in capsys.readouterr().out
    # Not kept as finished: the next run runs the case again (the kind may have a backend by then).
    assert main(suite_args(suite, out)) == 0
    assert calls == ["flexrr-real-cpu", "flexrr-real-cpu"]


def test_gpu_suite_reads_an_existing_experiment_folder(tmp_path: Path, capsys) -> None:
    out = tmp_path / "gpu"
    argv = ["validate", "--backend", "gpu", "--from", str(GPU_RESULTS), "--out", str(out), "--quiet"]
    assert main(argv) == 0
    every = rows_of(out)
    rows = {r["metric"]: r for r in every if r["case"] == "gavel-las-gpu"}
    assert set(rows) == {"avg_jct_s", "makespan_s", "utilisation"}
    assert rows["avg_jct_s"]["error"] == pytest.approx(-0.0074, abs=5e-4)
    assert rows["makespan_s"]["error"] == pytest.approx(-0.0249, abs=5e-4)
    assert rows["makespan_s"]["real"] == pytest.approx(897.3, abs=0.1)
    assert "-0.7%" in (out / fidelity.TABLE_MD).read_text()
    # The other experiments' rows come from their results.csv, one per configuration and metric.
    flexrr = pd.read_csv(GPU_RESULTS / "flexrr-gpu" / "results.csv").set_index("mode")
    got = {r["metric"]: r for r in every if r["case"] == "flexrr-gpu"}
    assert set(got) == {f"mode={m} time_per_iteration_s" for m in flexrr.index}
    row = got["mode=flexrr time_per_iteration_s"]
    assert row["real"] == pytest.approx(flexrr.loc["flexrr", "real_time_per_iteration_s"])
    assert row["error"] == pytest.approx(flexrr.loc["flexrr", "sim_rel_error"])
    pipedream = [r for r in every if r["case"] == "pipedream-gpu"]
    assert len(pipedream) == 2 * len(pd.read_csv(GPU_RESULTS / "pipedream-gpu" / "results.csv"))

    empty = tmp_path / "empty"
    empty.mkdir()
    argv = ["validate", "--backend", "gpu", "--from", str(empty), "--out", str(tmp_path / "gpu2"), "--quiet"]
    assert main(argv) == 2
    assert "no finished real run of policy las" in capsys.readouterr().err


def test_bundled_suite_lists_the_cases() -> None:
    cpu = fidelity.load_suite(fidelity.SUITE, "cpu")
    assert {c.kind for c in cpu} == {"gavel", "flexrr", "psld", "pipedream", "spot"}
    assert len({c.name for c in cpu}) == len(cpu)
    (pipedream,) = [c for c in cpu if c.kind == "pipedream"]
    assert pipedream.runner == "experiment" and pipedream.args == ("--device", "cpu", "--gpus", "2")
    assert {c.runner for c in cpu if c.kind == "spot"} == {"prediction"}
    assert all(c.scenario.real is not None for c in cpu if c.kind == "spot")
    assert [c.scenario.mode for c in cpu if c.kind == "flexrr"] == ["bsp", "flexrr"]
    assert [c.scenario.policy for c in cpu if c.kind == "psld"] == ["mxnet", "psld"]
    gpu = {c.name: c for c in fidelity.load_suite(fidelity.SUITE, "gpu")}
    assert gpu["gavel-las-gpu"].runner == "gavel_gpu_experiment"
    assert gpu["gavel-las-gpu"].scenario.policy.name == "las"
    assert {c.experiment for c in gpu.values() if c.runner == "experiment"} >= {
        "flexrr_gpu",
        "pipedream_gpu",
    }


def test_an_unknown_gpu_experiment_or_metric_is_refused(tmp_path: Path) -> None:
    base = "  - {name: x, scenario: %s, runner: experiment, experiment: %s, metrics: [%s]}\n"
    for experiment, metric, field in [
        ("nope", "time_per_iteration_s", "experiment"),
        ("flexrr_gpu", "jct", "metrics"),
    ]:
        suite = tmp_path / f"{experiment}-{metric}.yaml"
        suite.write_text("gpu:\n" + base % (FLEXRR, experiment, metric))
        with pytest.raises(InputError, match=f"gpu.0.{field}"):
            fidelity.load_suite(suite, "gpu")


@pytest.mark.parametrize("path", [FLEXRR, ROOT / "scenarios" / "gavel-real-cpu.yaml"])
def test_validate_scenario_still_prints_ok(path: Path, capsys) -> None:
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().out == "ok\n"
    assert main(["validate", str(path), "--set", "seed=-1"]) == 2
    assert "field seed" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["validate"], "give either SCENARIO (check a scenario file) or --backend cpu|gpu"),
        (["validate", str(FLEXRR), "--backend", "cpu"], "not both"),
        (["validate", str(FLEXRR), "--backend"], "not both"),
        (["validate", str(FLEXRR), "--out", "x"], "--out only go with --backend"),
        (["validate", "--backend", "cpu", "--set", "seed=1"], "--set applies to SCENARIO"),
        (
            ["validate", "--backend", "cpu", "--from", "."],
            "reading an existing results folder is for --backend gpu",
        ),
    ],
)
def test_validate_needs_exactly_one_of_scenario_or_backend(
    argv: list[str], expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: validate") or err.startswith("error: --from")
    assert expected in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("cases", "expected"),
    [
        (
            [{"name": "a", "scenario": str(FLEXRR), "metrics": ["makespan_s"], "extra": 1}],
            "field cpu.0.extra",
        ),
        ([{"name": "a b", "scenario": str(FLEXRR), "metrics": ["makespan_s"]}], "field cpu.0.name"),
        ([{"name": "a", "scenario": str(FLEXRR), "metrics": []}], "field cpu.0.metrics"),
        ([flexrr_case("a", "bsp"), flexrr_case("a", "flexrr")], "case names must be unique: a"),
        (
            [{"name": "a", "scenario": str(FLEXRR), "overrides": ["mode=fast"], "metrics": ["x"]}],
            "field mode",
        ),
        ([{"name": "a", "scenario": "nowhere.yaml", "metrics": ["x"]}], "cannot read the scenario file"),
    ],
)
def test_a_bad_suite_file_stops_before_anything_runs(
    cases: list[dict], expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    use_flexrr(monkeypatch, simulate=lambda *a, **k: pytest.fail("ran"))
    out = tmp_path / "out"
    assert main(suite_args(write_suite(tmp_path, cases), out)) == 2
    assert expected in capsys.readouterr().err
    assert not out.exists()


def test_an_unknown_metric_is_named_after_the_quick_simulation(tmp_path: Path, capsys) -> None:
    suite = write_suite(tmp_path, [flexrr_case("a", "bsp", metrics=["makespan_s", "jct_s"])])
    assert main(suite_args(suite, tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert "case a: field metrics: no metric jct_s for kind flexrr" in err and "time_per_iteration_s" in err
    assert not (tmp_path / "out" / "cases" / "a" / "real").exists()  # the real run never started


def test_an_output_folder_that_is_not_a_suite_is_refused(tmp_path: Path, capsys) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious")
    suite = write_suite(tmp_path, [flexrr_case("a", "bsp")])
    assert main(suite_args(suite, mine)) == 2
    assert "holds no validation results" in capsys.readouterr().err
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


@pytest.mark.slow
def test_full_cpu_suite(tmp_path: Path) -> None:
    """The bundled CPU suite end to end (about 4 minutes on 2 cores)."""
    out = tmp_path / "cpu"
    assert main(["validate", "--backend", "cpu", "--out", str(out), "--quiet"]) == 0
    rows = rows_of(out)
    assert [(r["case"], r["metric"]) for r in rows] == [
        ("gavel-las", "avg_jct_s"), ("gavel-las", "makespan_s"), ("gavel-las", "utilisation"),
        ("flexrr-bsp", "time_per_iteration_s"), ("flexrr-bsp", "makespan_s"),
        ("flexrr-flexrr", "time_per_iteration_s"), ("flexrr-flexrr", "makespan_s"),
    ]  # fmt: skip
    for row in rows:
        assert all(math.isfinite(row[key]) for key in ("sim", "real", "error")), row


def test_gpu_suite_without_from_runs_the_experiment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU here: the experiment is replaced by one that 'produces' the bundled run's folders."""
    import shutil

    calls = []

    def experiment(step: str, flag: str, work: str, *rest: str) -> None:
        calls.append((step, *rest))
        if step == "run":
            policy = rest[rest.index("--policies") + 1]
            Path(work).mkdir(parents=True, exist_ok=True)
            (Path(work) / "policy").write_text(policy)
        policy = (Path(work) / "policy").read_text()
        folder = f"real-{policy}" if step == "run" else f"compare-{policy}"
        shutil.copytree(GPU_RESULTS / f"gavel-{policy}-gpu" / folder, Path(work) / folder)

    def script(name: str, step: str, flag: str, work: str) -> None:
        calls.append((name, step))
        case = {"flexrr_gpu": "flexrr-gpu", "pipedream_gpu": "pipedream-gpu", "psld_gpu": "psld-gpu"}[name]
        shutil.copytree(GPU_RESULTS / case, work)

    monkeypatch.setattr(fidelity, "_experiment", experiment)
    monkeypatch.setattr(fidelity, "_experiment_module", script)
    out = tmp_path / "gpu"
    assert main(["validate", "--backend", "gpu", "--out", str(out), "--quiet"]) == 0
    gavel = [("run", "--policies", "las"), ("compare",), ("run", "--policies", "ftf"), ("compare",)]
    assert calls[:4] == gavel
    assert {("flexrr_gpu", "run"), ("pipedream_gpu", "run"), ("psld_gpu", "run")} <= set(calls)
    assert (out / "cases" / "gavel-las-gpu" / "work" / "real-las" / "summary.json").is_file()
    errors = [r["error"] for r in rows_of(out) if r["case"] == "gavel-las-gpu"]
    assert errors == pytest.approx([-0.0074, -0.0249, 0.0059], abs=5e-4)
    errors = [r["error"] for r in rows_of(out) if r["case"] == "gavel-ftf-gpu"]
    assert errors == pytest.approx([0.0337, -0.0409, 0.1040], abs=5e-4)


def test_a_prediction_case_compares_each_metric_with_its_predicted_twin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (case,) = [c for c in fidelity.load_suite(fidelity.SUITE, "cpu") if c.name == "spot-agileml"]
    measured = {"final_clock": 500.0, "predicted_final_clock": 450.0, "lost_clocks": 4.0}
    measured |= {"predicted_lost_clocks": 2.0, "recover_s": 0.5, "predicted_recover_s": 0.25}
    monkeypatch.setattr(fidelity, "_run_and_write", lambda *args: measured)
    record = fidelity._run_with_prediction(case, tmp_path, lambda f, t: None)
    rows = {r["metric"]: r for r in record["rows"]}
    assert rows["final_clock"] == {"metric": "final_clock", "sim": 450.0, "real": 500.0, "error": -0.1}
    assert rows["lost_clocks"]["error"] == pytest.approx(-0.5)
    monkeypatch.setattr(fidelity, "_run_and_write", lambda *args: {"final_clock": 1.0})
    with pytest.raises(InputError, match="no metric and prediction pair for final_clock"):
        fidelity._run_with_prediction(case, tmp_path, lambda f, t: None)
