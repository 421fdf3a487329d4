"""``clustertwin report DIR``: one self-contained HTML page (``DIR/report.html``) about a result folder.

The page needs nothing but itself: CSS is inline and every image is a base64 PNG ``data:`` URI, so it
can be mailed or attached to an issue. Three kinds of folder are recognised:

- a run folder (``summary.json``, from ``clustertwin run``): its metrics, its plots and its scenario;
- a sweep folder (``sweep.json`` + ``results.parquet``, from ``clustertwin sweep``): one figure per
  metric against the sweep's x axis (input load by default), one line per series (policy by default),
  the mean over seeds with ±1 standard deviation as error bars (the convention of Gavel's Fig. 5.9), a
  table of those means, and the failed runs with their errors. The figures are also saved as
  ``DIR/sweep_<metric>.png``;
- a comparison folder (``compare.json``, from ``clustertwin compare``): the sim-vs-real errors, the
  per-job ratio CDF and the jobs furthest from their simulated JCT.

A small inline script counts the images that decoded and writes ``data-images-loaded="n/total"`` on the
body once the page has loaded, so a headless browser can check the page.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from clustertwin.atomic import write_bytes, write_text
from clustertwin.errors import InputError

REPORT_FILE = "report.html"

# A kind's name -> the function that draws a run folder's plots (None: the kind has none).
PlotsOf = Callable[[str], Callable[[Path], list[Path]] | None]
MAX_ROWS = 40

_CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 2em auto; max-width: 1100px;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f3f3f3; } td.text, th.text { text-align: left; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.85em; color: #555; }
pre { background: #f7f7f7; padding: 0.8em; overflow-x: auto; font-size: 0.8em; }
.meta { color: #666; font-size: 0.85em; } .failed { color: #a00; }
"""

_SCRIPT = """
window.addEventListener('load', function () {
  var images = document.images, ok = 0;
  for (var i = 0; i < images.length; i++) {
    if (images[i].complete && images[i].naturalWidth > 0) { ok++; }
  }
  document.body.setAttribute('data-images-loaded', ok + '/' + images.length);
});
"""


def write_report(folder: str | Path, plots_of: PlotsOf | None = None) -> Path:
    """Write ``folder/report.html`` for a run, sweep or comparison folder and return its path.

    ``plots_of`` draws the plots of a run folder written without them (``clustertwin run --no-plots``)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(str(folder), "no such folder")
    if (folder / "sweep.json").is_file():
        title, body = _sweep_report(folder)
    elif (folder / "summary.json").is_file():
        title, body = _run_report(folder, plots_of)
    elif (folder / "compare.json").is_file():
        title, body = _compare_report(folder)
    else:
        raise InputError(
            str(folder),
            "not a result folder: expected summary.json (a run), sweep.json (a sweep) or compare.json"
            " (a sim-vs-real comparison)",
        )
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    page = (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style>\n<script>{_SCRIPT}</script>\n"
        f"</head>\n<body>\n<h1>{html.escape(title)}</h1>\n"
        f'<p class="meta">{html.escape(str(folder.resolve()))} · report written {stamp} by clustertwin</p>\n'
        f"{body}\n</body>\n</html>\n"
    )
    return write_text(folder / REPORT_FILE, page)


# ----------------------------------------------------------------------------------------------------
# Run folder


def _run_report(folder: Path, plots_of: PlotsOf | None) -> tuple[str, str]:
    summary = _read_json(folder / "summary.json")
    scenario = summary.get("scenario", {})
    images = sorted(folder.glob("*.png"))
    if not images and plots_of is not None:
        images = _replot(folder, plots_of(str(scenario.get("kind"))))
    parts = [
        _kv_table(
            {
                "scenario": scenario.get("name", "?"),
                "kind": scenario.get("kind", "?"),
                "seed": summary.get("seed", "?"),
                "backend": summary.get("backend", "?"),
                "created": summary.get("created_utc", "?"),
                "wall time": _fmt(summary.get("run", {}).get("wall_s")),
            }
        ),
        "<h2>Metrics</h2>",
        _kv_table({k: _fmt(v) for k, v in summary.get("metrics", {}).items()}),
    ]
    if images:
        parts.append("<h2>Plots</h2>")
        parts.extend(_image_file(path) for path in images)
    tables = summary.get("tables", {})
    if tables:
        parts += [
            "<h2>Event tables</h2>",
            _kv_table({f"{k}.parquet": f"{v} rows" for k, v in tables.items()}),
        ]
    parts += ["<h2>Scenario</h2>", f"<pre>{html.escape(json.dumps(scenario, indent=2))}</pre>"]
    return f"Run {scenario.get('name', folder.name)} (seed {summary.get('seed', '?')})", "\n".join(parts)


def _replot(folder: Path, plot: Callable[[Path], list[Path]] | None) -> list[Path]:
    """A run folder written with --no-plots: draw its plots now, when its kind has any."""
    if plot is None:
        return []
    try:
        return sorted(plot(folder))
    except InputError:
        return []


# ----------------------------------------------------------------------------------------------------
# Sweep folder


def _sweep_report(folder: Path) -> tuple[str, str]:
    meta = _read_json(folder / "sweep.json")
    results_path = folder / "results.parquet"
    if not results_path.is_file():
        raise InputError(str(folder), "a sweep folder without results.parquet; run the sweep (again) first")
    table = pd.read_parquet(results_path)
    columns = [c for c in meta.get("columns", []) if c in table.columns]
    spec = meta.get("spec", {})
    options = spec.get("report") or {}
    ok = table[table["status"] == "ok"]
    failed = table[table["status"] != "ok"]
    metric_columns = [
        c for c in table.columns if c not in {"run", "status", "error", "wall_s", "node", *columns}
    ]

    x = options.get("x") or _default_x(table, columns)
    if x is not None and x not in table.columns:
        raise InputError(str(folder / "sweep.json"), f"report.x {x!r} is not a column of the results")
    series = options.get("series")
    if series is None:
        series = [c for c in columns if c not in (x, "seed")]
    bad = [c for c in series if c not in table.columns]
    if bad:
        raise InputError(str(folder / "sweep.json"), f"report.series {bad} are not columns of the results")
    metrics = options.get("metrics") or (["avg_jct_h"] if "avg_jct_h" in metric_columns else metric_columns)
    metrics = [m for m in metrics if m in table.columns]

    planned = int(meta.get("runs", len(table)))
    wall = table["wall_s"].to_numpy(dtype=float)
    parts = [
        f"<p>{html.escape(spec.get('description', ''))}</p>",
        _kv_table(
            {
                "sweep": meta.get("name", folder.name),
                "spec file": meta.get("spec_file", "?"),
                "base scenario": meta.get("scenario", "?"),
                "grid": " × ".join(f"{c} ({table[c].nunique()})" for c in columns),
                "runs planned": planned,
                "runs ok": len(ok),
                "runs failed": len(failed),
                "runs not finished": planned - len(table),
                "simulation time (sum over runs)": f"{np.nansum(wall):.1f} s",
            }
        ),
    ]
    if x is not None and len(ok) and metrics:
        parts.append("<h2>Figures</h2>")
        for metric in metrics:
            figure = _sweep_figure(ok, x, series, metric, meta.get("name", ""), bool(options.get("log_y")))
            png = _png(figure)
            write_bytes(folder / f"sweep_{metric}.png", png)
            caption = (
                f"{metric} against {x}, one line per {', '.join(series) or 'sweep'}: mean over seeds"
                f" (and any other axis), error bars ±1 standard deviation. Also saved as sweep_{metric}.png."
            )
            parts.append(_image(png, f"{metric} vs {x}", caption))
    by = [c for c in (*series, x) if c]
    if len(ok) and metrics and by:
        parts += ["<h2>Means over seeds</h2>", _mean_table(ok, by, metrics)]
    if len(failed):
        parts.append(f'<h2 class="failed">Failed runs ({len(failed)})</h2>')
        shown = failed[["run", *columns, "error"]].head(MAX_ROWS)
        parts.append(_frame_table(shown, text_columns={"run", "error", *columns}))
    parts += ["<h2>Spec</h2>", f"<pre>{html.escape(json.dumps(spec, indent=2))}</pre>"]
    return f"Sweep {meta.get('name', folder.name)}", "\n".join(parts)


def _default_x(table: pd.DataFrame, columns: list[str]) -> str | None:
    if "load" in columns:
        return "load"
    numeric = [c for c in columns if c != "seed" and pd.api.types.is_numeric_dtype(table[c])]
    others = [c for c in columns if c != "seed"]
    return (numeric or others or columns or [None])[0]


def _sweep_figure(ok: pd.DataFrame, x: str, series: list[str], metric: str, name: str, log_y: bool) -> Figure:
    figure = Figure(figsize=(7, 4.5), layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.subplots()
    numeric_x = pd.api.types.is_numeric_dtype(ok[x])
    positions = None if numeric_x else {v: i for i, v in enumerate(dict.fromkeys(ok[x]))}
    groups = ok.groupby(series, sort=False) if series else [((), ok)]
    markers = "os^Dvx*P"
    for index, (key, group) in enumerate(groups):
        stats = group.groupby(x, sort=True)[metric].agg(["mean", "std", "count"])
        xs = stats.index.to_numpy() if numeric_x else np.array([positions[v] for v in stats.index])
        label = ", ".join(str(k) for k in (key if isinstance(key, tuple) else (key,))) or metric
        ax.errorbar(
            xs, stats["mean"], yerr=stats["std"].fillna(0.0), marker=markers[index % len(markers)],
            capsize=3, label=label,
        )  # fmt: skip
    if positions is not None:
        ax.set_xticks(list(positions.values()), [str(v) for v in positions])
    ax.set_xlabel(_axis_label(x))
    ax.set_ylabel(_axis_label(metric))
    if log_y:
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    if series:
        ax.legend(title=", ".join(series))
    seeds = ok.groupby([*series, x]).size()
    spread = f"{seeds.min()}–{seeds.max()}" if seeds.min() != seeds.max() else f"{seeds.min()}"
    ax.set_title(f"{name}: {metric} vs {x} (mean ± sd over {spread} runs per point)", fontsize=10)
    return figure


def _axis_label(column: str) -> str:
    return {
        "load": "input job rate (jobs/hour)",
        "avg_jct_h": "average JCT (hours)",
        "avg_jct_s": "average JCT (seconds)",
    }.get(column, column)


def _mean_table(ok: pd.DataFrame, by: list[str], metrics: list[str]) -> str:
    grouped = ok.groupby(by, sort=False)[metrics]
    means, stds, counts = grouped.mean(), grouped.std(), grouped.size()
    rows = []
    for key in means.index:
        keys = key if isinstance(key, tuple) else (key,)
        cells = [html.escape(str(k)) for k in keys] + [str(int(counts.loc[key]))]
        for metric in metrics:
            mean, std = means.loc[key, metric], stds.loc[key, metric]
            cells.append(
                _fmt(mean) + (f" ± {_fmt(std)}" if isinstance(std, float) and math.isfinite(std) else "")
            )
        rows.append(cells)
    head = [*by, "runs", *metrics]
    return _html_table(head, rows, text_columns=set(range(len(by))))


# ----------------------------------------------------------------------------------------------------
# Comparison folder


def _compare_report(folder: Path) -> tuple[str, str]:
    figures = _read_json(folder / "compare.json")
    sim = Path(str(figures.get("sim_dir", "sim"))).name
    real = Path(str(figures.get("real_dir", "real"))).name
    parts = [
        "<p>Errors are (sim − real) / real: negative means the simulator was optimistic (shorter JCT or"
        " makespan) or under-estimated utilisation.</p>",
        _kv_table({k: _fmt(v) if not isinstance(v, list) else f"{len(v)} jobs" for k, v in figures.items()}),
    ]
    images = sorted(folder.glob("*.png"))
    if images:
        parts.append("<h2>Plots</h2>")
        parts.extend(_image_file(path) for path in images)
    per_job = folder / "per_job.csv"
    if per_job.is_file():
        jobs = pd.read_csv(per_job)
        if "ratio" in jobs.columns and len(jobs):
            with np.errstate(divide="ignore", invalid="ignore"):
                distance = np.abs(np.log(jobs["ratio"].to_numpy(dtype=float)))
            order = np.argsort(-np.nan_to_num(distance, nan=np.inf), kind="stable")[:MAX_ROWS]
            parts.append(
                f"<h2>Jobs furthest from their simulated JCT ({min(MAX_ROWS, len(jobs))} of {len(jobs)})</h2>"
            )
            parts.append(_frame_table(jobs.iloc[order], text_columns={"job_type"}))
    return f"Simulation vs reality: {real} vs {sim}", "\n".join(parts)


# ----------------------------------------------------------------------------------------------------
# HTML pieces


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def _image(png: bytes, alt: str, caption: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (
        f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


def _image_file(path: Path) -> str:
    return _image(path.read_bytes(), path.stem, path.name)


def _kv_table(items: dict[str, Any]) -> str:
    rows = [[html.escape(str(k)), html.escape(str(v))] for k, v in items.items()]
    return _html_table(None, rows, text_columns={0, 1})


def _frame_table(frame: pd.DataFrame, text_columns: set[str]) -> str:
    columns = list(frame.columns)
    rows = [[html.escape(_fmt(v)) for v in row] for row in frame.itertuples(index=False)]
    return _html_table(columns, rows, text_columns={i for i, c in enumerate(columns) if c in text_columns})


def _html_table(head: list[str] | None, rows: list[list[str]], text_columns: set[int]) -> str:
    def cls(i: int) -> str:
        return ' class="text"' if i in text_columns else ""

    out = ["<table>"]
    if head is not None:
        out.append(
            "<tr>" + "".join(f"<th{cls(i)}>{html.escape(str(h))}</th>" for i, h in enumerate(head)) + "</tr>"
        )
    for row in rows:
        out.append("<tr>" + "".join(f"<td{cls(i)}>{cell}</td>" for i, cell in enumerate(row)) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        value = float(value)
        if not math.isfinite(value):
            return "-"
        return f"{value:.4g}" if abs(value) < 1e6 else f"{value:.4e}"
    return str(value)


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise InputError(str(path), f"cannot read: {err}") from None
    if not isinstance(data, dict):
        raise InputError(str(path), "expected a JSON object")
    return data
