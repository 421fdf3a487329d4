"""The fidelity suite: every algorithm's validation cases, run for real and in simulation.

``clustertwin validate --backend cpu|gpu`` reads the cases of that backend from a suite file
(``scenarios/validation/suite.yaml``), runs each one, and reports per metric the simulated value, the real
value and the relative error ``(sim - real) / real`` (``analysis.compare.relative_error``). It is a
measurement, not a gate: it exits 0 whatever the errors are, and 1 only when a case crashed.

The output folder holds ``cases/<name>/`` per case (its ``sim/`` and ``real/`` run folders, a Gavel
``compare/`` folder, and ``result.json``, written atomically the moment the case is done) and the table
of all finished cases as ``validation.json`` and ``validation.md``, rewritten after every case. A killed
suite keeps its finished cases and a rerun skips them, unless the case's entry or scenario file changed.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from rich.console import Console
from rich.table import Table

from clustertwin.atomic import write_text
from clustertwin.errors import InputError
from clustertwin.kinds.gavel import COMPARED as GAVEL_COMPARED
from clustertwin.progress import ProgressCallback, progress_bar
from clustertwin.scenarios.kinds import AnyScenario
from clustertwin.scenarios.load import load_scenario

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "scenarios" / "validation" / "suite.yaml"
GPU_EXPERIMENT = ROOT / "experiments" / "gavel_gpu_fidelity.py"
BACKENDS = ("cpu", "gpu")
RESULT = "result.json"
TABLE_JSON = "validation.json"
TABLE_MD = "validation.md"
NO_REAL_BACKEND = "no real backend"


@dataclass(frozen=True)
class Experiment:
    """A GPU experiment script (``python -m experiments.<name> run --out DIR``) whose ``DIR/results.csv``
    holds one row per configuration (``keys`` columns) with a simulated and a real column per metric."""

    keys: tuple[str, ...]
    metrics: dict[str, tuple[str, str]]  # suite metric name -> (sim column, real column)
    table: str = "results.csv"


EXPERIMENTS: dict[str, Experiment] = {
    "flexrr_gpu": Experiment(
        ("mode",), {"time_per_iteration_s": ("sim_time_per_iteration_s", "real_time_per_iteration_s")}
    ),
    "psld_gpu": Experiment(("policy",), {"iterations_per_s": ("sim_it_s", "real_it_s")}, "table.csv"),
    "pipedream_gpu": Experiment(
        ("gpus", "schedule"),
        {
            "samples_per_s": ("sim_samples_per_s", "real_samples_per_s"),
            "peak_gib": ("sim_peak_gib", "real_peak_gib"),
        },
    ),
}


class _CaseSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    scenario: str
    overrides: list[str] = Field(default_factory=list)
    metrics: list[str] = Field(min_length=1)
    runner: Literal["twin", "gavel_gpu_experiment", "experiment", "prediction"] = "twin"
    experiment: str | None = None  # runner experiment: a key of EXPERIMENTS
    args: list[str] = Field(default_factory=list)  # runner experiment: extra arguments of its `run`


class _SuiteSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cpu: list[_CaseSpec] = Field(default_factory=list)
    gpu: list[_CaseSpec] = Field(default_factory=list)


@dataclass(frozen=True)
class Case:
    """One validation case of a suite, with its scenario loaded (so it is known to be valid)."""

    name: str
    scenario_path: Path
    overrides: tuple[str, ...]
    metrics: tuple[str, ...]
    runner: str
    scenario: AnyScenario
    experiment: str | None = None
    args: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        return self.scenario.kind

    @property
    def label(self) -> str:
        """The table's scenario column: the scenario's name and its overrides (for a GPU experiment
        script, which builds its own scenarios from a base file: the script)."""
        if self.runner == "experiment":
            return " ".join([f"experiments/{self.experiment}.py", *self.args])
        extra = f" ({', '.join(self.overrides)})" if self.overrides else ""
        return f"{self.scenario.name}{extra}"

    def fingerprint(self, source: str = "") -> str:
        """Changes when the entry, its scenario file or ``source`` (where results are read from) does;
        a finished case is rerun then."""
        text = json.dumps(
            {
                "scenario": str(self.scenario_path),
                "scenario_text": self.scenario_path.read_text(encoding="utf-8"),
                "overrides": list(self.overrides),
                "metrics": list(self.metrics),
                "runner": self.runner,
                "experiment": self.experiment,
                "args": list(self.args),
                "source": source,
            },
            sort_keys=True,
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_suite(path: Path, backend: str) -> list[Case]:
    """The cases of ``backend`` in a suite file, each scenario loaded and checked; InputError otherwise."""
    path = Path(path)
    label = str(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise InputError(label, f"cannot read the suite file: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise InputError(label, f"malformed YAML: {err}") from None
    try:
        spec = _SuiteSpec.model_validate(data if data is not None else {})
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise InputError(f"{label}: field {where}", first["msg"]) from None
    entries: list[_CaseSpec] = getattr(spec, backend)
    if not entries:
        raise InputError(label, f"no cases for backend {backend!r}")
    names = [entry.name for entry in entries]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise InputError(f"{label}: field {backend}", f"case names must be unique: {', '.join(repeated)}")
    cases = []
    for i, entry in enumerate(entries):
        scenario_path = (path.parent / entry.scenario).resolve()
        scenario = load_scenario(scenario_path, entry.overrides)
        if entry.runner == "gavel_gpu_experiment":
            _check_experiment_case(entry, scenario, f"{label}: field {backend}.{i}")
        if entry.runner == "experiment":
            _check_experiment_script(entry, f"{label}: field {backend}.{i}")
        cases.append(
            Case(
                entry.name,
                scenario_path,
                tuple(entry.overrides),
                tuple(entry.metrics),
                entry.runner,
                scenario,
                entry.experiment,
                tuple(entry.args),
            )
        )
    return cases


def _check_experiment_case(entry: _CaseSpec, scenario: AnyScenario, where: str) -> None:
    if scenario.kind != "gavel":
        raise InputError(where, f"runner gavel_gpu_experiment runs Gavel scenarios, not kind {scenario.kind}")
    if any(not item.startswith("policy.") for item in entry.overrides):
        raise InputError(where, "runner gavel_gpu_experiment takes only policy.* overrides")
    if scenario.policy.name not in ("las", "ftf"):
        raise InputError(where, f"the GPU experiment runs policies las and ftf, not {scenario.policy.name}")
    unknown = [name for name in entry.metrics if name not in GAVEL_COMPARED]
    if unknown:
        raise InputError(where, f"the GPU experiment compares {', '.join(GAVEL_COMPARED)}; not {unknown}")


def _check_experiment_script(entry: _CaseSpec, where: str) -> None:
    if entry.experiment not in EXPERIMENTS:
        raise InputError(
            f"{where}.experiment",
            f"runner experiment needs one of {', '.join(EXPERIMENTS)}; got {entry.experiment}",
        )
    if entry.overrides:
        raise InputError(f"{where}.overrides", "a GPU experiment builds its own scenarios; no overrides")
    known = EXPERIMENTS[entry.experiment].metrics
    unknown = [name for name in entry.metrics if name not in known]
    if unknown:
        raise InputError(f"{where}.metrics", f"{entry.experiment} compares {', '.join(known)}; not {unknown}")


def check_out(out: Path) -> None:
    """Refuse an output folder that holds something other than an earlier suite's results."""
    if not out.exists():
        return
    if not out.is_dir():
        raise InputError(str(out), "the output path exists and is not a folder")
    if any(out.iterdir()) and not ((out / "cases").is_dir() or (out / TABLE_JSON).is_file()):
        raise InputError(
            str(out), "the output folder exists and holds no validation results; choose another --out"
        )


@dataclass
class SuiteRun:
    """What a suite run did: the finished cases' results (read back from disk) and the crashes."""

    results: list[dict[str, Any]]
    failures: dict[str, str]
    ran: list[str]
    skipped: list[str]


def run_suite(
    backend: str,
    out: Path,
    *,
    suite: Path = SUITE,
    from_dir: Path | None = None,
    quiet: bool = False,
    command: str = "",
    console: Console | None = None,
) -> SuiteRun:
    """Run the suite's cases of ``backend`` into ``out``, skipping those finished before.

    Every input check (the suite file, each scenario, the output folder, ``from_dir``) happens before
    the first case runs. A crashing case is recorded in ``failures`` and the suite goes on.
    """
    if backend not in BACKENDS:
        raise InputError(f"--backend {backend}", f"expected one of {', '.join(BACKENDS)}")
    if from_dir is not None:
        if backend != "gpu":
            raise InputError(f"--from {from_dir}", "reading an existing results folder is for --backend gpu")
        if not from_dir.is_dir():
            raise InputError(str(from_dir), "no such folder")
    cases = load_suite(suite, backend)
    out = Path(out)
    check_out(out)
    console = console or Console()
    (out / "cases").mkdir(parents=True, exist_ok=True)
    failures: dict[str, str] = {}
    ran: list[str] = []
    skipped: list[str] = []
    header = _header(backend, suite, command, from_dir)
    with progress_bar(f"validate --backend {backend}", quiet=quiet, console=console) as progress:
        for i, case in enumerate(cases):
            case_dir = out / "cases" / case.name
            source = str(from_dir.resolve()) if from_dir is not None else ""
            fingerprint = case.fingerprint(source)
            if _finished(case_dir, fingerprint):
                skipped.append(case.name)
                if not quiet:
                    console.print(f"{case.name}: finished before, skipped ({case_dir / RESULT})")
                continue

            def step(fraction: float, text: str, i: int = i, name: str = case.name) -> None:
                progress((i + min(max(fraction, 0.0), 1.0)) / len(cases), f"{name}: {text}")

            case_dir.mkdir(parents=True, exist_ok=True)
            step(0.0, "starting")
            started = time.perf_counter()
            try:
                record = _run_case(case, case_dir, step, from_dir)
            except (InputError, KeyboardInterrupt):
                raise
            except Exception as err:  # a crashed run: recorded, the other cases still run
                failures[case.name] = f"{type(err).__name__}: {err}"
                write_text(case_dir / "error.txt", traceback.format_exc())
                if not quiet:
                    console.print(f"{case.name}: [red]crashed[/red]: {failures[case.name]}")
                continue
            record.update(
                case=case.name,
                kind=case.kind,
                scenario=case.label,
                scenario_path=str(case.scenario_path),
                overrides=list(case.overrides),
                runner=case.runner,
                fingerprint=fingerprint,
                wall_s=round(time.perf_counter() - started, 2),
                finished_utc=datetime.now(UTC).isoformat(timespec="seconds"),
            )
            write_text(case_dir / RESULT, json.dumps(_jsonable(record), indent=2) + "\n")
            (case_dir / "error.txt").unlink(missing_ok=True)
            ran.append(case.name)
            _write_tables(out, header, _collect(out, cases), failures)
            if not quiet:
                console.print(f"{case.name}: {record['status']} in {record['wall_s']:.0f} s")
            step(1.0, "done")
    results = _collect(out, cases)
    _write_tables(out, header, results, failures)
    return SuiteRun(results, failures, ran, skipped)


def _finished(case_dir: Path, fingerprint: str) -> bool:
    try:
        record = json.loads((case_dir / RESULT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    # A case without a real backend is re-tried every time: it costs seconds and may have one now.
    return record.get("status") == "ok" and record.get("fingerprint") == fingerprint


def _collect(out: Path, cases: list[Case]) -> list[dict[str, Any]]:
    """The result records of the suite's cases that are on disk, in suite order."""
    records = []
    for case in cases:
        path = out / "cases" / case.name / RESULT
        if path.is_file():
            records.append(json.loads(path.read_text(encoding="utf-8")))
    return records


def _run_case(case: Case, case_dir: Path, step: ProgressCallback, from_dir: Path | None) -> dict[str, Any]:
    if from_dir is not None and (from_dir / case.name).is_dir():
        from_dir = from_dir / case.name  # a whole GPU suite's folder: one subfolder per case
    if case.runner == "gavel_gpu_experiment":
        return _run_gpu_experiment(case, case_dir, step, from_dir)
    if case.runner == "experiment":
        return _run_experiment_script(case, case_dir, step, from_dir)
    if case.runner == "prediction":
        return _run_with_prediction(case, case_dir, step)
    return _run_twin(case, case_dir, step)


def _run_with_prediction(case: Case, case_dir: Path, step: ProgressCallback) -> dict[str, Any]:
    """A real run whose own tables carry the simulator's prediction of it (a spot run with a ``real:``
    section: the prediction is anchored on the measured step rate, so it cannot run first): metric ``m``
    is compared with ``predicted_m`` of the same summary."""
    from clustertwin.analysis.compare import relative_error

    metrics = _run_and_write(case, case_dir / "real", "real", step)
    missing = [m for m in case.metrics if m not in metrics or f"predicted_{m}" not in metrics]
    if missing:
        raise InputError(
            f"case {case.name}: field metrics", f"no metric and prediction pair for {', '.join(missing)}"
        )
    rows = [
        _row(m, metrics[f"predicted_{m}"], metrics[m], relative_error(metrics[f"predicted_{m}"], metrics[m]))
        for m in case.metrics
    ]
    return {"status": "ok", "rows": rows, "real_dir": str(case_dir / "real")}


def _run_twin(case: Case, case_dir: Path, step: ProgressCallback) -> dict[str, Any]:
    """Simulate the case (seconds; checks the metric names), then run it for real, then compare."""
    from clustertwin.analysis.compare import relative_error
    from clustertwin.kinds import get_kind

    spec = get_kind(case.kind)
    sim_dir = case_dir / "sim"
    sim_metrics = _run_and_write(case, sim_dir, "sim", lambda f, t: step(0.1 * f, f"sim {t}"))
    compared = spec.comparison.metrics if spec.comparison is not None else ()
    unknown = [name for name in case.metrics if name not in sim_metrics and name not in compared]
    if unknown:
        raise InputError(
            f"case {case.name}: field metrics",
            f"no metric {', '.join(unknown)} for kind {case.kind}; it has {', '.join(sorted(sim_metrics))}",
        )
    if spec.run_real is None:
        rows = [_row(name, sim_metrics.get(name, math.nan), math.nan, math.nan) for name in case.metrics]
        note = f"no real runtime for scenario kind {case.kind!r} yet"
        return {"status": NO_REAL_BACKEND, "note": note, "rows": rows, "sim_dir": str(sim_dir)}

    real_dir = case_dir / "real"
    real_metrics = _run_and_write(case, real_dir, "real", lambda f, t: step(0.1 + 0.9 * f, f"real {t}"))
    pairs = {
        name: (sim_metrics.get(name, math.nan), real_metrics.get(name, math.nan)) for name in case.metrics
    }
    record: dict[str, Any] = {"status": "ok", "sim_dir": str(sim_dir), "real_dir": str(real_dir)}
    if spec.comparison is not None:
        comparison = spec.comparison.compare(sim_dir, real_dir, case_dir / "compare")
        pairs.update({name: pair for name, pair in comparison.pairs.items() if name in pairs})
        record["compare_dir"] = str(case_dir / "compare")
    record["rows"] = [_row(name, s, r, relative_error(s, r)) for name, (s, r) in pairs.items()]
    return record


def _run_and_write(case: Case, folder: Path, backend: str, progress: ProgressCallback) -> dict[str, float]:
    """Run the case's scenario on ``backend`` and write its run folder, as ``clustertwin run`` does."""
    from clustertwin.api import run

    output = run(scenario=case.scenario, backend=backend, out=folder, progress=progress, plots=False)
    return {name: float(value) for name, value in output.metrics.items()}


def _run_gpu_experiment(
    case: Case, case_dir: Path, step: ProgressCallback, from_dir: Path | None
) -> dict[str, Any]:
    """Read (or produce) the GPU experiment's comparison of the case's policy.

    With ``from_dir``: its ``compare-<policy>/compare.json``, or, where only ``real-<policy>/`` is there,
    the experiment's ``compare`` step first (which writes into ``from_dir``). Without: the experiment runs
    in ``case_dir/work`` (profile, size, real run, then compare; a GPU machine, about 30 minutes).
    """
    from clustertwin.analysis.compare import relative_error

    policy = case.scenario.policy.name
    work = (from_dir or case_dir / "work").resolve()
    compared = work / f"compare-{policy}" / "compare.json"
    if not compared.is_file():
        if not (work / f"real-{policy}" / "summary.json").is_file():
            if from_dir is not None:
                raise InputError(
                    str(from_dir),
                    f"no finished real run of policy {policy} (real-{policy}/summary.json) and no"
                    f" compare-{policy}/compare.json",
                )
            step(0.0, "GPU experiment: profile, size and real run")
            _experiment("run", "--work", str(work), "--policies", policy)
        step(0.9, "GPU experiment: simulate and compare")
        _experiment("compare", "--work", str(work))
    figures = json.loads(compared.read_text(encoding="utf-8"))
    rows = []
    for name in case.metrics:
        sim_key, real_key = GAVEL_COMPARED[name]
        s, r = _number(figures.get(sim_key)), _number(figures.get(real_key))
        rows.append(_row(name, s, r, relative_error(s, r)))
    return {
        "status": "ok",
        "rows": rows,
        "compare_json": str(compared),
        "jobs_compared": figures.get("jobs_compared"),
        "source": "read from --from" if from_dir is not None else "ran experiments/gavel_gpu_fidelity.py",
    }


def _run_experiment_script(
    case: Case, case_dir: Path, step: ProgressCallback, from_dir: Path | None
) -> dict[str, Any]:
    """Read (or produce, with ``python -m experiments.<name> run``) a GPU experiment's results table
    (``results.csv``, or the experiment's own name for it): one row per configuration and metric, named
    ``<configuration> <metric>``."""
    import pandas as pd

    from clustertwin.analysis.compare import relative_error

    name = case.experiment or ""
    spec = EXPERIMENTS[name]
    work = (from_dir or case_dir / "work").resolve()
    table = work / spec.table
    if not table.is_file():
        if from_dir is not None:
            raise InputError(str(from_dir), f"no {spec.table} of experiment {name} there")
        step(0.0, f"GPU experiment {name}")
        _experiment_module(name, "run", "--out", str(work), *case.args)
        if not table.is_file():
            raise RuntimeError(f"experiments.{name} run wrote no {table}")
    frame = pd.read_csv(table)
    rows = []
    for _, row in frame.iterrows():
        config = " ".join(f"{key}={row[key]}" for key in spec.keys)
        for metric in case.metrics:
            sim_col, real_col = spec.metrics[metric]
            s, r = _number(row[sim_col]), _number(row[real_col])
            rows.append(_row(f"{config} {metric}", s, r, relative_error(s, r)))
    return {
        "status": "ok",
        "rows": rows,
        "results_csv": str(table),
        "source": "read from --from" if from_dir is not None else f"ran experiments/{name}.py",
    }


def _experiment_module(name: str, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", f"experiments.{name}", *args], cwd=ROOT, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"experiments.{name} {args[0]} exited with status {done.returncode}")


def _experiment(*args: str) -> None:
    if not GPU_EXPERIMENT.is_file():
        raise RuntimeError(f"{GPU_EXPERIMENT} not found: the GPU suite runs from a source checkout")
    done = subprocess.run([sys.executable, str(GPU_EXPERIMENT), *args], cwd=ROOT, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{GPU_EXPERIMENT.name} {args[0]} exited with status {done.returncode}")


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else math.nan


def _row(metric: str, sim: float, real: float, error: float) -> dict[str, Any]:
    return {"metric": metric, "sim": sim, "real": real, "error": error}


def table_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One flat row per case and metric: kind, case, scenario, metric, sim, real, error, note."""
    rows = []
    for record in results:
        note = "" if record["status"] == "ok" else record["status"]
        for row in record["rows"]:
            rows.append(
                {
                    "kind": record["kind"],
                    "case": record["case"],
                    "scenario": record["scenario"],
                    **{key: _number(row[key]) if key != "metric" else row[key] for key in row},
                    "note": note,
                }
            )
    return rows


def render(results: list[dict[str, Any]], title: str) -> Table:
    """The suite's table for the terminal."""
    table = Table(title=title)
    for name in ("kind", "scenario", "metric", "sim", "real", "rel. error", "note"):
        table.add_column(name, justify="right" if name in ("sim", "real", "rel. error") else "left")
    for row in table_rows(results):
        table.add_row(
            row["kind"], row["scenario"], row["metric"], _show(row["sim"]), _show(row["real"]),
            _percent(row["error"]), row["note"],
        )  # fmt: skip
    return table


def _show(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value:.4g}"


def _percent(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value:+.1%}"


def _header(backend: str, suite: Path, command: str, from_dir: Path | None) -> dict[str, Any]:
    return {
        "backend": backend,
        "suite": str(Path(suite).resolve()),
        "command": command,
        "from": str(from_dir) if from_dir is not None else None,
        "machine": machine(),
    }


def machine() -> str:
    """The host in a few words: CPU model, cores seen by this process, OS."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cores} cores ({model}), {platform.system()} {platform.release()}"


def _write_tables(out: Path, header: dict[str, Any], results: list[dict[str, Any]], failures: dict[str, str]):
    rows = table_rows(results)
    document = {
        **header,
        "written_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "rows": rows,
        "failures": failures,
    }
    write_text(out / TABLE_JSON, json.dumps(_jsonable(document), indent=2, allow_nan=False) + "\n")
    lines = [
        f"# Fidelity suite, backend {header['backend']}",
        "",
        f"- command: `{header['command']}`" if header["command"] else "- command: (library call)",
        f"- machine: {header['machine']}",
        f"- written: {document['written_utc']}",
        "- relative error = (sim - real) / real; negative: the simulation was optimistic (shorter times)",
        "",
        "| kind | scenario | metric | sim | real | rel. error | note |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['kind']} | {row['scenario']} | {row['metric']} | {_show(row['sim'])} |"
            f" {_show(row['real'])} | {_percent(row['error'])} | {row['note']} |"
        )
    for name, error in failures.items():
        lines.append(f"\n**{name} crashed:** `{error}`")
    write_text(out / TABLE_MD, "\n".join(lines) + "\n")


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
