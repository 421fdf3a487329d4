"""``clustertwin bench gavel``: the wall time of one full continuous-single point (heterogeneity-aware
LAS, 36:36:36 GPUs, λ = 5 jobs/h, steady-state window jobs 4000–5000) and the allocation solve time of
LAS, FTF and makespan at 32…2,048 active jobs. For scale, Gavel's own simulator on a 2-core machine takes
about 150 s for that point and its solves at 2,048 jobs take 0.06 s (LAS), 0.5 s (makespan) and 6.7 s
(FTF). ``sim_warmup_s`` is a 20-job run first, in which the process loads the compiled round loops
(``policies.compiled``; compiling them takes ~5 s the first time on a machine). ``sim_full_warm_*`` is
the same point with LAS's optional warm start (``warm_start: true``): faster, and its event log differs
from the default's where the solver's last bits decide a tie. ``sim_full_policy_s`` is the default point's
2,037 allocations replayed alone (:func:`policy_floor`): what the policy costs any simulator that writes
this event log.

``--scale`` (:func:`bench_gavel_scale`) simulates clusters past the paper's: 1,024, 3,200 and 10,000 GPUs
of four types under heterogeneity-aware LAS, ten single-GPU Philly-like jobs per GPU arriving at the
full point's rate per GPU (5 jobs/h per 108 GPUs), every job run to completion. Each size runs in a
fresh process, so its peak memory (``ru_maxrss``) is its own; the per-job-per-round table is streamed to
a Parquet file in chunks, so that it does not set the memory floor. The fourth type is derived, not
measured: ``v100x1``, V100s on single-GPU servers (cloud-style instances), whose throughput is Gavel's
``v100_unconsolidated`` column (a distributed job's workers each on their own server); for the
single-GPU jobs run here it equals the V100's.
"""

from __future__ import annotations

import json
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from clustertwin.policies.gavel.problem import AllocationInput
from clustertwin.policies.registry import make_policy
from clustertwin.scenarios.gavel_schema import Scenario
from clustertwin.scenarios.load import load_scenario
from clustertwin.sim.gavel.setup import build, run
from clustertwin.traces.gavel_generator import generate_gavel_jobs
from clustertwin.traces.gavel_throughputs import ThroughputTable

FULL_POINT = (
    "workload.generate.num_jobs=7000",
    "workload.generate.jobs_per_hour=5.0",
    "workload.generate.scale_factors=single",
    "workload.window=[4000,5000]",
    "policy.name=las",
    "policy.params={aware: true}",
)
# LAS's optional warm start (phase 1 from the previous reset's basis): the same optimum with other rounding,
# so its event log is not the default's.
WARM_START = "policy.params={aware: true, warm_start: true}"
WARM_UP = ("workload.generate.jobs_per_hour=null", "workload.generate.num_jobs=20", "workload.window=null")
SIZES = (32, 128, 512, 2048)
POLICIES = (("las", "las"), ("ftf", "ftf"), ("makespan", "makespan"))


def bench_gavel(emit: Callable[[str, object], None]) -> None:
    """Emit the figures as they are measured."""
    emit("sim_full_point", "LAS aware, 36:36:36, 5 jobs/h, window jobs 4000-5000")
    # A few jobs first: the process loads the compiled round loops once (and compiles them, the first
    # time on a machine), as any later simulation in the same process would find them loaded.
    started = time.perf_counter()
    run(load_scenario(None, WARM_UP))
    emit("sim_warmup_s", f"{time.perf_counter() - started:.2f}")
    for prefix, extra in (("sim_full", ()), ("sim_full_warm", (WARM_START,))):
        scenario = load_scenario(None, (*FULL_POINT, *extra))
        started = time.perf_counter()
        result = run(scenario)
        emit(f"{prefix}_s", f"{time.perf_counter() - started:.2f}")
        if not extra:
            jobs = result.tables["jobs"]
            emit("sim_full_jobs_arrived", int((jobs["arrival_s"] <= result.info["sim_end_s"]).sum()))
        emit(f"{prefix}_rounds", result.info["num_rounds"])
        emit(f"{prefix}_resets", result.info["num_resets"])
        window = result.tables["jobs"][result.tables["jobs"]["in_window"]]
        emit(f"{prefix}_avg_jct_h", f"{window['completion_s'].sub(window['arrival_s']).mean() / 3600:.4f}")
    policy_alone, allocations = policy_floor(load_scenario(None, FULL_POINT))
    emit("sim_full_policy_s", f"{policy_alone:.2f}")
    emit("sim_full_allocations", allocations)

    table = ThroughputTable.bundled("simulation")
    for n in SIZES:
        inp = solve_input(table, n, seed=n)
        for label, policy_name in POLICIES:
            policy = make_policy(policy_name, aware=True)
            first, repeat = time_solves(policy, inp, repeats=3)
            emit(f"{label}_solve_first_s_{n}", f"{first:.4f}")
            emit(f"{label}_solve_s_{n}", f"{repeat:.4f}")


def policy_floor(scenario: Scenario) -> tuple[float, int]:
    """The seconds the point's allocations take on their own: the point is simulated once more with
    every allocation input kept, then LAS allocates each again in a row (an allocation is a function of
    its input; without the warm start nothing carries over). A simulator that writes this event log
    calls the policy on exactly these inputs, so this is its floor, whatever the rest costs."""
    simulation = build(scenario)
    recorder = TimedPolicy(simulation.scheduler.policy, keep_inputs=True)
    simulation.scheduler.policy = recorder
    simulation.run()
    rng = np.random.default_rng(0)
    started = time.perf_counter()
    replayed = [recorder.policy.allocate(inp, rng) for inp in recorder.inputs]
    elapsed = time.perf_counter() - started
    if any(
        not np.array_equal(a.fractions, b.fractions) for a, b in zip(replayed, recorder.outputs, strict=True)
    ):
        raise RuntimeError("an allocation replayed from its input differs from the simulation's")
    return elapsed, len(replayed)


def solve_input(table: ThroughputTable, n: int, seed: int) -> AllocationInput:
    """``n`` active jobs of the continuous-multiple mix, part-way through, on 36:36:36 GPUs."""
    jobs = generate_gavel_jobs(table, num_jobs=n, jobs_per_hour=5.0, seed=seed, scale_factors="multiple")
    types = ("v100", "p100", "k80")
    rng = np.random.default_rng(seed)
    keys = [(j.job_type, j.scale_factor) for j in jobs]
    total = np.array([j.total_steps for j in jobs], dtype=float)
    arrivals = np.array([j.arrival_s for j in jobs])
    return AllocationInput(
        job_ids=np.arange(n),
        worker_types=types,
        num_workers=np.array([36.0, 36.0, 36.0]),
        throughputs=table.isolated_matrix(keys, types),
        scale_factors=np.array([j.scale_factor for j in jobs]),
        weights=np.ones(n),
        remaining_steps=total * rng.uniform(0.1, 1.0, n),
        arrival_times=arrivals,
        now=float(arrivals.max()) + 3600.0,
        iso_elapsed=(arrivals.max() + 3600.0 - arrivals) * rng.uniform(0.2, 1.0, n),
    )


def time_solves(policy, inp: AllocationInput, repeats: int) -> tuple[float, float]:
    """The first solve (including any one-off set-up) and the median of ``repeats`` later ones."""
    rng = np.random.default_rng(0)
    started = time.perf_counter()
    policy.allocate(inp, rng)
    first = time.perf_counter() - started
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        policy.allocate(inp, rng)
        times.append(time.perf_counter() - started)
    return first, statistics.median(times)


SCALE_GPUS = (1_024, 3_200, 10_000)  # a multiple of 4 GPUs per type (4-GPU servers)
JOBS_PER_GPU = 10
SCALE_TYPES = ("v100", "p100", "k80", "v100x1")
# The full point's arrival rate per GPU: 5 jobs/h on 108 GPUs.
JOBS_PER_HOUR_PER_GPU = 5.0 / 108


def bench_gavel_scale(emit: Callable[[str, object], None]) -> None:
    """Emit wall time, rounds, peak memory and solve time of LAS at each of ``SCALE_GPUS``, then the
    per-round cost per active job at each size and its slope (linear fit of CPU seconds per round
    against mean active jobs: CPU time, because wall time beside other work says more about the
    neighbours than about the simulator)."""
    emit("scale_point", "LAS aware, 4 types (v100, p100, k80, v100x1 derived), 10 single-GPU jobs per GPU")
    points = []
    with tempfile.TemporaryDirectory(prefix="gavel-scale-") as folder:
        table = derived_table(Path(folder) / "throughputs.json")
        for n, gpus in enumerate(SCALE_GPUS, start=1):
            # Progress on stderr, so that stdout stays key=value lines.
            print(
                f"scale {n}/{len(SCALE_GPUS)}: simulating {gpus:,} GPUs, {JOBS_PER_GPU * gpus:,} jobs",
                file=sys.stderr,
            )
            # A fresh process per size: its peak memory is its own, not the largest run's so far.
            with ProcessPoolExecutor(1, mp_context=get_context("spawn"), max_tasks_per_child=1) as pool:
                rounds_file = Path(folder) / f"rounds-{gpus}.parquet"
                point = pool.submit(scale_point, gpus, table, rounds_file).result()
            points.append(point)
            tag = f"{gpus // 1000}k" if gpus >= 1000 else str(gpus)
            for key, value in point.items():
                emit(f"scale_{tag}_{key}" if key != "s" else f"scale_{tag}_s", value)
    active = np.array([float(p["mean_active_jobs"]) for p in points])
    per_round = np.array([float(p["run_cpu_s"]) / max(int(p["rounds"]), 1) for p in points])
    slope, intercept = np.polyfit(active, per_round, 1)
    emit("scale_slope_us_per_job_round", f"{slope * 1e6:.2f}")
    emit("scale_intercept_ms_per_round", f"{intercept * 1e3:.3f}")


def derived_table(path: Path) -> str:
    """Gavel's simulation table plus the derived ``v100x1`` type (see the module docstring), isolated
    throughputs only; written to ``path``, which is returned as text for the scenario."""
    from clustertwin.traces import bundled

    raw = json.loads(bundled.GAVEL_SIMULATION_THROUGHPUTS.read_text())
    table = {
        worker: {key: {"null": entry["null"]} for key, entry in raw[worker].items() if "null" in entry}
        for base in ("v100", "p100", "k80")
        for worker in (base, f"{base}_unconsolidated")
    }
    table["v100x1"] = table["v100_unconsolidated"]
    path.write_text(json.dumps(table))
    return str(path)


def scale_overrides(gpus: int, table: str) -> tuple[str, ...]:
    per_type = gpus // len(SCALE_TYPES)
    sizes = ", ".join(f"{t}: {per_type}" for t in SCALE_TYPES)
    servers = ", ".join(f"{t}: {1 if t == 'v100x1' else 4}" for t in SCALE_TYPES)
    return (
        f"throughputs={table}",
        f"cluster.gpus={{{sizes}}}",
        f"cluster.gpus_per_server={{{servers}}}",
        "cluster.prices=null",
        f"workload.generate.num_jobs={JOBS_PER_GPU * gpus}",
        f"workload.generate.jobs_per_hour={JOBS_PER_HOUR_PER_GPU * gpus}",
        "workload.generate.scale_factors=single",
        "workload.window=null",
        "policy.name=las",
        "policy.params={aware: true}",
    )


def scale_point(gpus: int, table: str, rounds_file: Path) -> dict[str, object]:
    """One size, in its own process: figures for :func:`bench_gavel_scale`."""
    from clustertwin.solver_banner import silence_solver_banner

    silence_solver_banner()
    started, cpu_started = time.perf_counter(), time.process_time()
    simulation = build(load_scenario(None, scale_overrides(gpus, table)))
    built, cpu_built = time.perf_counter() - started, time.process_time() - cpu_started
    timed = TimedPolicy(simulation.scheduler.policy)
    simulation.scheduler.policy = timed
    simulation.stream_rounds(rounds_file)
    simulation.run()
    total, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    if sys.platform == "darwin":
        peak_kib //= 1024
    largest, solve_s = max(timed.solves) if timed.solves else (0, 0.0)
    import pyarrow.parquet as pq

    return {
        "s": f"{total:.2f}",
        "cpu_s": f"{cpu:.2f}",  # beside other work, wall time overstates the cost; CPU time does not
        "build_s": f"{built:.2f}",
        "run_s": f"{total - built:.2f}",
        "run_cpu_s": f"{cpu - cpu_built:.2f}",
        "rounds": simulation.num_rounds,
        "resets": simulation.scheduler.num_resets,
        "jobs": len(simulation.jobs),
        "peak_rss_gb": f"{peak_kib / 2**20:.2f}",
        "max_active_jobs": largest,
        "solve_s_at_max_active": f"{solve_s:.4f}",
        "solve_total_s": f"{sum(t for _, t in timed.solves):.2f}",
        "mean_active_jobs": f"{simulation.job_rounds / max(simulation.num_rounds, 1):.1f}",
        "us_per_job_round": f"{(total - built) / max(simulation.job_rounds, 1) * 1e6:.2f}",
        "cpu_us_per_job_round": f"{(cpu - cpu_built) / max(simulation.job_rounds, 1) * 1e6:.2f}",
        "rounds_table_rows": pq.ParquetFile(rounds_file).metadata.num_rows,
    }


class TimedPolicy:
    """A policy that records how long each allocation took and for how many active jobs."""

    def __init__(self, policy, keep_inputs: bool = False) -> None:
        self.policy = policy
        self.keep_inputs = keep_inputs
        self.inputs: list[AllocationInput] = []
        self.outputs: list = []
        self.aware = getattr(policy, "aware", True)
        self.space_sharing = getattr(policy, "space_sharing", False)
        self.name = getattr(policy, "name", "policy")
        self.solves: list[tuple[int, float]] = []

    def allocate(self, inp: AllocationInput, rng: np.random.Generator):
        if self.keep_inputs:
            self.inputs.append(inp)
        started = time.perf_counter()
        allocation = self.policy.allocate(inp, rng)
        self.solves.append((inp.n, time.perf_counter() - started))
        if self.keep_inputs:
            self.outputs.append(allocation)
        return allocation
