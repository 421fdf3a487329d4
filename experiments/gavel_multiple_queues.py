"""The continuous-multiple trace at 2.6 jobs/h ([Narayanan] §5.7.3, Fig. 5.10/5.11): does a policy's queue
grow (saturation), or do single jobs starve under a steady queue?

    python3 experiments/gavel_multiple_queues.py SEED [--jobs 15000] [--set KEY=VALUE ...]

Simulates ``scenarios/gavel/continuous-multiple.yaml`` with a trace of ``--jobs`` jobs and stops, as
the claim runner does (``reproduce.run_until_last_arrival``), at the first window completion after the
trace's last arrival (or when the window is done). Prints, as JSON: the active jobs every 500 simulated
hours, the active jobs by scale factor at the stop, the window's unfinished jobs with the rounds each
ran, and the window's average JCT when it finished. ``--set policy.name=ftf`` or
``--set "policy.params={aware: false}"`` picks the policy.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from clustertwin.scenarios.load import load_scenario

from clustertwin.errors import InputError
from clustertwin.reproduce import run_until_last_arrival

SCENARIO = "scenarios/gavel/continuous-multiple.yaml"


def queues(seed: int, num_jobs: int, overrides: tuple[str, ...]) -> dict[str, object]:
    scenario = load_scenario(SCENARIO, (f"seed={seed}", *overrides))

    def show(done: float, text: str) -> None:
        print(f"\r{done:6.1%} of the window: {text}", end="", file=sys.stderr, flush=True)

    started = time.process_time()
    tables, simulation = run_until_last_arrival(scenario, num_jobs, show)
    if tables is None:  # stopped past the last arrival: what it made so far
        tables = simulation.tables()
    events, jobs, rounds = tables["events"], tables["jobs"], tables["rounds"]
    moves = events[events["kind"].isin(["admit", "complete"])]
    active = np.cumsum(np.where(moves["kind"] == "admit", 1, -1))
    times_h = moves["time_s"].to_numpy() / 3600
    every = np.arange(0, times_h.max(), 500)
    window = jobs[jobs["in_window"]]
    unfinished = window[window["completion_s"].isna()]
    now = simulation.env.now
    alive = jobs[(jobs["arrival_s"] <= now) & jobs["completion_s"].isna()]
    report: dict[str, object] = {
        "seed": seed,
        "jobs": num_jobs,
        "overrides": list(overrides),
        "cpu_s": round(time.process_time() - started, 1),
        "stop_h": round(now / 3600, 1),
        "last_arrival_h": round(simulation.jobs[-1].spec.arrival_s / 3600, 1),
        "active_every_500h": {
            int(h): int(active[np.searchsorted(times_h, h, side="right") - 1]) if h >= times_h[0] else 0
            for h in every
        },
        "active_at_stop_by_scale_factor": {
            int(k): int(v) for k, v in alive.groupby("scale_factor").size().items()
        },
        "window_unfinished": [
            {
                "job_id": int(job.job_id),
                "job_type": job.job_type,
                "scale_factor": int(job.scale_factor),
                "arrival_h": round(job.arrival_s / 3600, 1),
                "done": round(job.steps_done / job.total_steps, 3),
                "rounds_run": int((rounds["job_id"] == job.job_id).sum()),
            }
            for job in unfinished.itertuples()
        ],
    }
    if unfinished.empty:
        report["window_avg_jct_h"] = round(
            float((window["completion_s"] - window["arrival_s"]).mean() / 3600), 2
        )
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("seed", type=int)
    parser.add_argument("--jobs", type=int, default=15_000, help="trace length (default 15,000)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="scenario override")
    args = parser.parse_args()
    try:
        report = queues(args.seed, args.jobs, tuple(args.set))
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    print(file=sys.stderr)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
