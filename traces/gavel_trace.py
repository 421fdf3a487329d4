"""Gavel job traces: one job per line, tab-separated, in Gavel's current 10-column or old 7-column format.

Column orders (data README §1.4/§1.5; Gavel ``scheduler/utils.py:parse_trace``, commit c4fa400 for the
10-column form and ace90a3 for the 7-column form)::

    10col: job_type command working_directory num_steps_arg needs_data_dir total_steps scale_factor
           priority_weight SLO arrival_time
    7col:  job_type command num_steps_arg needs_data_dir total_steps arrival_time scale_factor

``total_steps`` is in iterations, ``arrival_time`` in seconds from the trace start.

SLO semantics (Gavel ``job.py`` and ``scheduler.py:add_job``): the SLO column is a *factor*, not seconds.
A negative value means no SLO. Gavel's deadline is ``arrival + SLO × duration``, where ``duration`` is
the job's run time alone on the reference accelerator (V100) at its own scale factor: the same duration
from which its generator derived ``total_steps = duration × isolated V100 throughput``. A trace stores
only the steps, so :func:`slo_deadline_s` recovers the duration as ``total_steps / throughput``.

Arrivals must be non-decreasing: Gavel's simulator asserts this for traces, and its physical-cluster
driver submits jobs in file order, so an earlier arrival after a later one would have no clear meaning.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from clustertwin.traces.gavel_throughputs import ThroughputTable

from clustertwin.atomic import write_text
from clustertwin.errors import InputError

_COLUMNS = {
    "10col": tuple(
        "job_type command working_directory num_steps_arg needs_data_dir total_steps scale_factor "
        "priority_weight SLO arrival_time".split()
    ),
    "7col": tuple(
        "job_type command num_steps_arg needs_data_dir total_steps arrival_time scale_factor".split()
    ),
}
_BY_WIDTH = {len(cols): fmt for fmt, cols in _COLUMNS.items()}


@dataclass(frozen=True)
class TraceJob:
    """One job of a Gavel trace.

    ``slo`` is a factor of the job's isolated duration (None: no SLO); see :func:`slo_deadline_s`.
    ``line`` is the 1-based line in the file the job came from (0 when generated); it is provenance
    for error messages, so it takes no part in equality.
    """

    job_type: str
    scale_factor: int
    total_steps: int
    arrival_s: float
    priority_weight: float = 1.0
    slo: float | None = None
    command: str = ""
    working_directory: str = ""
    num_steps_arg: str = ""  # the flag that takes total_steps on the command line (Gavel's convention)
    env: tuple[tuple[str, str], ...] = ()  # added to the environment it runs in (scenario jobs only)
    line: int = field(default=0, compare=False)


def load_gavel_trace(
    path: str | Path,
    fmt: Literal["auto", "10col", "7col"] = "auto",
    table: ThroughputTable | None = None,
) -> list[TraceJob]:
    """Read a Gavel trace; every malformed row raises InputError naming ``file:line: column``.

    ``fmt="auto"`` takes the format from the first row's column count (10 or 7); all rows must then
    have that count. Blank lines are skipped. With ``table``, each (job type, scale factor) must be
    in the table, so a simulation never meets a job it has no throughput for.
    """
    path = Path(path)
    if fmt not in ("auto", *_COLUMNS):
        raise InputError(str(path), f"unknown trace format {fmt!r}; use 'auto', '10col' or '7col'")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(str(path), "no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(str(path), f"cannot read: {err}") from None

    jobs: list[TraceJob] = []
    columns: tuple[str, ...] | None = None if fmt == "auto" else _COLUMNS[fmt]
    # Split on "\n" only: str.splitlines would also split inside a command on rare separators.
    for lineno, raw_line in enumerate(text.split("\n"), start=1):
        line = raw_line.rstrip("\r")
        if not line.strip():
            continue
        cells = line.split("\t")
        if columns is None:
            if len(cells) not in _BY_WIDTH:
                raise InputError(
                    f"{path}:{lineno}", f"found {len(cells)} tab-separated columns; a Gavel trace has 10 or 7"
                )
            columns = _COLUMNS[_BY_WIDTH[len(cells)]]
        if len(cells) != len(columns):
            raise InputError(
                f"{path}:{lineno}",
                f"expected {len(columns)} tab-separated columns ({', '.join(columns)}), found {len(cells)}",
            )
        job = _parse_row(dict(zip(columns, cells, strict=True)), f"{path}:{lineno}", lineno)
        if jobs and job.arrival_s < jobs[-1].arrival_s:
            raise InputError(
                f"{path}:{lineno}: column arrival_time",
                f"arrival {job.arrival_s:g} s is before the previous job's ({jobs[-1].arrival_s:g} s); "
                "arrivals must be non-decreasing",
            )
        if table is not None:
            _check_in_table(job, table, f"{path}:{lineno}")
        jobs.append(job)
    if not jobs:
        raise InputError(str(path), "trace has no jobs")
    return jobs


def write_gavel_trace(jobs: Iterable[TraceJob], path: str | Path) -> None:
    """Write ``jobs`` in the 10-column format, atomically (a temporary file renamed into place).

    Floats are written with ``repr`` so that :func:`load_gavel_trace` reads back equal jobs (a job's
    environment has no column, so it is not written); ``needs_data_dir`` is 1 when the command has
    Gavel's ``%s`` data-directory placeholder.
    """
    path = Path(path)
    rows = []
    for i, job in enumerate(jobs):
        for name in ("job_type", "command", "working_directory", "num_steps_arg"):
            value = getattr(job, name)
            if "\t" in value or "\n" in value or "\r" in value:
                raise InputError(
                    f"{path}: job {i}: {name}", "tabs and line breaks cannot be written to a trace"
                )
        slo = -1.0 if job.slo is None else job.slo
        cells = (
            job.job_type,
            job.command,
            job.working_directory,
            job.num_steps_arg,
            "1" if "%s" in job.command else "0",
            str(job.total_steps),
            str(job.scale_factor),
            repr(float(job.priority_weight)),
            repr(float(slo)),
            repr(float(job.arrival_s)),
        )
        rows.append("\t".join(cells) + "\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, "".join(rows))


def slo_deadline_s(
    job: TraceJob, table: ThroughputTable, reference_worker: str | None = None
) -> float | None:
    """Absolute deadline (s) of ``job``: ``arrival + slo × total_steps / isolated throughput``, or None.

    The throughput is the job's isolated one on ``reference_worker`` (default: the table's first, i.e.
    fastest, worker type, V100 for Gavel's tables), at its scale factor; this is the duration Gavel
    multiplies by the SLO factor.
    """
    if job.slo is None:
        return None
    worker = reference_worker or table.worker_types[0]
    throughput = table.isolated(job.job_type, job.scale_factor, worker)
    if throughput <= 0:
        raise InputError(
            f"job {job.job_type!r} (scale factor {job.scale_factor})",
            f"has an SLO but no throughput on {worker!r}, so its duration is unknown",
        )
    return job.arrival_s + job.slo * job.total_steps / throughput


def _parse_row(row: dict[str, str], where: str, lineno: int) -> TraceJob:
    def number(name: str, convert: Callable[[str], float], ok: Callable[[float], bool], rule: str) -> float:
        text = row[name].strip()
        try:
            value = convert(text)
        except ValueError:
            raise InputError(f"{where}: column {name}", f"{text!r} is not {rule}") from None
        if not math.isfinite(value) or not ok(value):
            raise InputError(f"{where}: column {name}", f"{text!r} is not {rule}")
        return value

    job_type = row["job_type"].strip()
    if not job_type:
        raise InputError(f"{where}: column job_type", "empty")
    number("needs_data_dir", int, lambda v: v in (0, 1), "0 or 1")
    total_steps = int(number("total_steps", int, lambda v: v >= 1, "an integer >= 1"))
    scale_factor = int(number("scale_factor", int, lambda v: v >= 1, "an integer >= 1"))
    arrival_s = number("arrival_time", float, lambda v: v >= 0, "a number of seconds >= 0")
    priority_weight, slo = 1.0, None
    if "priority_weight" in row:
        priority_weight = number("priority_weight", float, lambda v: v > 0, "a number > 0")
        # Gavel: a negative SLO means none; zero would be a deadline at arrival, so it is rejected.
        factor = number("SLO", float, lambda v: v != 0, "a factor > 0 (or negative for no SLO)")
        slo = factor if factor > 0 else None
    return TraceJob(
        job_type=job_type,
        scale_factor=scale_factor,
        total_steps=total_steps,
        arrival_s=arrival_s,
        priority_weight=priority_weight,
        slo=slo,
        command=row["command"],
        working_directory=row.get("working_directory", "").strip(),
        num_steps_arg=row["num_steps_arg"].strip(),
        line=lineno,
    )


def _check_in_table(job: TraceJob, table: ThroughputTable, where: str) -> None:
    known = table.scale_factors(job.job_type)
    if not known:
        raise InputError(f"{where}: column job_type", f"job type {job.job_type!r} is not in {table.source}")
    if job.scale_factor not in known:
        raise InputError(
            f"{where}: column scale_factor",
            f"{job.job_type!r} has no throughput at scale factor {job.scale_factor} in {table.source} "
            f"(it lists {', '.join(map(str, known))})",
        )
