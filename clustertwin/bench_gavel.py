"""``clustertwin bench gavel``: the wall time of one full continuous-single point (heterogeneity-aware
LAS, 36:36:36 GPUs, λ = 5 jobs/h, steady-state window jobs 4000–5000) and the allocation solve time of
LAS, FTF and makespan at 32…2,048 active jobs. For scale, Gavel's own simulator on a 2-core machine takes
about 150 s for that point and its solves at 2,048 jobs take 0.06 s (LAS), 0.5 s (makespan) and 6.7 s
(FTF).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np

from clustertwin.policies.gavel.problem import AllocationInput
from clustertwin.policies.registry import make_policy
from clustertwin.scenarios.load import load_scenario
from clustertwin.sim.gavel.setup import run
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
SIZES = (32, 128, 512, 2048)
POLICIES = (("las", "las"), ("ftf", "ftf"), ("makespan", "makespan"))


def bench_gavel(emit: Callable[[str, object], None]) -> None:
    """Emit the figures as they are measured."""
    emit("sim_full_point", "LAS aware, 36:36:36, 5 jobs/h, window jobs 4000-5000")
    scenario = load_scenario(None, FULL_POINT)
    started = time.perf_counter()
    result = run(scenario)
    emit("sim_full_s", f"{time.perf_counter() - started:.2f}")
    jobs = result.tables["jobs"]
    emit("sim_full_jobs_arrived", int((jobs["arrival_s"] <= result.info["sim_end_s"]).sum()))
    emit("sim_full_rounds", result.info["num_rounds"])
    emit("sim_full_resets", result.info["num_resets"])
    window = jobs[jobs["in_window"]]
    emit("sim_full_avg_jct_h", f"{window['completion_s'].sub(window['arrival_s']).mean() / 3600:.2f}")

    table = ThroughputTable.bundled("simulation")
    for n in SIZES:
        inp = solve_input(table, n, seed=n)
        for label, policy_name in POLICIES:
            policy = make_policy(policy_name, aware=True)
            first, repeat = time_solves(policy, inp, repeats=3)
            emit(f"{label}_solve_first_s_{n}", f"{first:.4f}")
            emit(f"{label}_solve_s_{n}", f"{repeat:.4f}")


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
