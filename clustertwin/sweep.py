"""``clustertwin sweep SPEC --out DIR [--address ADDR]``: one simulation per grid point, on Ray.

The spec (``scenarios/sweep_schema.py``) is a base scenario and a grid. Before anything runs, every grid
point's scenario is built and validated, so a misspelt field or a bad value stops the sweep with exit
status 2 and nothing started. Runs then go to Ray as independent tasks: a local Ray by default (one
worker per CPU), or an existing cluster when ``--address`` is given.

Each finished run is written at once, atomically, to ``DIR/runs/<key>.json`` (its grid values,
overrides, status, error and flat metrics); ``<key>`` hashes the base scenario's text and the run's
overrides. A rerun reads those files and runs only what is missing, so an interrupted sweep (Ctrl-C, a
killed driver, a lost node) resumes without redoing finished runs. A run that raises, or whose worker
process dies, is recorded as ``failed`` with its error and the sweep goes on; ``--retry-failed`` runs
those again. At the end (and on Ctrl-C) ``DIR/results.parquet`` gets one row per finished run: the
grid values, ``status``, ``error``, ``wall_s``, ``node`` and the metrics as columns.

On a cluster every node needs clustertwin installed (same version) in the Python that Ray runs; scenarios
are sent to the workers as validated objects, but a trace file named by path must exist at that path on
the nodes (the bundled traces and throughput tables always do).
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import json
import math
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from clustertwin import ray_reaper
from clustertwin.atomic import write_json, write_parquet
from clustertwin.errors import InputError
from clustertwin.progress import progress_bar
from clustertwin.scenarios.kinds import AnyScenario
from clustertwin.scenarios.load import load_scenario
from clustertwin.scenarios.sweep_schema import AXIS_COLUMNS, AXIS_FIELDS, SweepSpec, load_sweep

SWEEP_FILE = "sweep.json"
RESULTS_FILE = "results.parquet"
RUNS_DIR = "runs"
CONNECT_TIMEOUT_S = 5.0

Runner = Callable[[AnyScenario], dict[str, float]]


@dataclass(frozen=True)
class Point:
    """One run of the sweep: its grid values (column -> value) and the overrides that make it."""

    values: dict[str, Any]
    overrides: tuple[str, ...]
    key: str

    def label(self) -> str:
        return " ".join(f"{column}={_show(value)}" for column, value in self.values.items())


@dataclass(frozen=True)
class Plan:
    spec: SweepSpec
    spec_path: Path
    scenario_path: Path
    points: list[Point]
    scenarios: dict[str, AnyScenario]  # by point key, validated

    @property
    def columns(self) -> list[str]:
        return list(self.points[0].values) if self.points else []


# ----------------------------------------------------------------------------------------------------
# Planning and validation (no Ray needed)


def plan_sweep(spec_path: str | Path) -> Plan:
    """Read the spec, expand its grid and validate every point's scenario; raise InputError on the
    first bad point, naming the spec line of the value at fault."""
    spec_path = Path(spec_path)
    spec, lines = load_sweep(spec_path)
    label = str(spec_path)
    scenario_path = (spec_path.parent / spec.scenario).resolve()
    try:
        scenario_text = scenario_path.read_text(encoding="utf-8")
    except OSError as err:
        where = _where(label, lines, ("scenario",))
        raise InputError(
            where, f"field scenario: cannot read {scenario_path}: {err.strerror or err}"
        ) from None

    # Every axis as a list of (column value, overrides, spec field path of the value).
    axes: list[tuple[str, list[tuple[Any, list[tuple[str, tuple]]]]]] = []
    grid = spec.grid.axes()
    for axis in sorted(grid, key=lambda a: lines.get(("grid", a), 0)):  # file order
        values = grid[axis]
        column = AXIS_COLUMNS.get(axis, axis)
        options = []
        for index, value in enumerate(values):
            if axis == "policies":
                items = spec.grid.policies[value]  # type: ignore[index]
                origin = [(item, ("grid", "policies", value, i)) for i, item in enumerate(items)]
                options.append((value, origin))
                continue
            field = AXIS_FIELDS.get(axis, axis)
            shown = value
            if axis == "traces":
                shown = str((spec_path.parent / value).expanduser().resolve())
            options.append((value, [(f"{field}={json.dumps(shown)}", ("grid", axis, index))]))
        axes.append((column, options))

    base = [(item, ("set", i)) for i, item in enumerate(spec.set)]
    origins: dict[str, tuple] = dict(base)
    points: list[Point] = []
    scenarios: dict[str, AnyScenario] = {}
    for combo in itertools.product(*(options for _, options in axes)):
        values = {column: value for (column, _), (value, _) in zip(axes, combo, strict=True)}
        overrides = [item for item, _ in base]
        for _, origin in combo:
            overrides.extend(item for item, _ in origin)
            origins.update(origin)
        key = hashlib.sha256(json.dumps([scenario_text, overrides]).encode()).hexdigest()[:16]
        point = Point(values, tuple(overrides), key)
        if key in scenarios:
            raise InputError(
                _where(label, lines, ("grid",)), f"two grid points make the same run ({point.label()})"
            )
        scenarios[key] = _validated(point, scenario_path, label, lines, origins)
        points.append(point)
    if not points:
        raise InputError(_where(label, lines, ("grid",)), "field grid: the grid is empty")
    return Plan(spec, spec_path, scenario_path, points, scenarios)


def _validated(
    point: Point, scenario_path: Path, label: str, lines: dict, origins: dict[str, tuple]
) -> AnyScenario:
    try:
        scenario = load_scenario(scenario_path, point.overrides)
        _check(scenario)
    except InputError as err:
        culprit = next((item for item in point.overrides if err.where.endswith(f"--set {item}")), None)
        if culprit is None and err.message.startswith("field policy"):  # from building the policy
            culprit = next((i for i in reversed(point.overrides) if i.startswith("policy.")), None)
        where = _where(label, lines, origins[culprit]) if culprit else _where(label, lines, ("grid",))
        value = f"override {culprit}" if culprit else "scenario"
        raise InputError(where, f"grid point ({point.label()}): {value}: {err}") from None
    return scenario


def _check(scenario: AnyScenario) -> None:
    """The kind's input checks (a policy that cannot be built, say) fail before the sweep starts."""
    from clustertwin.kinds import get_kind

    check = get_kind(scenario.kind).check
    if check is not None:
        check(scenario, "sim")


def _where(label: str, lines: dict, path: tuple) -> str:
    for n in range(len(path), 0, -1):
        line = lines.get(tuple(p if isinstance(p, int) else str(p) for p in path[:n]))
        if line is not None:
            return f"{label}:{line}"
    return label


# ----------------------------------------------------------------------------------------------------
# Running


def simulate(scenario: AnyScenario) -> dict[str, float]:
    """One simulation's flat metrics: the default runner of a sweep (runs in a Ray worker)."""
    from clustertwin.api import run

    return run(scenario=scenario).metrics


_BANNER_SILENCED = False


def execute(runner: Runner, scenario: AnyScenario) -> dict[str, Any]:
    """Run one point and capture any exception as a failed record (the Ray task body)."""
    global _BANNER_SILENCED
    started = time.perf_counter()
    node = socket.gethostname()
    try:
        if not _BANNER_SILENCED:
            from clustertwin.solver_banner import silence_solver_banner

            silence_solver_banner()
            _BANNER_SILENCED = True
        metrics = {str(k): float(v) for k, v in runner(scenario).items()}
    except Exception as err:  # recorded, not raised: one bad run must not stop the sweep
        return {
            "status": "failed",
            "error": f"{type(err).__name__}: {err}",
            "traceback": traceback.format_exc(limit=20),
            "metrics": {},
            "wall_s": time.perf_counter() - started,
            "node": node,
        }
    return {
        "status": "ok",
        "error": None,
        "metrics": metrics,
        "wall_s": time.perf_counter() - started,
        "node": node,
    }


_NEEDS_RAY = "needs Ray: pip install 'clustertwin[sweep]' (or 'ray[default]>=2.9')"


def run_sweep(
    spec_path: str | Path,
    out: str | Path,
    *,
    address: str | None = None,
    workers: int | None = None,
    retry_failed: bool = False,
    quiet: bool = False,
    runner: Runner | None = None,
) -> int:
    """Plan, validate and run a sweep into ``out``; exit status 0 when every run succeeded, else 1."""
    plan = plan_sweep(spec_path)
    out = Path(out)
    if workers is not None and workers < 1:
        raise InputError(f"--workers {workers}", "need at least 1 worker")
    if importlib.util.find_spec("ray") is None:  # before anything is written
        raise InputError("clustertwin sweep", _NEEDS_RAY)
    if address is not None:
        check_reachable(address)
    _prepare_out(out, plan)

    runs = out / RUNS_DIR
    done: dict[str, dict] = {}
    for point in plan.points:
        record = _read_record(runs / f"{point.key}.json")
        if record is not None and not (retry_failed and record.get("status") != "ok"):
            done[point.key] = record
    reused = len(done)
    pending = [p for p in plan.points if p.key not in done]
    total = len(plan.points)
    log = _Log(quiet)
    log(f"sweep {plan.spec.name}: {total} runs, {reused} already done, {len(pending)} to run")

    try:
        if pending:
            _run_on_ray(plan, pending, done, runs, address, workers, runner or simulate, log, quiet)
    finally:
        table = write_results(out, plan, done)
    failed = sum(1 for r in done.values() if r["status"] != "ok")
    log(f"done: {len(done) - failed} ok, {failed} failed, {total - len(done)} not run; table: {table}")
    if not quiet:
        print(table)
    return 0 if failed == 0 and len(done) == total else 1


def _run_on_ray(
    plan: Plan,
    pending: list[Point],
    done: dict[str, dict],
    runs: Path,
    address: str | None,
    workers: int | None,
    runner: Runner,
    log: _Log,
    quiet: bool,
) -> None:
    import ray

    _init_ray(ray, address, workers)
    # A local Ray's agents would outlive a driver killed with SIGKILL; the reaper ends them then.
    reaper = ray_reaper.start(os.getpid()) if address is None else None
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(execute)
        capacity = int(ray.cluster_resources().get("CPU", 1))
        limit = workers or max(1, 2 * capacity)  # runs in flight; Ray queues beyond its free CPUs
        runner_ref = ray.put(runner)
        total = len(plan.points)
        queue = list(pending)
        inflight: dict[Any, Point] = {}
        with progress_bar(f"sweep {plan.spec.name}", quiet=quiet) as progress:

            def report() -> None:
                failed = sum(1 for r in done.values() if r["status"] != "ok")
                text = f"{len(done) - failed} done, {failed} failed, {total - len(done)} remaining"
                progress(len(done) / total, text)

            report()
            while queue or inflight:
                while queue and len(inflight) < limit:
                    point = queue.pop(0)
                    inflight[task.remote(runner_ref, plan.scenarios[point.key])] = point
                ready, _ = ray.wait(list(inflight), num_returns=1)
                for ref in ready:
                    point = inflight.pop(ref)
                    try:
                        outcome = ray.get(ref)
                    except ray.exceptions.RayError as err:  # the worker died, or Ray lost the task
                        outcome = {
                            "status": "failed",
                            "error": f"{type(err).__name__}: {_first_lines(str(err))}",
                            "metrics": {},
                            "wall_s": math.nan,
                            "node": None,
                        }
                    record = {"key": point.key, "values": point.values, "overrides": list(point.overrides)}
                    record.update(outcome)
                    write_json(runs / f"{point.key}.json", record)
                    done[point.key] = record
                    log.run(len(done), total, point, record)
                    report()
    finally:
        ray.shutdown()
        if reaper is not None:
            reaper.terminate()
            reaper.wait()


def _init_ray(ray: Any, address: str | None, workers: int | None) -> None:
    import logging

    options: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": False,
        "logging_level": logging.WARNING,
        "configure_logging": True,
    }
    try:
        if address is None:
            # "local" always starts a fresh Ray here, never joins one that `ray start` left running.
            cpus = workers or os.cpu_count() or 1
            ray.init(address="local", num_cpus=cpus, **options)
        else:
            ray.init(address=address, **options)
    except (ConnectionError, RuntimeError, TimeoutError, ValueError) as err:
        where = f"--address {address}" if address else "local Ray"
        hint = ""
        if address is not None:
            hint = (
                "; if the cluster uses token authentication, set RAY_AUTH_MODE=token and its token in"
                " RAY_AUTH_TOKEN (or ~/.ray/auth_token)"
            )
        raise InputError(where, f"cannot start or join Ray: {_first_lines(str(err))}{hint}") from None


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Fail fast, with a clear message, when nothing listens at a Ray address (instead of Ray's long
    retry loop). ``auto`` (the cluster that ``ray start`` made on this machine) is left to Ray."""
    if address == "auto":
        return
    target = address.removeprefix("ray://")
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise InputError(
            f"--address {address}",
            "expected HOST:PORT of a Ray head node (as `ray start --head` prints), ray://HOST:PORT, or auto",
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as err:
        raise InputError(
            f"--address {address}",
            f"no Ray cluster reachable there (tried for up to {timeout_s:.0f} s: {err.strerror or err});"
            " is the head node up (`ray start --head --port PORT`) and the port open?",
        ) from None


# ----------------------------------------------------------------------------------------------------
# The output folder


def _prepare_out(out: Path, plan: Plan) -> None:
    if out.exists() and not out.is_dir():
        raise InputError(str(out), "the output path exists and is not a folder")
    meta = out / SWEEP_FILE
    if meta.is_file():
        try:
            earlier = json.loads(meta.read_text(encoding="utf-8")).get("name")
        except (OSError, ValueError):
            earlier = None
        if earlier != plan.spec.name:
            raise InputError(
                str(out),
                f"holds the results of sweep {earlier!r}, not {plan.spec.name!r}; choose another --out",
            )
    elif out.is_dir() and any(out.iterdir()):
        raise InputError(
            str(out), f"the folder exists and is not a sweep folder (no {SWEEP_FILE}); choose another --out"
        )
    (out / RUNS_DIR).mkdir(parents=True, exist_ok=True)
    write_json(
        meta,
        {
            "name": plan.spec.name,
            "spec_file": str(plan.spec_path.resolve()),
            "scenario": str(plan.scenario_path),
            "spec": plan.spec.model_dump(mode="json"),
            "columns": plan.columns,
            "runs": len(plan.points),
            "written_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        },
    )


def write_results(out: Path, plan: Plan, done: dict[str, dict]) -> Path:
    """One row per finished run, in grid order, written atomically to ``out/results.parquet``."""
    import pandas as pd

    rows = []
    metric_names: dict[str, None] = {}
    for point in plan.points:
        record = done.get(point.key)
        if record is None:
            continue
        metric_names.update(dict.fromkeys(record.get("metrics", {})))
    for point in plan.points:
        record = done.get(point.key)
        if record is None:
            continue
        row: dict[str, Any] = {"run": point.key, **point.values}
        row["status"] = record["status"]
        row["error"] = record.get("error")
        wall = record.get("wall_s")
        row["wall_s"] = float(wall) if isinstance(wall, int | float) else math.nan
        row["node"] = record.get("node")
        metrics = record.get("metrics", {})
        for name in metric_names:
            value = metrics.get(name)
            row[name] = float(value) if isinstance(value, int | float) else math.nan
        rows.append(row)
    columns = ["run", *plan.columns, "status", "error", "wall_s", "node", *metric_names]
    table = pd.DataFrame(rows, columns=columns)
    for column in plan.columns:
        table[column] = _parquet_column(table[column])
    table["error"] = table["error"].astype("string")
    table["node"] = table["node"].astype("string")
    return write_parquet(out / RESULTS_FILE, table)


def _parquet_column(column: Any) -> Any:
    """Grid values as one Parquet type: numbers stay numbers, anything mixed or nested becomes text."""
    values = list(column)
    kinds = {type(v) for v in values}
    if kinds <= {int, float} or kinds <= {bool} or kinds <= {str}:
        return column
    return column.map(lambda v: v if isinstance(v, str) else json.dumps(v)).astype("string")


def _read_record(path: Path) -> dict | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # absent, or unreadable: run it (again)
    return record if isinstance(record, dict) and record.get("status") in ("ok", "failed") else None


def _first_lines(text: str, n: int = 3) -> str:
    return " ".join(line.strip() for line in text.strip().splitlines()[:n] if line.strip())


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


class _Log:
    """Lines on stderr: a start and end line, and one per finished run when no bar is drawn."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.per_run = not quiet and not sys.stderr.isatty()

    def __call__(self, text: str) -> None:
        if not self.quiet:
            print(text, file=sys.stderr, flush=True)

    def run(self, finished: int, total: int, point: Point, record: dict) -> None:
        if self.per_run:
            extra = f" ({record['wall_s']:.1f} s)" if record["status"] == "ok" else f": {record['error']}"
            print(
                f"[{finished}/{total}] {record['status']} {point.label()}{extra}", file=sys.stderr, flush=True
            )
