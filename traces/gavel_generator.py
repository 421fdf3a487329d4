"""Seeded synthetic job traces in the style of Gavel's simulator (data README §1.3, notes 001 §3).

Gavel (``scheduler/utils.py:generate_job`` and ``scheduler.py:simulate``, commit c4fa400) draws, per job:

* arrival: a Poisson process of ``jobs_per_hour``; the first job arrives at 0 and each next one an
  exponential gap of mean ``3600 / jobs_per_hour`` s later (a static trace has every job at 0);
* duration on V100, the "Philly" mixture: ``60·10^U(1.5, 3)`` s with probability 0.8, else
  ``60·10^U(3, 4)`` s; or, for the cost experiments, a uniform choice among fixed durations;
* scale factor 1, 2, 4, 8 with probability 0.70 / 0.10 / 0.15 / 0.05 ("multiple"), or always 1;
* job type uniform over the types, redrawn until the type can run at the drawn scale factor;
* priority weight 5 with probability 0.2, else 1; SLO factor uniform over {1.2, 2, 10};
* ``total_steps = duration × isolated V100 throughput`` of (type, scale factor).

Each random quantity has its own stream (``SeedSequence(seed).spawn``, one child per quantity, the
duration's long/short choice and its two exponents included) and draws one value per job in job order,
so turning priorities or SLOs on, or changing the scale-factor mix, leaves every other attribute of every
job unchanged, and the streams are prefix-stable: the first n jobs are the same whatever ``num_jobs`` is
(a longer trace extends a shorter one). The type is
drawn from one uniform number per job as ``eligible[floor(u·len(eligible))]``, where ``eligible`` are
the types with a positive reference throughput at the job's scale factor: this has the same distribution
as Gavel's redraw loop (uniform over the eligible types) and keeps each job's type independent of the
other jobs' scale factors.

Durations are not stored: an SLO deadline is ``arrival + slo × total_steps / reference throughput``
(:func:`traces.gavel_trace.slo_deadline_s`), Gavel's ``arrival + SLO × duration`` up to the rounding of
the steps to an integer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
from clustertwin.traces.gavel_throughputs import ThroughputTable
from clustertwin.traces.gavel_trace import TraceJob

from clustertwin.errors import InputError

MULTIPLE_SCALE_FACTORS: Mapping[int, float] = {1: 0.70, 2: 0.10, 4: 0.15, 8: 0.05}
SLO_FACTORS = (1.2, 2.0, 10.0)
HIGH_PRIORITY_WEIGHT = 5.0
HIGH_PRIORITY_PROBABILITY = 0.2
_LONG_JOB_PROBABILITY = 0.2
_STREAMS = (
    "arrival",
    "type",
    "duration",
    "scale_factor",
    "priority",
    "slo",
    "long_exponent",
    "short_exponent",
)


def generate_gavel_jobs(
    table: ThroughputTable,
    *,
    num_jobs: int,
    jobs_per_hour: float | None,
    seed: int,
    scale_factors: Literal["single", "multiple"] | Mapping[int, float] = "single",
    priorities: bool = False,
    slos: bool = False,
    duration: Literal["philly"] | Sequence[float] = "philly",
    job_types: Sequence[str] | None = None,
    reference_worker: str | None = None,
) -> list[TraceJob]:
    """Generate ``num_jobs`` jobs, sorted by arrival (see the module docstring for the distributions).

    ``jobs_per_hour=None`` makes a static trace (all jobs at time 0). ``scale_factors`` is ``"single"``
    (all 1), ``"multiple"`` (Gavel's Philly mix) or an explicit ``{scale_factor: probability}``.
    ``duration`` is ``"philly"`` or a sequence of durations in hours to choose from uniformly.
    ``job_types`` restricts the candidate types (default: all types in the table). ``reference_worker``
    is the accelerator whose isolated throughput turns durations into steps (default: the table's first
    worker type, V100 for Gavel's tables).
    """
    if num_jobs < 1:
        raise InputError("num_jobs", f"must be >= 1, got {num_jobs}")
    if jobs_per_hour is not None and not (np.isfinite(jobs_per_hour) and jobs_per_hour > 0):
        raise InputError("jobs_per_hour", f"must be > 0 (or none for a static trace), got {jobs_per_hour}")
    reference = reference_worker or table.worker_types[0]
    if reference not in table.worker_types:
        raise InputError("reference_worker", f"{reference!r} is not a worker type of {table.source}")
    candidates = _candidate_types(table, job_types)
    sf_values, sf_probs = _scale_factor_mix(scale_factors)
    eligible = {sf: [t for t in candidates if table.isolated(t, sf, reference) > 0] for sf in sf_values}
    for sf, types in eligible.items():
        if not types:
            raise InputError("scale_factors", f"no job type can run at scale factor {sf} on {reference!r}")

    children = np.random.SeedSequence(seed).spawn(len(_STREAMS))
    rng = dict(zip(_STREAMS, (np.random.default_rng(s) for s in children), strict=True))
    n = num_jobs

    if jobs_per_hour is None:
        arrivals = np.zeros(n)
    else:
        gaps = rng["arrival"].exponential(3600.0 / jobs_per_hour, size=n - 1)
        arrivals = np.concatenate(([0.0], np.cumsum(gaps)))

    durations_s = _durations_s(rng["duration"], rng["long_exponent"], rng["short_exponent"], duration, n)
    sfs = rng["scale_factor"].choice(sf_values, size=n, p=sf_probs)
    type_u = rng["type"].random(n)
    weights = np.where(rng["priority"].random(n) < HIGH_PRIORITY_PROBABILITY, HIGH_PRIORITY_WEIGHT, 1.0)
    slo_values = np.asarray(SLO_FACTORS)[rng["slo"].integers(0, len(SLO_FACTORS), size=n)]

    jobs = []
    for i in range(n):
        sf = int(sfs[i])
        types = eligible[sf]
        job_type = types[min(int(type_u[i] * len(types)), len(types) - 1)]
        steps = round(durations_s[i] * table.isolated(job_type, sf, reference))
        jobs.append(
            TraceJob(
                job_type=job_type,
                scale_factor=sf,
                # A tiny user-profiled throughput could round a short job to 0 steps.
                total_steps=max(1, steps),
                arrival_s=float(arrivals[i]),
                priority_weight=float(weights[i]) if priorities else 1.0,
                slo=float(slo_values[i]) if slos else None,
            )
        )
    return jobs


def _candidate_types(table: ThroughputTable, job_types: Sequence[str] | None) -> list[str]:
    if job_types is None:
        return list(table.job_types())
    if isinstance(job_types, str):
        raise InputError("job_types", "expected a list of job types, got a single string")
    unknown = sorted(set(job_types) - set(table.job_types()))
    if unknown:
        raise InputError("job_types", f"not in {table.source}: {', '.join(map(repr, unknown))}")
    if not job_types:
        raise InputError("job_types", "empty")
    # Table order, not the caller's, so that listing the same types differently gives the same trace.
    wanted = set(job_types)
    return [t for t in table.job_types() if t in wanted]


def _scale_factor_mix(setting: str | Mapping[int, float]) -> tuple[np.ndarray, np.ndarray]:
    if setting == "single":
        mix: Mapping[int, float] = {1: 1.0}
    elif setting == "multiple":
        mix = MULTIPLE_SCALE_FACTORS
    elif isinstance(setting, Mapping) and setting:
        mix = setting
    else:
        raise InputError(
            "scale_factors", f"expected 'single', 'multiple' or {{sf: probability}}, got {setting!r}"
        )
    for sf, p in mix.items():
        if isinstance(sf, bool) or not isinstance(sf, int | np.integer) or sf < 1:
            raise InputError("scale_factors", f"scale factor {sf!r} is not an integer >= 1")
        if not (np.isfinite(p) and p >= 0):
            raise InputError("scale_factors", f"probability of scale factor {sf} must be >= 0, got {p!r}")
    total = sum(mix.values())
    if abs(total - 1.0) > 1e-9:
        raise InputError("scale_factors", f"probabilities must sum to 1, got {total}")
    values = np.array(sorted(mix), dtype=np.int64)
    return values, np.array([mix[int(sf)] for sf in values], dtype=float)


def _durations_s(
    rng: np.random.Generator,
    long_rng: np.random.Generator,
    short_rng: np.random.Generator,
    setting: str | Sequence[float],
    n: int,
) -> np.ndarray:
    if setting == "philly":
        # Three streams: drawn from one, the exponents of job i would depend on n (they came after n flags).
        long = rng.random(n) < _LONG_JOB_PROBABILITY
        exponent = np.where(long, long_rng.uniform(3.0, 4.0, n), short_rng.uniform(1.5, 3.0, n))
        return 60.0 * 10.0**exponent
    if isinstance(setting, str) or not len(setting):
        raise InputError("duration", f"expected 'philly' or a list of durations in hours, got {setting!r}")
    hours = np.asarray(setting, dtype=float)
    if not np.all(np.isfinite(hours) & (hours > 0)):
        raise InputError("duration", f"durations must be > 0 hours, got {list(setting)}")
    return 3600.0 * hours[rng.integers(0, len(hours), size=n)]
