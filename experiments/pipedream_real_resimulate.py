"""The own simulation of finished ``--backend real`` pipedream runs again, from their folders (no GPU),
with each part of the model switched on in turn, to attribute the simulation's error:

    python -m experiments.pipedream_real_resimulate RUN_DIR [RUN_DIR ...]

For each run (and its data-parallel baseline, if it ran one) it prints the measured throughput and the
throughput error of:

- ``layer sums``: stages summed from their layers' profile, transfers prefetched, no slowdown (the
  model before stages were timed whole);
- ``profile``: stages timed whole on one idle device (``chunks``), transfers prefetched, no slowdown;
- ``+rendezvous``: the same, a message leaving only once its receiver has reached the op that consumes it;
- ``+slowdown``: and compute slowed by the measured factor while a transfer runs (``stage_times``): the
  run's own ``own_sim_*``;
- ``in-run stage times``: and every stage time as the ranks timed it inside the run (``stage_times``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
from clustertwin.policies.pipedream.partition import StagePlan
from clustertwin.policies.pipedream.schedules import schedule_spec
from clustertwin.scenarios.pipedream_schema import PipeDreamScenario

from clustertwin.pipedream_real import _own_simulation, _schedules

VARIANTS: dict[str, dict[str, bool]] = {
    "layer sums": {"rendezvous": False, "traffic": False, "layer_sums": True},
    "profile": {"rendezvous": False, "traffic": False},
    "+rendezvous": {"traffic": False},
    "+slowdown (own_sim)": {},
    "in-run stage times": {"in_run": True},
}


def _variants(folder: Path) -> list[tuple[str, float, dict[str, float]]]:
    summary = json.loads((folder / "summary.json").read_text())
    scenario = PipeDreamScenario.model_validate(summary["scenario"])
    metrics = {**summary["run"], **summary["metrics"]}
    layers = pd.read_parquet(folder / "layers.parquet")
    chunks = pd.read_parquet(folder / "chunks.parquet")
    times = pd.read_parquet(folder / "stage_times.parquet")
    stages_table = pd.read_parquet(folder / "stages.parquet").sort_values("stage")
    stages = tuple(
        StagePlan(int(r.first_layer), int(r.last_layer), int(r.replicas)) for r in stages_table.itertuples()
    )
    link = {
        "latency_s": metrics["link_latency_us"] * 1e-6,
        "bandwidth_Bps": metrics["link_bandwidth_gbs"] * 1e9,
    }
    world = scenario.cluster.num_devices
    runs = []
    interleaves = schedule_spec(scenario.schedule).interleaves
    replicas = (1,) * world if interleaves else tuple(s.replicas for s in stages)
    plan = ("plan", scenario, replicas, scenario.schedule, stages, "", metrics["throughput_samples_per_s"])
    runs.append(plan)
    if "ddp_throughput_samples_per_s" in metrics:
        flat = scenario.model_copy(update={"chunks_per_device": 1, "in_flight": None})
        ddp_stages = (StagePlan(0, len(layers) - 1, world),)
        runs.append(
            ("ddp", flat, (world,), "1f1b", ddp_stages, "ddp_", metrics["ddp_throughput_samples_per_s"])
        )
    out = []
    for name, sc, reps, sched, st, prefix, real in runs:
        _, timed = _schedules(sc, reps, sched)
        collective = tuple(
            sorted(
                (int(k.rsplit("_r", 1)[1]), v * 1e9)
                for k, v in metrics.items()
                if k.startswith(f"{prefix}sync_busbw_gbs_r")
            )
        )
        mine = times[times["plan"] == name]
        errors = {}
        for label, options in VARIANTS.items():
            opts = dict(options)
            whole = chunks.iloc[0:0] if opts.pop("layer_sums", False) else chunks
            sim = _own_simulation(sc, timed, layers, st, link, collective, whole, mine, **opts)
            errors[label] = sim["throughput_samples_per_s"] / real - 1.0
        out.append((f"{folder.name}{'' if name == 'plan' else ' (DDP)'}", real, errors))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+")
    args = parser.parse_args()
    header = None
    for folder in args.runs:
        for label, real, errors in _variants(Path(folder)):
            if header is None:
                header = ["run", "real samples/s", *errors]
                print("| " + " | ".join(header) + " |")
                print("|" + "---|" * len(header))
            print(f"| {label} | {real:.1f} | " + " | ".join(f"{e:+.1%}" for e in errors.values()) + " |")


if __name__ == "__main__":
    main()
