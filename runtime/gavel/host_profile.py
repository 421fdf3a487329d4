"""Measuring how a host's busy cores slow each other down: ``cluster.host.efficiency`` (``sim.gavel.host``).

One CPU training process of a scenario's job type trains alone on the host, then as many copies as the
host has cores (over ``real.threads_per_cpu_worker``) train at once, each lease ``seconds`` long and
measured over its second half (``LeaseSummary.window_steps``, free of start-up costs). The efficiency is
the copies' mean rate over the lone one's: what a busy core delivers with every core busy, relative to
one busy core alone (shared memory bandwidth, caches, turbo). Processor sharing itself (more processes
than cores) is the model's part and is not measured here: the copies never outnumber the cores.

Other work on the host lowers both rates; the ratio is meaningful only on a host otherwise idle.
"""

from __future__ import annotations

import concurrent.futures
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from clustertwin.runtime.gavel.profile import run_job_lease
from clustertwin.scenarios.gavel_schema import RealWorker, Scenario

from clustertwin.errors import InputError

_BIG = 10**9  # steps: leases here end by time


@dataclass(frozen=True)
class HostProfile:
    job_type: str
    cores: int  # logical CPUs this process may run on
    processes: int  # copies trained at once
    alone: float  # steps/s of one process alone
    together: float  # mean steps/s of each copy, all at once
    efficiency: float  # together / alone, at most 1

    def yaml(self, types: list[str]) -> str:
        return (
            f"host: {{cores: {self.cores}, types: [{', '.join(types)}], efficiency: {self.efficiency:.3f}}}"
        )


def _rate(report: dict) -> float:
    steps, seconds = int(report["window_steps"]), float(report["window_seconds"])
    if steps > 0 and seconds > 0:
        return steps / seconds
    return float(report["throughput"])


def measure_host(scenario: Scenario, seconds: float = 6.0, job_type: str | None = None) -> HostProfile:
    """Alone, then one copy per core(s of a CPU worker slot) at once; see the module docstring."""
    if scenario.real is None:
        raise InputError(f"{scenario.source}: field real", "profiling the host needs a `real:` section")
    threads = scenario.real.threads_per_cpu_worker
    cores = len(os.sched_getaffinity(0))
    processes = max(1, cores // threads)
    if job_type is None:
        from clustertwin.scenarios.gavel_workload import load_table, trace_jobs

        jobs, _ = trace_jobs(scenario, load_table(scenario))
        job_type = next((j.job_type for j in jobs if j.scale_factor == 1), jobs[0].job_type)
    worker = RealWorker(device="cpu")
    with tempfile.TemporaryDirectory(prefix="clustertwin-host-") as tmp:
        folders = [Path(tmp) / f"p{i}" for i in range(processes)]
        for folder in folders:
            folder.mkdir()

        def lease(folder: Path, length: float) -> float:
            run = run_job_lease(job_type, 1, worker, threads, folder, _BIG, _BIG, scenario.seed, length)
            return _rate(run.report)

        lease(folders[0], 1.0)  # warm caches and leave a checkpoint, as a long-lived worker has
        alone = lease(folders[0], seconds)
        with concurrent.futures.ThreadPoolExecutor(processes) as pool:
            together = list(pool.map(lambda f: lease(f, seconds), folders))
    mean = sum(together) / len(together)
    return HostProfile(job_type, cores, processes, alone, mean, min(1.0, mean / alone) if alone > 0 else 1.0)
