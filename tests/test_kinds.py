"""The kind registry: a kind registered from this file (its own schema, simulator, real runner, metrics,
plot and comparison) goes through ``run``, ``plot``, ``report`` and ``compare`` like a built-in one;
``clustertwin list`` shows every kind and policy; the Python API returns what the run folder holds."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import pytest
from clustertwin.policies.registry import ALLOCATION
from clustertwin.scenarios.kinds import ScenarioBase
from clustertwin.scenarios.results import RunResult, check_contract
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pydantic import PositiveFloat, PositiveInt

import clustertwin
from clustertwin import api
from clustertwin.cli import main
from clustertwin.errors import InputError
from clustertwin.kinds import (
    KINDS,
    Compared,
    Comparison,
    KindSpec,
    get_kind,
    kinds,
    register_kind,
    unregister_kind,
)

# ------------------------------------------------------------------------------------------ a toy kind


class QueueScenario(ScenarioBase):
    """One server, Poisson arrivals, exponential service: an M/M/1 queue."""

    kind: Literal["queue"]
    customers: PositiveInt = 50
    arrivals_per_s: PositiveFloat = 1.0
    service_s: PositiveFloat = 0.5


QUEUE_TABLES = {
    "customers": {"customer": "int64", "arrival_s": "float64", "start_s": "float64", "end_s": "float64"},
    "server": {"busy_s": "float64", "idle_s": "float64"},
}


def simulate(scenario: QueueScenario, progress, stream: int = 0) -> RunResult:
    rng = np.random.default_rng([scenario.seed, stream])
    arrivals = np.cumsum(rng.exponential(1 / scenario.arrivals_per_s, scenario.customers))
    service = rng.exponential(scenario.service_s, scenario.customers)
    start, end = np.empty_like(arrivals), np.empty_like(arrivals)
    free = 0.0
    for i, (arrival, length) in enumerate(zip(arrivals, service, strict=True)):
        start[i] = max(arrival, free)
        end[i] = free = start[i] + length
        if progress is not None:
            progress((i + 1) / scenario.customers, f"customer {i}")
    customers = pd.DataFrame(
        {"customer": np.arange(scenario.customers), "arrival_s": arrivals, "start_s": start, "end_s": end}
    )
    server = pd.DataFrame({"busy_s": [service.sum()], "idle_s": [end[-1] - service.sum()]})
    return RunResult({"customers": customers, "server": server})


SNAPSHOTS: list[Path | None] = []  # where each real run was asked to keep its tables so far


def run_real(scenario: QueueScenario, progress, snapshot_dir: Path | None) -> RunResult:
    """Reality: the same queue drawn from another random stream; it keeps its tables in snapshot_dir."""
    result = simulate(scenario, progress, stream=1)
    SNAPSHOTS.append(snapshot_dir)
    if snapshot_dir is not None:
        snapshot_dir.mkdir(parents=True)
        result.tables["customers"].to_parquet(snapshot_dir / "customers.parquet")
    return result


def metrics(scenario: QueueScenario, result: RunResult) -> dict[str, float]:
    customers = result.tables["customers"]
    return {
        "mean_wait_s": float((customers["start_s"] - customers["arrival_s"]).mean()),
        "makespan_s": float(customers["end_s"].max()),
    }


def plot(run_dir: Path) -> list[Path]:
    customers = pd.read_parquet(run_dir / "customers.parquet")
    figure = Figure(figsize=(4, 3))
    FigureCanvasAgg(figure)
    figure.subplots().hist(customers["start_s"] - customers["arrival_s"], bins=20)
    path = run_dir / "waits.png"
    figure.savefig(path)
    return [path]


def compare(sim_dir: Path, real_dir: Path, out: Path) -> Compared:
    sim, real = (json.loads((d / "summary.json").read_text())["metrics"] for d in (sim_dir, real_dir))
    pairs = {name: (sim[name], real[name]) for name in ("mean_wait_s", "makespan_s")}
    headline = {f"{name}_error": (s - r) / r for name, (s, r) in pairs.items()}
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.json").write_text(json.dumps({**headline, "sim_dir": str(sim_dir)}))
    return Compared(headline, pairs)


QUEUE = KindSpec(
    name="queue",
    description="An M/M/1 queue (a worked example of a kind)",
    schema=QueueScenario,
    check_tables=lambda result: check_contract(result, QUEUE_TABLES, "queue"),
    metrics=metrics,
    simulate=simulate,
    run_real=run_real,
    plot=plot,
    comparison=Comparison(("mean_wait_s", "makespan_s"), compare),
)


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[Path]:
    """Kind ``queue`` registered for the test, and a scenario file of it."""
    register_kind(QUEUE)
    path = tmp_path / "queue.yaml"
    path.write_text("name: q\nkind: queue\nseed: 4\ncustomers: 40\n")
    yield path
    unregister_kind("queue")


def test_a_registered_kind_runs_plots_reports_and_compares(queue: Path, tmp_path: Path, capsys) -> None:
    sim, real, cmp = tmp_path / "sim", tmp_path / "real", tmp_path / "cmp"
    assert main(["validate", str(queue)]) == 0
    assert main(["run", str(queue), "--out", str(sim), "--quiet"]) == 0
    assert main(["run", str(queue), "--backend", "real", "--out", str(real), "--quiet", "--no-plots"]) == 0
    summary = json.loads((sim / "summary.json").read_text())
    assert summary["scenario"]["kind"] == "queue" and summary["tables"] == {"customers": 40, "server": 1}
    assert (sim / "waits.png").is_file() and not (real / "waits.png").exists()
    # The real run kept its tables in real.partial, removed once the complete folder was written.
    assert SNAPSHOTS[-1] == tmp_path / "real.partial" and not SNAPSHOTS[-1].exists()
    sim_wait = summary["metrics"]["mean_wait_s"]
    real_wait = json.loads((real / "summary.json").read_text())["metrics"]["mean_wait_s"]
    assert sim_wait != real_wait  # two random streams
    capsys.readouterr()

    assert main(["plot", str(real)]) == 0
    assert capsys.readouterr().out.split() == [str(real / "waits.png")]
    (sim / "waits.png").unlink()
    assert main(["report", str(sim)]) == 0  # draws the plots a --no-plots folder lacks
    page = (sim / "report.html").read_text()
    assert "mean_wait_s" in page and page.count("<img ") == 1

    assert main(["compare", str(sim), str(real), "--out", str(cmp)]) == 0
    printed = capsys.readouterr().out.splitlines()
    values = dict(line.split("=", 1) for line in printed if "=" in line)
    assert float(values["mean_wait_s_error"]) == pytest.approx((sim_wait - real_wait) / real_wait)
    assert printed[-1] == str(cmp)
    assert main(["report", str(cmp)]) == 0
    assert "mean_wait_s_error" in (cmp / "report.html").read_text()


def test_a_registered_kind_validates_through_the_loader(queue: Path, capsys) -> None:
    assert main(["validate", str(queue), "--set", "service_s=-1"]) == 2
    assert f"error: {queue}: --set service_s=-1: field service_s" in capsys.readouterr().err
    assert main(["list"]) == 0
    assert "queue" in capsys.readouterr().out
    unregister_kind("queue")
    assert main(["validate", str(queue)]) == 2
    assert "field kind: expected one of gavel, flexrr" in capsys.readouterr().err
    register_kind(QUEUE)  # for the fixture to remove


def test_registry_errors() -> None:
    with pytest.raises(ValueError, match="'gavel' registered twice"):
        register_kind(get_kind("gavel"))
    with pytest.raises(InputError, match="unknown scenario kind; known: gavel, flexrr, pipedream"):
        get_kind("nonesuch")


def test_a_kind_without_a_backend_says_so(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every built-in kind runs for real; a kind registered without a real backend must say so.
    monkeypatch.setitem(KINDS, "pipedream", dataclasses.replace(get_kind("pipedream"), run_real=None))
    assert (
        main(["run", "scenarios/pipedream-default.yaml", "--backend", "real", "--out", "/nonexistent"]) == 2
    )
    assert "--backend real is not available for kind pipedream" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ list


def test_list_shows_every_kind_and_the_gavel_policies(capsys) -> None:
    assert main(["list"]) == 0
    text = capsys.readouterr().out
    for spec in kinds():
        assert spec.name in text
    for name in ALLOCATION.names():
        assert name in text

    assert main(["list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    by_name = {kind["name"]: kind for kind in listed["kinds"]}
    assert list(by_name) == [spec.name for spec in kinds()]
    assert by_name["spot"]["simulate"] is True and by_name["spot"]["real"] is True
    assert all(by_name[spec.name]["real"] is (spec.run_real is not None) for spec in kinds())
    assert by_name["gavel"]["reproduce"] == ["gavel", "cloud"] and by_name["pipedream"]["bench"] is True
    # The families a real run draws from (models, data sets) are listed too.
    assert {"real models", "flexrr models", "flexrr data"} <= set(listed["families"])
    entries = listed["families"]["gavel allocation"]["entries"]
    assert list(entries) == ALLOCATION.names() and all(entries.values())


# ------------------------------------------------------------------------------------------ the API


def test_api_run_returns_the_tables_it_writes(tmp_path: Path) -> None:
    overrides = ["workload.generate.num_jobs=8", "workload.window=null", "seed=2"]
    output = clustertwin.run("scenarios/gavel-default.yaml", overrides=overrides, out=tmp_path / "run")
    assert output.kind == "gavel" and output.folder == (tmp_path / "run").absolute()
    summary = json.loads((output.folder / "summary.json").read_text())
    assert set(output.tables) == set(summary["tables"]) and output.metrics["jobs_completed"] > 0
    for name, table in output.tables.items():
        pd.testing.assert_frame_equal(table, pd.read_parquet(output.folder / f"{name}.parquet"))
    assert summary["metrics"] == {k: None if np.isnan(v) else v for k, v in output.metrics.items()}

    again = api.run(scenario=api.load("scenarios/gavel-default.yaml", overrides), plots=False)
    assert again.folder is None
    for name, table in output.tables.items():
        pd.testing.assert_frame_equal(again.tables[name], table)
    with pytest.raises(ValueError, match="not both"):
        api.run("scenarios/gavel-default.yaml", scenario=again.scenario)


def test_import_clustertwin_stays_light() -> None:
    code = "import sys, clustertwin; print('clustertwin.api' in sys.modules, clustertwin.run.__module__)"
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert shown.split() == ["False", "clustertwin.api"]


# Shorter than the default scenario where its run dominates the test: 20 simulated seconds of PSLD still
# give every plot and metric (a 5 s warm-up, then reports every 5 s).
SHORTER = {"psld": ["--set", "duration_s=20", "--set", "warmup_s=5"]}


@pytest.mark.parametrize("kind", ["gavel", "flexrr", "psld", "pipedream", "spot"])
def test_every_built_in_kind_plots_and_compares(kind: str, tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    command = ["run", f"scenarios/{kind}-default.yaml", "--out", str(run), "--quiet", *SHORTER.get(kind, [])]
    assert main(command) == 0
    pngs = sorted(p.name for p in run.glob("*.png"))
    assert pngs, f"kind {kind} drew no plot"
    for png in run.glob("*.png"):
        png.unlink()
    assert main(["plot", str(run)]) == 0
    assert sorted(p.name for p in run.glob("*.png")) == pngs
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in run.glob("*.png"))
    out = tmp_path / "cmp"
    assert main(["compare", str(run), str(run), "--out", str(out)]) == 0
    figures = json.loads((out / "compare.json").read_text())
    errors = [v for k, v in figures.items() if k.endswith("_error")]
    assert errors and all(e == 0.0 for e in errors)  # a run against itself: no error
    assert main(["report", str(out)]) == 0
