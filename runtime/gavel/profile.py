"""Profiling a scenario's jobs on its real workers, to calibrate the simulator.

For every (job type, scale factor) of the workload and every worker type of ``real.workers`` this runs
the job process exactly as the real backend would (``runtime.gavel.job_main``, or the user's own program
of a ``workload.jobs`` entry of that type, under torchrun when the job has several ranks) for two leases:

* a warm-up lease of a few steps from scratch. It warms the file-system caches (bytecode, torch's
  libraries), which a cluster's long-lived workers keep warm, and leaves a real checkpoint behind, so
  that the next lease's load is a real load;
* a measured lease that resumes from that checkpoint and saves a new one: what a job pays in every round
  it is (re)started. It trains for ``seconds`` of training time (the default), or for ``steps`` steps when
  no ``seconds`` is given. A fixed step count is no measure on a GPU: 40 steps of a small LSTM take 70 ms
  there, less than the jitter of the first steps' one-time costs that :func:`steady_step_s` subtracts,
  and a 40-step profile on an H100 over-stated the GPU throughputs 2-8x against the real run's rounds.

The steady throughput (steps/s, Gavel's table T) is the measured lease's second half: the steps that
began after half its seconds had passed, over their time (``LeaseSummary.window_steps``), so that none of
a process's one-time costs fall inside. The difference of the two leases' training times
(:func:`steady_step_s`) is the answer for a lease bounded by steps or a second half of fewer than
``_MIN_WINDOW_STEPS`` steps, and is written beside it (``two_lease_step_s``). It assumes the two
processes pay equal one-time costs. On the H100 host, with 8-s leases, the two agreed within 4% on
every pair (docs/algorithms/gavel.md, "Fidelity"); on a 2-core VM loaded by other work, with 2-s leases,
the difference put ResNet-18 on a worker slowed 2x at 26.9 steps/s, faster than the unslowed worker's
11.5, where the window does not depend on how the two processes' start-ups compare.

From the measured lease also come the checkpoint load and save times (the preemption overhead of a lease
that is not renewed, [Narayanan] Table 5.4) and the start-up time: the rest of the wall time of the whole
process tree, i.e. interpreter start, ``import torch``, torchrun's rendezvous and process-group set-up,
the first steps' one-time costs, and exit. A lease of n steps thus takes
``startup_s + load_s + n * step_s + save_s``.

With ``repeats`` > 1 each pair gets that many measured leases, each a process of its own resuming where
the last one saved, and its median. One 8-s lease is one draw from a distribution: in the GPU host's
real runs a pair's 60-s rounds ran at 0.86-1.13x of their median, and a profile's single leases were
off what the run then reached by about 30% on one or two pairs per profile (docs/algorithms/gavel.md,
"Fidelity").

The results are written as a throughput CSV that :meth:`ThroughputTable.from_csv` reads (a scenario
uses it by naming it in ``throughputs:``) and an overhead CSV beside it, whose ``mode`` column says how
each pair was measured.

Two modes (``mode``):

* ``isolated`` (the default): each pair alone on the machine.
* ``under-load``: each pair on a fully busy host, as the real backend's steady state has it. CPU workers
  on one host share the socket's memory bandwidth and last-level cache, which an isolated profile never
  sees: on a 16-core H100 host with 8 single-thread CPU workers and a GPU job training at once, realised
  throughputs were 0.40x (Recommendation on ``cpu``) to 0.98x of isolated ones, and a simulator
  calibrated by the isolated profile under-predicted the makespan by 30%. (Most of Recommendation's
  0.40x, a factor 1.9, was later traced to its subnormal momentum, which job processes now flush:
  ``runtime.gavel.training_env``.) While a pair is measured (its warm-up and its measured lease alike, so
  that :func:`steady_step_s`'s difference sees one load), every
  other CPU worker slot of the cluster (``cluster.gpus[type]`` slots of each worker type whose device is
  ``cpu``, less the ``scale_factor`` slots the measured job takes when it runs on a CPU type) runs a
  background training process (:func:`background_slots`; a user's program of that job type when the
  workload is the user's own, told to train on until killed and to say when it has trained a few steps,
  ``runtime.job.ENV_READY``). What they train is a *mix*: the scenario's
  job types round-robin over the slots, by a fixed slot order, so that each CPU type with enough slots
  carries every job type. A real run's slots hold a mix of the trace's jobs, and job types stress the
  memory system very differently (Recommendation's embedding tables far more than a small convnet), so
  saturating the host with copies of the measured job would over-state the contention of the
  memory-bound types and under-state that of the compute-bound ones. Each background process trains
  like a job of its slot's worker type (``runtime.gavel.lease.Trainer``: the same slowdown, one process per
  slot with ``threads_per_cpu_worker`` threads), has trained a few steps before the first lease
  starts, trains on through the measurements of every pair with the same background (one worker type and
  scale factor), and is killed and reaped when they are done, also on error or Ctrl-C; a background process
  also dies with the profiler (Linux parent-death signal), so no orphan outlives it. GPU slots get no
  background job (a GPU measurement must own its device; a GPU job's host-side load is one core).
  Pinned (below), a cuda worker type's pairs are measured beside the CPU pairs instead, in a thread of
  their own and with no background of their own: the run trains the GPU job alongside the CPU jobs, on a
  core that no CPU slot shares, so the CPU groups' processes (background jobs and the measured CPU job)
  load the host for a GPU pair as the run's CPU jobs do for its GPU job. A GPU pair starts only while a
  CPU group's background is up, and no background stops while a GPU pair runs (the last one waits for
  the last GPU pair). Measured in turn, the GPU scenario's 4 GPU pairs took about 4 of its 12 minutes
  (``--repeats 2``); beside the CPU pairs they should take about a third off the profile.

With ``real.pin_cores`` every process runs on the cores the real run gives the slot it stands for
(:func:`runtime.cores.slot_cores`, which the run's agents use too): the measured job on those of its
worker type's first ``scale_factor`` slots, a background job on those of its slot. With ``repeats`` > 1
a CPU pair's measured leases take turns over its type's slots instead (:func:`lease_slots`): lease r
runs on slot group r mod G, the G consecutive runs of ``scale_factor`` slots. The GPU host's vCPUs
differ in speed by core and over time (three identical Recommendation jobs on three ``cpu`` slots ran at
107, 121 and 131 steps/s in one 60-s round), and the run spreads a pair's jobs over all of its type's
slots, so the median over slots and time is what the run meets; one slot's cores are a biased sample.
Under load, a background job on the rotated group's slots swaps cores with the measured job for that
lease (it moves to the first group's, which hold no background job, and back after), so no two
processes share a core. The warm-up lease, the discarded first GPU lease and a cuda pair's leases stay
on the first slots.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import csv
import functools
import io
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from clustertwin.runtime.cores import SlotCores, pin_child, pin_process, slot_cores
from clustertwin.runtime.gavel.agent import job_command, job_preexec
from clustertwin.runtime.gavel.training_env import training_env
from clustertwin.scenarios.gavel_schema import RealWorker, Scenario
from clustertwin.scenarios.gavel_workload import load_table, trace_jobs
from clustertwin.scenarios.load import load_scenario
from clustertwin.traces.gavel_trace import load_gavel_trace

from clustertwin.atomic import write_atomically, write_text
from clustertwin.errors import InputError

DEFAULT_STEPS = 30
DEFAULT_SECONDS = 10.0
DEFAULT_WARMUP_STEPS = 3
# The step bound of a lease bounded by time, and the total steps of a profiled job (never reached).
_OPEN_ENDED = 10**12
# The lease is bounded by steps, not time; the clock limit and the process timeout only stop a job that
# hangs (a rendezvous that never completes, a deadlocked collective).
_LEASE_SECONDS = 3600.0
_PROCESS_TIMEOUT_S = 1800.0

ISOLATED, UNDER_LOAD = "isolated", "under-load"
# A background process counts as loading the host once it has trained this many steps (its one-time
# costs behind it); it has this long to get there.
_BACKGROUND_READY_STEPS = 2
_BACKGROUND_READY_S = 600.0
_BACKGROUND_STEPS = 10**15  # a background job never finishes; it is killed
# A measured lease's second half gives the throughput when it holds at least this many steps.
_MIN_WINDOW_STEPS = 5

THROUGHPUT_COLUMNS = ("job_type", "scale_factor", "worker_type", "throughput")
OVERHEAD_COLUMNS = (
    "job_type", "scale_factor", "worker_type", "load_s", "save_s", "startup_s", "step_s", "mode",
    "two_lease_step_s",
)  # fmt: skip

ProgressCallback = Callable[[float, str], None]


class ProfileError(RuntimeError):
    """A job process failed or reported something other than the lease it was given."""


@dataclass(frozen=True)
class ProfileRow:
    """What one (job type, scale factor) measured on one worker type."""

    job_type: str
    scale_factor: int
    worker_type: str
    throughput: float  # steps/s of the whole job (all ranks together), as Gavel's tables count
    load_s: float  # checkpoint load (and DDP wrap) at the start of a lease
    save_s: float  # checkpoint save at the end of a lease that is not renewed
    startup_s: float  # process start and exit around load, training and save
    step_s: float  # seconds per step: 1 / throughput
    two_lease_step_s: float  # the same from the two leases' difference (:func:`steady_step_s`), a check
    mode: str = ISOLATED  # ISOLATED or UNDER_LOAD (module docstring)


@dataclass(frozen=True)
class LeaseRun:
    """One job process: what it reported and how long the whole process took."""

    report: dict[str, float]
    wall_s: float


# ------------------------------------------------------------------------------------------ scenario
def load_for_profiling(path: str | Path, overrides: Sequence[str] = ()) -> Scenario:
    """Load a scenario whose ``throughputs`` table may not exist yet (profiling is what writes it).

    The schema rejects a missing table file. When only that stands in the way, the scenario is loaded
    again with Gavel's bundled table in its place; profiling reads no throughputs except to generate a
    synthetic workload, whose job types are then Gavel's.
    """
    try:
        return load_scenario(path, overrides)
    except InputError as first:
        try:
            return load_scenario(path, [*overrides, "throughputs=simulation"])
        except InputError:
            raise first from None


def job_keys(scenario: Scenario) -> list[tuple[str, int]]:
    """Distinct (job type, scale factor) pairs of the workload, in order of first appearance."""
    workload = scenario.workload
    if workload.jobs is not None:  # the user's own programs; their types need no table yet
        return list(dict.fromkeys((job.job_type, job.scale_factor) for job in workload.jobs))
    if workload.trace is not None:
        # No table: the trace may hold job types that no table lists yet.
        jobs = load_gavel_trace(workload.trace, fmt=workload.trace_format)
    else:
        jobs, _ = trace_jobs(scenario, load_table(scenario))
    return list(dict.fromkeys((job.job_type, job.scale_factor) for job in jobs))


def programs(scenario: Scenario) -> dict[str, dict[str, object]]:
    """The user's program of each job type of ``workload.jobs`` (the first job of that type: its command's
    words, working directory and environment, as an agent's catalog holds them), unless
    ``real.commands: builtin`` runs the bundled stand-ins instead; empty for other workloads."""
    real = scenario.real
    jobs = scenario.workload.jobs
    if jobs is None or (real is not None and real.commands == "builtin"):
        return {}
    base = Path(scenario.source).parent if Path(scenario.source).is_file() else Path.cwd()
    found: dict[str, dict[str, object]] = {}
    for job in jobs:
        cwd = str((base / (job.working_dir or ".")).resolve())
        found.setdefault(job.job_type, {"command": shlex.split(job.command), "cwd": cwd, "env": job.env})
    return found


def plan(scenario: Scenario) -> tuple[list[tuple[str, int, str]], list[tuple[str, int, str]]]:
    """(job type, scale factor, worker type) triples to measure, and those skipped because the cluster
    has fewer GPUs of that type than the job needs (the simulator could never place it there).

    Raises InputError, before any process starts, for a scenario without ``real``, a cuda worker on a
    machine without CUDA, and a job type the runtime has no workload for.
    """
    from clustertwin.runtime.workloads import workload_for

    real = scenario.real
    if real is None:
        raise InputError(
            f"{scenario.source}: field real",
            "profiling runs jobs on real workers; add a real section with one entry per worker type,"
            " e.g. real: {workers: {v100: {device: cpu}}}",
        )
    _check_cuda(scenario)
    keys = job_keys(scenario)
    own = programs(scenario)
    for job_type, _ in keys:
        if job_type in own:
            continue
        try:
            workload_for(job_type)
        except KeyError as err:
            raise InputError(f"{scenario.source}: field workload", str(err.args[0])) from None
    todo, skipped = [], []
    for job_type, sf in keys:
        for worker_type in real.workers:
            fits = sf <= scenario.cluster.gpus[worker_type]
            (todo if fits else skipped).append((job_type, sf, worker_type))
    return todo, skipped


def _check_cuda(scenario: Scenario) -> None:
    assert scenario.real is not None
    cuda = {name: w for name, w in scenario.real.workers.items() if w.device == "cuda"}
    if not cuda:
        return
    import torch

    if not torch.cuda.is_available():
        raise InputError(
            f"{scenario.source}: field real.workers.{next(iter(cuda))}.device",
            "cuda is asked for but this machine has no CUDA device (or torch was built without CUDA);"
            " use device: cpu",
        )
    count = torch.cuda.device_count()
    for name, worker in cuda.items():
        bad = [i for i in worker.cuda_devices or () if i >= count]
        if bad:
            raise InputError(
                f"{scenario.source}: field real.workers.{name}.cuda_devices",
                f"device id(s) {bad} do not exist; this machine has {count} CUDA device(s)",
            )


# ------------------------------------------------------------------------------------------ measuring
def profile_scenario(
    scenario: Scenario,
    *,
    steps: int = DEFAULT_STEPS,
    seconds: float | None = None,
    warmup_steps: int = DEFAULT_WARMUP_STEPS,
    progress: ProgressCallback | None = None,
    under_load: bool = False,
    measured_row: Callable[[ProfileRow], None] | None = None,
    repeats: int = 1,
) -> list[ProfileRow]:
    """Measure every pair of :func:`plan`, one at a time (concurrent measured jobs would share cores
    and skew each other's numbers); with ``under_load`` each on a busy host (module docstring), where
    pinned a cuda worker type's pairs are measured beside the CPU pairs, on cores of their own. The
    measured lease lasts ``seconds`` of training when given, else ``steps`` steps. ``measured_row`` is
    called with each pair's row as soon as it is measured, so that a profile cut short keeps its pairs.
    ``repeats`` measured leases per pair give its median (:func:`measure`)."""
    if steps < 1 or warmup_steps < 1:
        raise InputError("--steps", f"steps and warm-up steps must be >= 1 (got {steps}, {warmup_steps})")
    if seconds is not None and not seconds > 0:
        raise InputError("--seconds", f"a measured lease needs a positive length (got {seconds})")
    if repeats < 1:
        raise InputError("--repeats", f"each pair needs at least one measured lease (got {repeats})")
    todo, _ = plan(scenario)
    real = scenario.real
    assert real is not None
    cores = slot_cores(scenario) if real.pin_cores else None
    job_types = list(dict.fromkeys(job_type for job_type, _ in job_keys(scenario)))
    own = programs(scenario)
    mode = UNDER_LOAD if under_load else ISOLATED
    with tempfile.TemporaryDirectory(prefix="clustertwin-profile-") as scratch:
        # The first process to use a GPU pays one-time costs (driver and kernel caches) that later jobs
        # never see; a discarded lease per cuda worker type keeps them out of the first measured pair.
        for worker_type in sorted({w for _, _, w in todo if real.workers[w].device == "cuda"}):
            job_type, sf, _ = next(item for item in todo if item[2] == worker_type)
            measure(
                job_type, sf, worker_type, real.workers[worker_type], threads=real.threads_per_cpu_worker,
                steps=warmup_steps, warmup_steps=warmup_steps, workdir=Path(scratch) / f"warm-{worker_type}",
                seed=scenario.seed, cores=_measured_cores(cores, worker_type, sf), program=own.get(job_type),
            )  # fmt: skip
        # Every pair of one worker type and scale factor sees the same background (the measured job
        # takes the same slots' place), so the background starts once per such group and trains on
        # between its pairs: 3 starts instead of 12 for scenarios/gavel-real-gpu.yaml.
        groups: dict[tuple[str, int], list[int]] = {}
        for index, (_, sf, worker_type) in enumerate(todo):
            groups.setdefault((worker_type, sf), []).append(index)
        # Pinned under load, the cuda groups' pairs are measured in a thread of their own beside the CPU
        # groups, whose processes load the host for them (module docstring).
        beside = [key for key in groups if real.workers[key[0]].device == "cuda"]
        if not (under_load and cores is not None and len(beside) < len(groups)):
            beside = []
        measured: dict[int, ProfileRow] = {}
        lock = threading.Lock()  # measured, progress and measured_row are shared by both threads
        gate = _LoadGate()

        def measure_pair(index: int, load: str, placement: Callable | None = None) -> None:
            job_type, sf, worker_type = todo[index]
            if progress is not None:
                with lock:
                    progress(len(measured) / len(todo), f"{job_type} x{sf} on {worker_type}{load}")
            row = measure(
                job_type,
                sf,
                worker_type,
                real.workers[worker_type],
                threads=real.threads_per_cpu_worker,
                steps=steps,
                seconds=seconds,
                warmup_steps=warmup_steps,
                workdir=Path(scratch) / str(index),
                seed=scenario.seed,
                repeats=repeats,
                cores=_measured_cores(cores, worker_type, sf),
                placement=placement,
                program=own.get(job_type),
            )
            with lock:
                measured[index] = replace(row, mode=mode)
                if measured_row is not None:
                    measured_row(measured[index])

        def measure_beside() -> None:
            for index in (index for key in beside for index in groups[key]):
                with gate.pair() as loaded:
                    if not loaded:
                        return  # the CPU side failed
                    measure_pair(index, " under load (beside the CPU pairs)")

        in_turn = [key for key in groups if key not in beside]
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            cuda = pool.submit(measure_beside) if beside else None
            try:
                for n, (worker_type, sf) in enumerate(in_turn):
                    slots = background_slots(scenario, worker_type, sf, job_types) if under_load else []
                    load = f" under load ({len(slots)} background jobs)" if under_load else ""
                    workdir = Path(scratch) / f"load-{worker_type}-{sf}"
                    with background_load(scenario, slots, workdir, cores) as started:
                        gate.up()
                        # Pinned, a CPU pair's measured leases take turns over its type's slots (module
                        # docstring).
                        placement = None
                        if cores is not None and real.workers[worker_type].device == "cpu":
                            ours = zip(slots, started, strict=True)
                            movable = [(slot, bg) for (w, slot, _), bg in ours if w == worker_type]
                            placement = functools.partial(_rotated_lease, cores[worker_type], sf, movable)
                        for index in groups[(worker_type, sf)]:
                            if cuda is not None and cuda.done():
                                cuda.result()  # a failed GPU pair ends the profile now
                            measure_pair(index, load, placement)
                        if cuda is not None and n == len(in_turn) - 1:
                            cuda.result()  # the last background loads the host until the GPU pairs end
                        gate.down()
            finally:
                gate.close()  # a GPU pair waiting for a load that never comes measures nothing
        rows = [measured[index] for index in range(len(todo))]
    if progress is not None:
        progress(1.0, "done")
    return rows


def _measured_cores(cores: SlotCores | None, worker_type: str, scale_factor: int) -> frozenset[int] | None:
    """Pinned, the cores of a measured job: those of its worker type's first ``scale_factor`` slots, which
    :func:`background_slots` leaves to it (and whose devices a cuda type's job is given)."""
    return None if cores is None else frozenset().union(*cores[worker_type][:scale_factor])


def lease_slots(slots: int, scale_factor: int, lease: int) -> range:
    """The slots (indices among its worker type's ``slots``) whose cores measured lease ``lease`` (0, 1,
    ...) of a pinned CPU pair runs on: the leases take turns over the type's groups of ``scale_factor``
    consecutive slots, group 0 (the first slots, the warm-up's) first, and wrap around."""
    first = lease % (slots // scale_factor) * scale_factor
    return range(first, first + scale_factor)


@contextlib.contextmanager
def _rotated_lease(
    type_slots: Sequence[Collection[int]],
    scale_factor: int,
    backgrounds: Sequence[tuple[int, Background]],
    lease: int,
) -> Iterator[frozenset[int]]:
    """Yield the cores of measured lease ``lease`` (:func:`lease_slots`) of a pair whose type's slots have
    ``type_slots`` cores, clearing them for it: each background job of ``backgrounds`` (slot index among
    the type's, process) on those slots moves to the matching slot of group 0, whose cores the measured
    job leaves free, for the ``with`` body, and back to its own after."""
    group = lease_slots(len(type_slots), scale_factor, lease)
    moves = [
        (bg, type_slots[slot - group.start], type_slots[slot]) for slot, bg in backgrounds if slot in group
    ]
    try:
        for bg, there, _ in moves:
            _repin(bg, there)
        yield frozenset().union(*(type_slots[i] for i in group))
    finally:
        for bg, _, home in moves:
            _repin(bg, home)


def _repin(bg: Background, cores: Collection[int]) -> None:
    # A background job that died is no error here: background_load reports it when the pairs are done.
    with contextlib.suppress(ProcessLookupError):
        pin_process(bg.process.pid, cores)


class _LoadGate:
    """Between the CPU groups and the GPU pairs measured beside them (:func:`profile_scenario`): a GPU
    pair starts only while a CPU group's background is up, and no background stops while one runs, so
    that every GPU pair, warm-up and measured leases alike, sees the loaded host from start to end."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._up = self._busy = self._closed = False

    def up(self) -> None:
        """A CPU group's background is ready."""
        with self._changed:
            self._up = True
            self._changed.notify_all()

    def down(self) -> None:
        """A CPU group's background is about to stop: start no GPU pair, wait for the one in flight."""
        with self._changed:
            self._up = False
            self._changed.wait_for(lambda: not self._busy)

    def close(self) -> None:
        """The CPU groups are done, or failed: a GPU pair not yet started never starts."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    @contextlib.contextmanager
    def pair(self) -> Iterator[bool]:
        """Hold the load for one GPU pair, once a background is up; yields False (measure nothing) once
        closed."""
        with self._changed:
            self._changed.wait_for(lambda: self._up or self._closed)
            loaded = self._busy = not self._closed
        try:
            yield loaded
        finally:
            with self._changed:
                self._busy = False
                self._changed.notify_all()


# ------------------------------------------------------------------------------------------ load
def background_slots(
    scenario: Scenario, worker_type: str, scale_factor: int, job_types: Sequence[str]
) -> list[tuple[str, int, str]]:
    """(worker type, slot, job type) of each background process while a job of ``scale_factor`` ranks is
    measured on ``worker_type``: one per CPU worker slot the measured job does not take, with the slot's
    index among its type's slots.

    The CPU slots are numbered in the order of ``real.workers`` (``cluster.gpus[type]`` slots per type)
    and slot k trains ``job_types[k % len(job_types)]`` whichever pair is measured: a fixed mix, into
    which the measured job steps by taking the place of the first ``scale_factor`` slots of its type.
    """
    real = scenario.real
    assert real is not None
    if not job_types:
        return []
    slots: list[tuple[str, str]] = []
    k = 0
    for name, worker in real.workers.items():
        if worker.device != "cpu":
            continue
        taken = scale_factor if name == worker_type else 0
        for i in range(scenario.cluster.gpus[name]):
            if i >= taken:
                slots.append((name, i, job_types[k % len(job_types)]))
            k += 1
    return slots


@dataclass
class Background:
    """One background training process and the files it writes."""

    worker_type: str
    job_type: str
    process: subprocess.Popen
    ready: Path  # written once it has trained _BACKGROUND_READY_STEPS steps
    log: Path  # its stderr


@contextlib.contextmanager
def background_load(
    scenario: Scenario, slots: Sequence[tuple[str, int, str]], workdir: Path, cores: SlotCores | None = None
) -> Iterator[list[Background]]:
    """Run a background training process per slot while the ``with`` body runs (on the slot's cores when
    ``cores`` are given).

    The body starts once every process has trained a few steps. The processes are killed and reaped
    when it ends, however it ends; a process that died meanwhile fails the measurement (its host was
    not as busy as it claims).
    """
    started: list[Background] = []
    try:
        for index, (worker_type, slot, job_type) in enumerate(slots):
            pinned = None if cores is None else cores[worker_type][slot]
            started.append(_start_background(scenario, worker_type, job_type, workdir / str(index), pinned))
        _wait_ready(started)
        yield started
        for bg in started:
            if bg.process.poll() is not None:
                raise ProfileError(f"{_describe(bg)} exited during the measurement:\n{_tail(bg.log)}")
    finally:
        _stop(started)


def _start_background(
    scenario: Scenario, worker_type: str, job_type: str, workdir: Path, cores: Collection[int] | None
) -> Background:
    real = scenario.real
    assert real is not None
    worker = real.workers[worker_type]
    workdir.mkdir(parents=True, exist_ok=True)
    ready, log = workdir / "ready", workdir / "stderr.log"
    program = programs(scenario).get(job_type)
    if program is not None:
        threads = real.threads_per_cpu_worker
        return _start_program_background(program, worker_type, worker, threads, ready, log, cores, job_type)
    command = [
        sys.executable, "-m", "clustertwin.runtime.gavel.profile",
        "--job-type", job_type,
        "--slowdown", repr(worker.slowdown),
        "--seed", str(scenario.seed),
        "--ready", str(ready),
        "--parent", str(os.getpid()),
    ]  # fmt: skip
    env = training_env(_job_env(), threads=real.threads_per_cpu_worker)
    with log.open("w") as stderr:
        process = subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            preexec_fn=pin_child(cores),
        )
    return Background(worker_type, job_type, process, ready, log)


def _start_program_background(
    program: dict[str, object],
    worker_type: str,
    worker: RealWorker,
    threads: int,
    ready: Path,
    log: Path,
    cores: Collection[int] | None,
    job_type: str,
) -> Background:
    """A user's program as a background job: one lease that never ends, no checkpoint, ``ready`` written
    once it has trained ``runtime.job.READY_STEPS`` steps; it dies with the profiler."""
    lease = {
        "CLUSTERTWIN_TOTAL_STEPS": str(_BACKGROUND_STEPS), "CLUSTERTWIN_LEASE_STEPS": str(_BACKGROUND_STEPS),
        "CLUSTERTWIN_LEASE_SECONDS": repr(float(_BACKGROUND_STEPS)), "CLUSTERTWIN_READY": str(ready),
    }  # fmt: skip
    with log.open("w") as stderr:
        process = subprocess.Popen(
            job_command(program, 1, worker.device, 0),
            cwd=program["cwd"],  # type: ignore[arg-type]
            env=program_env(program, worker, threads, [], lease),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            preexec_fn=job_preexec(None if cores is None else frozenset(cores)),
        )
    return Background(worker_type, job_type, process, ready, log)


def _wait_ready(started: Sequence[Background]) -> None:
    deadline = time.monotonic() + _BACKGROUND_READY_S
    waiting = list(started)
    while waiting:
        for bg in waiting:
            if bg.process.poll() is not None and not bg.ready.is_file():
                raise ProfileError(
                    f"{_describe(bg)} exited with status {bg.process.returncode} before it trained:\n"
                    f"{_tail(bg.log)}"
                )
        waiting = [bg for bg in waiting if not bg.ready.is_file()]
        if waiting and time.monotonic() > deadline:
            raise ProfileError(f"{_describe(waiting[0])} did not start training in {_BACKGROUND_READY_S} s")
        if waiting:
            time.sleep(0.05)


def _stop(started: Sequence[Background]) -> None:
    """Kill every process first (none keeps loading the host while another is reaped), then reap."""
    for bg in started:
        if bg.process.poll() is None:
            bg.process.kill()
    for bg in started:
        bg.process.wait()


def _describe(bg: Background) -> str:
    return f"background job {bg.job_type} on a {bg.worker_type} slot (pid {bg.process.pid})"


def _tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""


def background_main(argv: Sequence[str] | None = None) -> int:
    """A background process (``python -m clustertwin.runtime.gavel.profile --job-type T --ready FILE ...``).

    Trains ``T`` on the CPU from scratch, as a job of its slot's worker type would (same ``Trainer``,
    same slowdown; the threads come from ``OMP_NUM_THREADS``), writes ``FILE`` after a few steps and
    trains on until it is killed. It saves nothing. It dies with its parent (the profiler).
    """
    parser = argparse.ArgumentParser(description="Load the host: train a job until killed.")
    parser.add_argument("--job-type", required=True)
    parser.add_argument("--slowdown", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ready", type=Path, required=True)
    parser.add_argument("--parent", type=int, required=True, help="pid of the profiler")
    args = parser.parse_args(argv)

    from clustertwin.runtime.gavel.lease import Lease, Trainer
    from clustertwin.runtime.gavel.training_env import flush_subnormals
    from clustertwin.runtime.launch import die_with_parent
    from clustertwin.runtime.workloads import workload_for

    die_with_parent()
    flush_subnormals()  # as every job process does (runtime.gavel.job_main)
    if os.getppid() != args.parent:  # the profiler died before the death signal was armed
        return 1
    checkpoint = args.ready.with_name("never-saved.pt")
    trainer = Trainer(
        workload_for(args.job_type), checkpoint, _BACKGROUND_STEPS, seed=args.seed, slowdown=args.slowdown
    )
    try:
        trainer.train(Lease(_BACKGROUND_READY_STEPS, _LEASE_SECONDS))
        args.ready.write_text(f"{os.getpid()}\n")
        while True:
            trainer.train(Lease(_BACKGROUND_STEPS, _LEASE_SECONDS))
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group; the profiler cleans up
        return 130


def measure(
    job_type: str,
    scale_factor: int,
    worker_type: str,
    worker: RealWorker,
    *,
    threads: int,
    steps: int,
    warmup_steps: int,
    workdir: Path,
    seed: int = 0,
    seconds: float | None = None,
    repeats: int = 1,
    cores: Collection[int] | None = None,
    placement: Callable[[int], contextlib.AbstractContextManager[Collection[int] | None]] | None = None,
    program: dict[str, object] | None = None,
) -> ProfileRow:
    """Warm-up lease, then ``repeats`` measured leases (``seconds`` of training if given, else ``steps``
    steps), each a process of its own resuming where the last one saved, of one job on one worker type
    (on ``cores`` only, when given; measured lease r on the cores that ``placement(r)``, a context held
    for the lease, yields, when given). ``program``: the user's program of the job type (:func:`programs`),
    else the bundled stand-in runs. The row is the measured lease of the median throughput (the lower
    middle one for an even count)."""
    workdir.mkdir(parents=True, exist_ok=True)
    what = f"{job_type} x{scale_factor} on {worker_type}"
    total = warmup_steps + repeats * steps if seconds is None else _OPEN_ENDED
    lease = (job_type, scale_factor, worker, threads, workdir)
    warmup = run_job_lease(*lease, warmup_steps, total, seed, cores=cores, program=program)
    warmup = _checked(warmup, 0, warmup_steps, what)
    rows, start = [], warmup_steps
    for r in range(repeats):
        with contextlib.nullcontext(cores) if placement is None else placement(r) as lease_cores:
            if seconds is None:
                run = run_job_lease(*lease, steps, total, seed, cores=lease_cores, program=program)
            else:
                run = run_job_lease(
                    *lease, _OPEN_ENDED, total, seed, max_seconds=seconds, cores=lease_cores, program=program
                )
        report = _checked(run, start, steps if seconds is None else None, what)
        trained = int(report["end_step"]) - start
        start = int(report["end_step"])
        # Every measured lease is a fresh process, as the warm-up was: the same one-time costs to cancel.
        two_lease_s = steady_step_s(warmup["seconds"], warmup_steps, report["seconds"], trained)
        window_steps = int(report["window_steps"])
        step_s = report["window_seconds"] / window_steps if window_steps >= _MIN_WINDOW_STEPS else two_lease_s
        rows.append(
            ProfileRow(
                job_type=job_type,
                scale_factor=scale_factor,
                worker_type=worker_type,
                throughput=1.0 / step_s,
                load_s=report["load_s"],
                save_s=report["save_s"],
                # Everything else a restarted lease pays beyond steady training, its first slow steps
                # included, so that startup + load + steps * step_s + save is the lease's wall time.
                startup_s=max(run.wall_s - report["load_s"] - report["save_s"] - trained * step_s, 0.0),
                step_s=step_s,
                two_lease_step_s=two_lease_s,
            )
        )
    return sorted(rows, key=lambda row: row.throughput)[(len(rows) - 1) // 2]


def steady_step_s(short_s: float, short_steps: int, long_s: float, long_steps: int) -> float:
    """Seconds per step once a process is warm, from two leases' training times.

    Every lease is a fresh process, so each one's first steps pay one-time costs (lazy kernel and
    allocator set-up, cuDNN autotuning on GPUs). Both leases pay the same, so it cancels in the
    difference. On a GPU a tiny model's first step can cost as much as a hundred steady ones, and a
    plain average would understate the throughput several times over. Where the difference is not
    usable (equal lengths, or noise making it non-positive) the long lease's average is the answer.
    """
    if long_steps > short_steps:
        per_step = (long_s - short_s) / (long_steps - short_steps)
        if per_step > 0:
            return per_step
    return long_s / long_steps


def _checked(run: LeaseRun, start: int, steps: int | None, what: str) -> dict[str, float]:
    """The lease's report, if it trained from ``start`` exactly ``steps`` steps (``None``: a lease bounded
    by time, at least one step)."""
    report = run.report
    first, end = int(report["start_step"]), int(report["end_step"])
    good = end == start + steps if steps is not None else end > start
    if first != start or not good or report["seconds"] <= 0:
        expected = f"{start}..{start + steps}" if steps is not None else f"{start}.. (at least one step)"
        raise ProfileError(
            f"{what}: expected steps {expected}, the job reported"
            f" {report['start_step']}..{report['end_step']} in {report['seconds']} s"
        )
    return report


def run_job_lease(
    job_type: str,
    scale_factor: int,
    worker: RealWorker,
    threads: int,
    workdir: Path,
    max_steps: int,
    total_steps: int,
    seed: int,
    max_seconds: float = _LEASE_SECONDS,
    cores: Collection[int] | None = None,
    program: dict[str, object] | None = None,
) -> LeaseRun:
    """Start the job process for one lease (torchrun with ``scale_factor`` ranks when > 1, on ``cores``
    only when given) and wait: the bundled stand-in of ``job_type``, or the user's ``program``
    (:func:`programs`), told its lease by its environment (``runtime.job``) as an agent tells it."""
    report_path = workdir / "report.json"
    report_path.unlink(missing_ok=True)  # a stale report must not pass for this lease's
    if program is not None:
        return _run_program_lease(
            program, scale_factor, worker, threads, workdir, max_steps, total_steps, max_seconds, cores
        )
    job_args = [
        "-m", "clustertwin.runtime.gavel.job_main",
        "--job-type", job_type,
        "--checkpoint", str(workdir / "checkpoint.pt"),
        "--report", str(report_path),
        "--max-steps", str(max_steps),
        "--max-seconds", repr(max_seconds),
        "--total-steps", str(total_steps),
        "--device", worker.device,
        "--slowdown", repr(worker.slowdown),
        "--seed", str(seed),
    ]  # fmt: skip
    launcher = [sys.executable]
    if scale_factor > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(scale_factor)]
    env = _job_env()
    if worker.device == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, (worker.cuda_devices or [])[:scale_factor]))
    else:
        env["OMP_NUM_THREADS"] = str(threads)  # per rank, as the real backend gives each CPU worker
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [*launcher, *job_args],
            env=env,
            capture_output=True,
            text=True,
            timeout=_PROCESS_TIMEOUT_S,
            preexec_fn=pin_child(cores),
        )
    except subprocess.TimeoutExpired:
        raise ProfileError(
            f"{job_type} x{scale_factor}: the job process ran past {_PROCESS_TIMEOUT_S} s"
        ) from None
    wall_s = time.perf_counter() - started
    return _lease_run(done, report_path, f"{job_type} x{scale_factor} on {worker.device}", wall_s)


def _lease_run(done: subprocess.CompletedProcess, report_path: Path, what: str, wall_s: float) -> LeaseRun:
    if done.returncode != 0 or not report_path.is_file():
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise ProfileError(
            f"{what}: the job process exited with status"
            f" {done.returncode}{'' if report_path.is_file() else ' and wrote no report'}:\n{tail}"
        )
    return LeaseRun(json.loads(report_path.read_text()), wall_s)


def program_env(
    program: dict[str, object], worker: RealWorker, threads: int, gpus: Sequence[int], lease: dict[str, str]
) -> dict[str, str]:
    """A user program's environment, as an agent gives it (``runtime.gavel.agent``): the job's own
    variables, the heap tunables and threads, its worker type's device and slowdown, only ``gpus``
    visible, and ``lease``'s job-API variables (``runtime.job``); no control channel."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("CLUSTERTWIN_")}
    env = training_env({**base, **program["env"]}, threads=threads)  # type: ignore[dict-item]
    env |= {
        "CLUSTERTWIN_DEVICE": worker.device,
        "CLUSTERTWIN_SLOWDOWN": repr(float(worker.slowdown)),
        "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus)),
        **lease,
    }
    return env


def _run_program_lease(
    program: dict[str, object],
    scale_factor: int,
    worker: RealWorker,
    threads: int,
    workdir: Path,
    max_steps: int,
    total_steps: int,
    max_seconds: float,
    cores: Collection[int] | None,
) -> LeaseRun:
    report_path = workdir / "report.json"
    gpus = (worker.cuda_devices or [])[:scale_factor] if worker.device == "cuda" else []
    lease = {
        "CLUSTERTWIN_CHECKPOINT": str(workdir / "checkpoint.pt"), "CLUSTERTWIN_REPORT": str(report_path),
        "CLUSTERTWIN_LEASE_STEPS": str(max_steps), "CLUSTERTWIN_LEASE_SECONDS": repr(float(max_seconds)),
        "CLUSTERTWIN_TOTAL_STEPS": str(total_steps),
    }  # fmt: skip
    command = job_command(program, scale_factor, worker.device, 0)
    what = f"{shlex.join(program['command'])} x{scale_factor} on {worker.device}"  # type: ignore[arg-type]
    env = program_env(program, worker, threads, gpus, lease)
    started = time.perf_counter()
    try:
        done = subprocess.run(
            command, cwd=program["cwd"], env=env, capture_output=True, text=True,  # type: ignore[arg-type]
            timeout=_PROCESS_TIMEOUT_S, preexec_fn=pin_child(cores),
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise ProfileError(f"{what}: the job process ran past {_PROCESS_TIMEOUT_S} s") from None
    except OSError as err:
        raise ProfileError(f"{what}: the job's command could not start: {err}") from None
    return _lease_run(done, report_path, what, time.perf_counter() - started)


def _job_env() -> dict[str, str]:
    """A job process's environment, as a worker agent gives it (``runtime.gavel.training_env``)."""
    return training_env(dict(os.environ))


# ------------------------------------------------------------------------------------------ output
def default_output(scenario_path: str | Path) -> Path:
    """``<scenario-stem>.throughputs.csv`` next to the scenario file."""
    path = Path(scenario_path)
    return path.with_name(f"{path.stem}.throughputs.csv")


def overheads_path(throughputs_csv: Path) -> Path:
    """The overhead CSV beside a throughput CSV: ``x.throughputs.csv`` -> ``x.overheads.csv``."""
    name = throughputs_csv.name
    stem = (
        name.removesuffix(".throughputs.csv") if name.endswith(".throughputs.csv") else throughputs_csv.stem
    )
    return throughputs_csv.with_name(f"{stem}.overheads.csv")


def check_output(out: Path) -> None:
    """Fail before profiling, not after minutes of it, when the results could not be written."""
    if out.suffix.lower() != ".csv":
        raise InputError(
            f"--out {out}", "the throughput table must be a .csv file (the simulator reads it by suffix)"
        )
    for path in (out, overheads_path(out)):
        if path.is_dir():
            raise InputError(f"--out {out}", f"{path} is a folder")
    parent = out.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise InputError(f"--out {out}", f"cannot create files under {parent}")


def write_profile(rows: Sequence[ProfileRow], out: Path) -> tuple[Path, Path]:
    """Write the throughput CSV at ``out`` and the overhead CSV beside it; returns both paths.

    Both files are complete before the throughput table is renamed into place, so a crash leaves the
    previous table (not a table without its overheads, or a half-written table a simulation would read).
    """
    throughputs = [(r.job_type, r.scale_factor, r.worker_type, _number(r.throughput)) for r in rows]
    overheads = [
        (
            r.job_type,
            r.scale_factor,
            r.worker_type,
            *map(_number, (r.load_s, r.save_s, r.startup_s, r.step_s)),
            r.mode,
            _number(r.two_lease_step_s),
        )
        for r in rows
    ]
    out.parent.mkdir(parents=True, exist_ok=True)

    def write_both(staged_throughputs: Path) -> None:
        # The overheads go into place while the throughput table is still staged: a failure in either
        # write leaves the old throughput table, and only the last rename publishes the new pair.
        text = _csv_text(THROUGHPUT_COLUMNS, throughputs)
        staged_throughputs.write_text(text, encoding="utf-8", newline="")
        write_text(overheads_path(out), _csv_text(OVERHEAD_COLUMNS, overheads))

    return write_atomically(out, write_both), overheads_path(out)


def _number(value: float) -> str:
    return f"{value:.6g}"  # measurements carry no more than a few significant digits


def _csv_text(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


if __name__ == "__main__":
    raise SystemExit(background_main())
