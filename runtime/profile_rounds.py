"""Profiling in rounds: every worker slot of the cluster measures a job at once, many times over.

The one-pair-at-a-time profiles of ``runtime.profile`` measure each (job type, worker type) once, for a
few seconds, beside a fixed background mix. On the GPU host (one H100, 16 cores, eight single-thread
CPU workers) that single sample missed the rates the real runs then reached by -27% to +41% per pair,
although within a run a pair's rate varied by only about 5% from round to round
(``docs/gavel-real.md``). What a pair reaches depends on what shares the host with it (CPU workers share
the socket's memory bandwidth and last-level cache, and a GPU job's host-side work is CPU work too) and
on when it is measured (other tenants of a shared host), and one sample draws one of each.

This mode measures the way a real run trains: in rounds, in which every slot of every worker type runs a
measured job (``runtime.profile.measure``: a warm-up lease, then a measured lease that loads a
checkpoint, trains ``seconds`` and saves), all at once. The slots' assignments are a balanced random
design (:func:`round_plan`): each (job type, scale factor) that fits a worker type is measured on it
equally often (within one), and the mixes that share the host differ from round to round. A pair's
throughput is the mean of its samples' step times (a job that spends equal time in each mix moves at
the harmonic mean of its rates), and its overheads are the means of its samples'. ``mode`` is
``rounds`` in the overhead CSV.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from statistics import fmean

from runtime.profile import (
    DEFAULT_WARMUP_STEPS,
    ProfileRow,
    ProgressCallback,
    measure,
    plan,
    warm_gpus,
)
from scenarios.errors import InputError
from scenarios.schema import Scenario

ROUNDS = "rounds"

Pair = tuple[str, int, str]  # (job type, scale factor, worker type)


def round_plan(scenario: Scenario, rounds: int) -> list[list[Pair]]:
    """The pairs measured in each of ``rounds`` rounds; a pair of scale factor s takes s slots of its
    worker type, and every slot of the cluster (``cluster.gpus[type]`` per type) is used where a job fits.

    Per worker type the jobs that fit it are dealt from a queue of shuffled copies of the job list
    (seeded by ``scenario.seed``), so counts stay balanced while the mixes vary. Raises InputError, naming
    the fewest rounds that would do, when ``rounds`` leaves some pair unmeasured.
    """
    if rounds < 1:
        raise InputError("--rounds", f"profiling in rounds needs at least one round (got {rounds})")
    todo, _ = plan(scenario)
    schedule = deal(scenario.cluster.gpus, todo, rounds, scenario.seed)
    missing = _unmeasured(todo, schedule)
    if missing:
        enough = next(
            r
            for r in range(rounds + 1, 2 * len(todo) + 2)
            if not _unmeasured(todo, deal(scenario.cluster.gpus, todo, r, scenario.seed))
        )
        raise InputError(
            "--rounds",
            f"{rounds} round(s) leave {len(missing)} pair(s) unmeasured, e.g. {missing[0][0]} on"
            f" {missing[0][2]}; this cluster needs at least {enough}",
        )
    return schedule


def deal(slots: Mapping[str, int], pairs: Sequence[Pair], rounds: int, seed: int) -> list[list[Pair]]:
    """Deal ``pairs`` into ``rounds`` rounds of ``slots[worker type]`` slots per type (a pair of scale
    factor s takes s slots of its type): per type from a queue of shuffled copies of its pairs, the next
    one that fits the slots left, until no pair of the type could fit (a new copy joins the queue when
    none in it does)."""
    rng = random.Random(seed)
    by_type: dict[str, list[Pair]] = defaultdict(list)
    for pair in pairs:
        by_type[pair[2]].append(pair)
    schedule: list[list[Pair]] = [[] for _ in range(rounds)]
    for worker_type, own in by_type.items():
        smallest = min(p[1] for p in own)
        queue: list[Pair] = []
        for measured in schedule:
            free = slots[worker_type]
            while free >= smallest:
                fits = next((p for p in queue if p[1] <= free), None)
                if fits is None:  # an idle slot would leave the host less busy than a real run's
                    queue += rng.sample(own, len(own))
                    continue
                queue.remove(fits)
                measured.append(fits)
                free -= fits[1]
    return schedule


def _unmeasured(todo: Sequence[Pair], schedule: list[list[Pair]]) -> list[Pair]:
    measured = {pair for pairs in schedule for pair in pairs}
    return [pair for pair in todo if pair not in measured]


def profile_in_rounds(
    scenario: Scenario,
    *,
    rounds: int,
    steps: int = 30,
    seconds: float | None = None,
    warmup_steps: int = DEFAULT_WARMUP_STEPS,
    progress: ProgressCallback | None = None,
    workdir: Path,
) -> list[ProfileRow]:
    """Measure :func:`round_plan`'s rounds one after another, each round's pairs at once; one row per
    pair, averaged over its samples (module docstring). Job processes write under ``workdir``."""
    schedule = round_plan(scenario, rounds)
    todo, _ = plan(scenario)
    real = scenario.real
    assert real is not None
    samples: dict[Pair, list[ProfileRow]] = defaultdict(list)
    width = max(len(measured) for measured in schedule)
    warm_gpus(scenario, todo, warmup_steps, workdir)
    with ThreadPoolExecutor(max_workers=width) as pool:
        for index, measured in enumerate(schedule):
            if progress is not None:
                progress(index / rounds, f"round {index + 1} of {rounds}: {len(measured)} jobs at once")
            futures = {
                pair: pool.submit(
                    measure,
                    pair[0],
                    pair[1],
                    pair[2],
                    real.workers[pair[2]],
                    threads=real.threads_per_cpu_worker,
                    steps=steps,
                    seconds=seconds,
                    warmup_steps=warmup_steps,
                    workdir=workdir / f"round{index}" / str(slot),
                    seed=scenario.seed,
                )  # fmt: skip
                for slot, pair in enumerate(measured)
            }
            # Every future is waited for before the next round, also when one fails: a failed job must
            # not leave the others training into the next round's measurements.
            errors = [f.exception() for f in futures.values()]
            failed = next((e for e in errors if e is not None), None)
            if failed is not None:
                raise failed
            for pair, future in futures.items():
                samples[pair].append(future.result())
    if progress is not None:
        progress(1.0, "done")
    return [_mean_row(samples[pair]) for pair in todo]


def _mean_row(rows: list[ProfileRow]) -> ProfileRow:
    step_s = fmean(r.step_s for r in rows)
    first = rows[0]
    return ProfileRow(
        job_type=first.job_type,
        scale_factor=first.scale_factor,
        worker_type=first.worker_type,
        throughput=1.0 / step_s,
        load_s=fmean(r.load_s for r in rows),
        save_s=fmean(r.save_s for r in rows),
        startup_s=fmean(r.startup_s for r in rows),
        step_s=step_s,
        mode=ROUNDS,
    )
