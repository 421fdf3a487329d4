"""Simulation fidelity: how far a simulated run was from a real run of the same scenario ([Narayanan],
§5.7.2, Table 5.3, where the paper reports physical and simulated results within 8%).

Both runs are read back from their run folders and joined on ``job_id``. Average JCT is taken over the
same jobs on both sides (those completed in both runs, restricted to the measured window when both runs
have one), so the error measures timing, not which jobs happened to finish. Makespan and utilisation
are run-level figures, taken from each run's own ``summary.json`` metrics. Every error is the signed
relative error of the simulation against reality, ``(sim - real) / real``: negative means the simulator
was optimistic (shorter JCT or makespan) or under-estimated utilisation.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from clustertwin.analysis.output import SUMMARY, read_run
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, ScalarFormatter
from rich.table import Table

from clustertwin.atomic import write_atomically, write_json
from clustertwin.errors import InputError

# The jobs columns a comparison reads; the rest of the table contract is not needed here.
_JOB_COLUMNS = ("job_id", "job_type", "arrival_s", "completion_s", "in_window")
MAX_TABLE_ROWS = 30


@dataclass
class Comparison:
    """A simulated run against a real one. ``per_job`` has one row per compared job: job_id, job_type,
    sim_jct_s, real_jct_s and ratio (real / sim), in job_id order."""

    sim_dir: Path
    real_dir: Path
    per_job: pd.DataFrame
    windowed: bool  # True: only jobs in the measured window were compared
    avg_jct_sim_s: float
    avg_jct_real_s: float
    makespan_sim_s: float
    makespan_real_s: float
    utilisation_sim: float
    utilisation_real: float
    # Jobs in scope that completed on one side only, by job id.
    jobs_missing_in_sim: list[int] = field(default_factory=list)
    jobs_missing_in_real: list[int] = field(default_factory=list)

    @property
    def avg_jct_error(self) -> float:
        return relative_error(self.avg_jct_sim_s, self.avg_jct_real_s)

    @property
    def makespan_error(self) -> float:
        return relative_error(self.makespan_sim_s, self.makespan_real_s)

    @property
    def utilisation_error(self) -> float:
        return relative_error(self.utilisation_sim, self.utilisation_real)

    @property
    def jobs_compared(self) -> int:
        return len(self.per_job)

    def headline(self) -> dict[str, float | int]:
        """The figures printed as ``key=value`` lines, in print order."""
        return {
            "avg_jct_error": self.avg_jct_error,
            "makespan_error": self.makespan_error,
            "utilisation_error": self.utilisation_error,
            "avg_jct_sim_s": self.avg_jct_sim_s,
            "avg_jct_real_s": self.avg_jct_real_s,
            "makespan_sim_s": self.makespan_sim_s,
            "makespan_real_s": self.makespan_real_s,
            "utilisation_sim": self.utilisation_sim,
            "utilisation_real": self.utilisation_real,
            "jobs_compared": self.jobs_compared,
            "jobs_missing_in_sim": len(self.jobs_missing_in_sim),
            "jobs_missing_in_real": len(self.jobs_missing_in_real),
        }

    def ratio_quantiles(self) -> dict[str, float]:
        """Spread of the per-job real/sim JCT ratio: a good average can hide large per-job errors."""
        ratio = self.per_job["ratio"].to_numpy(dtype=float)
        ratio = ratio[np.isfinite(ratio)]
        if not len(ratio):
            return {f"ratio_{name}": math.nan for name in ("min", "p10", "median", "p90", "max")}
        p10, median, p90 = np.percentile(ratio, [10, 50, 90])
        return {
            "ratio_min": float(ratio.min()),
            "ratio_p10": float(p10),
            "ratio_median": float(median),
            "ratio_p90": float(p90),
            "ratio_max": float(ratio.max()),
        }


def relative_error(sim: float, real: float) -> float:
    """``(sim - real) / real``; NaN when either is missing or reality is zero (no meaningful scale)."""
    if not (math.isfinite(sim) and math.isfinite(real)) or real == 0:
        return math.nan
    return (sim - real) / real


def compare_runs(sim_dir: Path, real_dir: Path) -> Comparison:
    """Join a simulated run folder with a real one; raise InputError naming the folder at fault."""
    sim_dir, real_dir = Path(sim_dir), Path(real_dir)
    sim_summary, sim_jobs = _read(sim_dir)
    real_summary, real_jobs = _read(real_dir)

    # Gavel measures JCT on a steady-state window; use it only when both runs define one, since a run
    # without a window would otherwise contribute nothing.
    windowed = bool(sim_jobs["in_window"].any() and real_jobs["in_window"].any())
    sim_scope = _in_scope(sim_jobs, windowed)
    real_scope = _in_scope(real_jobs, windowed)
    common = sorted(set(sim_scope.index) & set(real_scope.index))
    if not common:
        scope = "in the measured window " if windowed else ""
        if sim_scope.empty:
            raise InputError(str(sim_dir), f"no job {scope}completed in this run, so nothing to compare")
        if real_scope.empty:
            raise InputError(str(real_dir), f"no job {scope}completed in this run, so nothing to compare")
        raise InputError(str(real_dir), f"no job {scope}completed both in this run and in {sim_dir}")

    sim_common, real_common = sim_scope.loc[common], real_scope.loc[common]
    mismatched = sim_common.index[sim_common["job_type"] != real_common["job_type"]]
    if len(mismatched):
        job = int(mismatched[0])
        raise InputError(
            str(real_dir),
            f"job {job} is {real_common.at[job, 'job_type']!r} here but {sim_common.at[job, 'job_type']!r}"
            f" in {sim_dir}; the runs are not of the same workload ({len(mismatched)} jobs differ)",
        )
    sim_jct = sim_common["jct_s"].to_numpy(dtype=float)
    real_jct = real_common["jct_s"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = real_jct / sim_jct  # a zero-length simulated job gives inf, written as null
    per_job = pd.DataFrame(
        {
            "job_id": np.asarray(common, dtype="int64"),
            "job_type": sim_common["job_type"].to_numpy(),
            "sim_jct_s": sim_jct,
            "real_jct_s": real_jct,
            "ratio": ratio,
        }
    )
    return Comparison(
        sim_dir=sim_dir,
        real_dir=real_dir,
        per_job=per_job,
        windowed=windowed,
        avg_jct_sim_s=float(sim_jct.mean()),
        avg_jct_real_s=float(real_jct.mean()),
        makespan_sim_s=_metric(sim_summary, "makespan_s"),
        makespan_real_s=_metric(real_summary, "makespan_s"),
        utilisation_sim=_metric(sim_summary, "utilisation"),
        utilisation_real=_metric(real_summary, "utilisation"),
        jobs_missing_in_sim=sorted(int(j) for j in set(real_scope.index) - set(sim_scope.index)),
        jobs_missing_in_real=sorted(int(j) for j in set(sim_scope.index) - set(real_scope.index)),
    )


def _read(run_dir: Path) -> tuple[dict, pd.DataFrame]:
    """The summary and the jobs table of a run folder, checked for what a comparison needs.

    A real run that stopped early leaves its tables, written round by round, without a summary
    (``<out>.partial/``): its finished jobs compare, and its run-level metrics are unknown (NaN)."""
    if not run_dir.is_dir():
        raise InputError(str(run_dir), "no such folder")
    if not (run_dir / SUMMARY).is_file() and (run_dir / "jobs.parquet").is_file():
        summary, jobs = {}, pd.read_parquet(run_dir / "jobs.parquet")
    else:
        summary, result = read_run(run_dir)
        jobs = result.tables.get("jobs")
    if jobs is None:
        raise InputError(str(run_dir), "not a Gavel run folder (no jobs.parquet)")
    missing = [column for column in _JOB_COLUMNS if column not in jobs.columns]
    if missing:
        raise InputError(str(run_dir / "jobs.parquet"), f"missing columns: {', '.join(missing)}")
    if jobs["job_id"].duplicated().any():
        job = int(jobs["job_id"][jobs["job_id"].duplicated()].iloc[0])
        raise InputError(str(run_dir / "jobs.parquet"), f"job {job} appears more than once")
    return summary, jobs


def _in_scope(jobs: pd.DataFrame, windowed: bool) -> pd.DataFrame:
    """Completed jobs (in the window if ``windowed``), indexed by job id, with their JCT."""
    keep = jobs["completion_s"].notna().to_numpy()
    if windowed:
        keep = keep & jobs["in_window"].to_numpy(dtype=bool)
    scoped = jobs.loc[keep, ["job_id", "job_type"]].set_index("job_id")
    scoped["jct_s"] = (jobs["completion_s"] - jobs["arrival_s"])[keep].to_numpy(dtype=float)
    return scoped


def _metric(summary: dict, name: str) -> float:
    """A run-level metric from summary.json; JSON null (a NaN when written) or absent is NaN."""
    value = summary.get("metrics", {}).get(name)
    return float(value) if isinstance(value, int | float) else math.nan


def ratio_table(comparison: Comparison, max_rows: int = MAX_TABLE_ROWS) -> Table:
    """Per-job ratios for the terminal: the ``max_rows`` jobs furthest from 1 (in log terms, so 2x
    and 0.5x rank alike), which are the ones worth looking at."""
    per_job = comparison.per_job
    with np.errstate(divide="ignore", invalid="ignore"):
        distance = np.abs(np.log(per_job["ratio"].to_numpy(dtype=float)))
    distance = np.nan_to_num(distance, nan=np.inf)  # unusable ratios first: they need a look most
    order = np.argsort(-distance, kind="stable")[:max_rows]
    shown = per_job.iloc[order]
    title = f"real/sim JCT ({len(shown)} of {len(per_job)} jobs, furthest from 1 first)"
    table = Table(title=title)
    for name, justify in (("job", "right"), ("type", "left"), ("sim JCT", "right"),
                          ("real JCT", "right"), ("real/sim", "right")):  # fmt: skip
        table.add_column(name, justify=justify)
    for row in shown.itertuples(index=False):
        table.add_row(
            str(row.job_id), str(row.job_type), _hours(row.sim_jct_s), _hours(row.real_jct_s),
            f"{row.ratio:.3f}",
        )  # fmt: skip
    return table


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


def write_comparison(comparison: Comparison, out_dir: Path) -> list[Path]:
    """Write compare.json, per_job.csv and jct_ratio_cdf.png into ``out_dir`` and return their paths.

    Each file is written under a temporary name and renamed into place, so a reader never sees a
    half-written file; rerunning replaces the earlier files one by one.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(str(out_dir), "the output path exists and is not a folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = {
        **comparison.headline(),
        **comparison.ratio_quantiles(),
        "windowed": comparison.windowed,
        "sim_dir": str(comparison.sim_dir.absolute()),
        "real_dir": str(comparison.real_dir.absolute()),
        "jobs_missing_in_sim_ids": comparison.jobs_missing_in_sim,
        "jobs_missing_in_real_ids": comparison.jobs_missing_in_real,
    }
    # NaN and inf are not JSON; null says "no value" to any reader.
    text = json.dumps({k: _finite_or_none(v) for k, v in figures.items()}, indent=2, allow_nan=False)
    figure = _ratio_cdf(comparison)
    writers: dict[str, Callable[[Path], object]] = {
        "compare.json": lambda path: path.write_text(text + "\n", encoding="utf-8"),
        "per_job.csv": lambda path: comparison.per_job.to_csv(path, index=False),
        "jct_ratio_cdf.png": lambda path: figure.savefig(path, format="png", dpi=110),
    }
    return [write_atomically(out_dir / name, write) for name, write in writers.items()]


def _finite_or_none(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _ratio_cdf(comparison: Comparison) -> Figure:
    """CDF of the per-job real/sim JCT ratio on a log axis (2x and 0.5x equally far from 1); a
    perfect simulator is a step at the vertical line 1.0."""
    ratio = comparison.per_job["ratio"].to_numpy(dtype=float)
    ratio = np.sort(ratio[np.isfinite(ratio) & (ratio > 0)])
    figure = Figure(figsize=(6, 4), layout="constrained")
    FigureCanvasAgg(figure)  # render with Agg whatever backend pyplot may have chosen
    ax = figure.subplots()
    if len(ratio):
        # Starts at 0 on the smallest ratio so the first job is a visible step, not a floating line.
        x = np.concatenate([ratio[:1], ratio])
        ax.step(x, np.arange(len(x)) / len(ratio), where="post")
        ax.set_xscale("log")
        # Ratios sit near 1, where log-axis labels would read 10^0; plain numbers are clearer. A narrow
        # spread has few major ticks, so the minor ones are labelled too; a wide one (labelled minor
        # ticks would overlap) is ticked at the powers of two, each a doubling or halving.
        ax.xaxis.set_major_formatter(ScalarFormatter())
        if ratio[-1] / ratio[0] < 3:
            ax.xaxis.set_minor_formatter(ScalarFormatter())
        else:
            low, high = math.floor(math.log2(ratio[0])), math.ceil(math.log2(ratio[-1]))
            ax.xaxis.set_major_locator(FixedLocator([2.0**k for k in range(low, high + 1)]))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
    else:
        ax.text(0.5, 0.5, "no usable ratio", ha="center", va="center", transform=ax.transAxes)
    ax.axvline(1.0, color="black", linestyle="--", linewidth=1)
    ax.set_xlabel("real / simulated JCT per job (log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="both", alpha=0.3)
    scope = "window jobs" if comparison.windowed else "jobs"
    ax.set_title(
        f"{comparison.real_dir.resolve().name} vs {comparison.sim_dir.resolve().name}: {len(ratio)} {scope};"
        f" avg JCT error {comparison.avg_jct_error:+.1%}",
        fontsize=9,
    )
    return figure


def compare_summaries(sim_dir: Path, real_dir: Path, metrics: Sequence[str], out: Path) -> dict[str, Any]:
    """The kinds whose runs are compared by their headline metrics: per metric the simulated and the real
    value and the relative error, written flat to ``out/compare.json`` (what ``clustertwin report``
    shows) and returned. A metric missing from either run is an InputError naming the folder."""
    summaries = {}
    for side, folder in (("sim", sim_dir), ("real", real_dir)):
        path = Path(folder) / "summary.json"
        try:
            summaries[side] = json.loads(path.read_text(encoding="utf-8"))["metrics"]
        except (OSError, ValueError, KeyError) as err:
            raise InputError(str(folder), f"not a run folder with metrics ({path.name}: {err})") from None
    figures: dict[str, Any] = {"sim_dir": str(sim_dir), "real_dir": str(real_dir)}
    for name in metrics:
        for side, folder in (("sim", sim_dir), ("real", real_dir)):
            if summaries[side].get(name) is None:
                raise InputError(str(folder), f"the run has no metric {name}")
        sim, real = float(summaries["sim"][name]), float(summaries["real"][name])
        figures.update({f"{name}_sim": sim, f"{name}_real": real, f"{name}_error": relative_error(sim, real)})
    Path(out).mkdir(parents=True, exist_ok=True)
    write_json(Path(out) / "compare.json", figures)
    return figures
