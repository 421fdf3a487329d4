"""``clustertwin profile SCENARIO`` for kind gavel: measure the scenario's jobs on its real workers and
write the throughput table that calibrates the simulator (``runtime/gavel/profile.py``)."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from clustertwin.kinds.spec import ProfileRequest
from clustertwin.progress import progress_bar
from clustertwin.runtime.gavel import profile
from clustertwin.runtime.gavel.profile import ProfileRow


def profile_gavel(request: ProfileRequest) -> int:
    """Profile, print the table and the written files; 1 when a job failed."""
    length = {"steps": request.steps} if request.steps is not None else {"seconds": request.seconds}
    scenario = profile.load_for_profiling(request.scenario, request.overrides)
    if request.host:
        return _profile_host(scenario, request.seconds or 6.0)
    out = request.out or profile.default_output(request.scenario)
    profile.check_output(out)
    todo, skipped = profile.plan(scenario)  # every input check, before the first job process starts
    try:
        with progress_bar(f"profiling {scenario.name}") as progress:
            rows = profile.profile_scenario(
                scenario,
                **length,
                progress=progress,
                under_load=request.under_load,
                measured_row=_measured,
                repeats=request.repeats,
            )
    except profile.ProfileError as err:  # a job failed: not bad input, but no traceback either
        print(f"error: {err}", file=sys.stderr)
        return 1
    written = profile.write_profile(rows, out)
    per_lease = f"{request.steps} steps" if request.steps is not None else f"{request.seconds:g} s"
    table = Table(title=f"profile of {scenario.name} ({per_lease} per measured lease)")
    for column in ("job type", "scale", "worker", "steps/s", "load s", "save s", "start-up s"):
        table.add_column(column, justify="left" if column in ("job type", "worker") else "right")
    for r in rows:
        table.add_row(
            r.job_type, str(r.scale_factor), r.worker_type, f"{r.throughput:.3g}",
            f"{r.load_s:.3f}", f"{r.save_s:.3f}", f"{r.startup_s:.2f}",
        )  # fmt: skip
    for job_type, sf, worker_type in skipped:
        table.add_row(job_type, str(sf), worker_type, "too few GPUs", "-", "-", "-")
    Console().print(table)
    for path in written:
        print(path)
    return 0


def _measured(row: ProfileRow) -> None:
    # One line per pair as it is measured: a long profile's log keeps every finished pair if it is cut short.
    print(
        f"measured {row.job_type} x{row.scale_factor} on {row.worker_type}: {row.throughput:.4g} steps/s"
        f" (two leases' difference: {1 / row.two_lease_step_s:.4g}), start-up {row.startup_s:.2f} s,"
        f" load {row.load_s:.3f} s, save {row.save_s:.3f} s",
        file=sys.stderr,
        flush=True,
    )


def _profile_host(scenario, seconds: float) -> int:
    from clustertwin.runtime.gavel.host_profile import measure_host

    try:
        measured = measure_host(scenario, seconds)
    except profile.ProfileError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(
        f"{measured.job_type}: {measured.alone:.4g} steps/s alone, {measured.together:.4g} each with"
        f" {measured.processes} at once on {measured.cores} cores: efficiency {measured.efficiency:.3f}"
    )
    real = scenario.real
    types = [t for t, w in (real.workers.items() if real else ()) if w.device == "cpu"]
    print("cluster:\n  " + measured.yaml(types))
    return 0
