"""Headline metrics of a FlexRR run ([Harlap], §3.4), from its event tables and info.

``time_per_iteration_s`` is the paper's speed metric (§3.4.3: overall run time / number of iterations);
``vs_ideal`` divides it by the Ideal bound computed from the same straggler realisation.

Statistical efficiency (scenario section ``convergence``; NaN without it): ``predicted_iterations_to_
target`` is the convergence model's prediction for the run's slack. ``iterations_to_target`` is that
prediction in simulation and, for a real run with ``convergence.target_loss``, what the run measured on
its loss curve (NaN when it never reached the target); ``time_to_target_s`` is time per iteration x
``iterations_to_target``, so comparing a simulation with a real run compares the model with reality.
A real run also reports ``initial_loss`` and ``final_loss``.
"""

from __future__ import annotations

import math

from clustertwin.scenarios.results import RunResult


def flexrr_metrics(result: RunResult) -> dict[str, float]:
    """Flat metrics of one FlexRR run (every run has the same keys; NaN where undefined)."""
    info = result.info
    iterations = result.tables["iterations"]
    commits = result.tables["commits"]
    messages = result.tables["messages"]
    n_iter = int(info["iterations"])
    makespan = float(info["makespan_s"])
    ideal = float(info["ideal_s"])
    total = float(info["total_items"])
    sizes = commits["end_item"] - commits["start_item"]
    helped = float(sizes[commits["kind"] == "help"].sum())
    reclaimed = float(sizes[commits["kind"] == "reclaimed"].sum())
    durations = iterations["end_s"] - iterations["start_s"]
    waits = iterations["end_s"] - iterations["own_done_s"]
    worker_iterations = max(len(iterations), 1)
    tpi = makespan / n_iter
    predicted = float(info.get("iterations_to_target", math.nan))
    needed = float(info.get("measured_iterations_to_target", predicted))
    losses = [float(x) for x in str(info.get("loss_per_iteration", "")).split(",") if x]
    return {
        "time_per_iteration_s": tpi,
        "ideal_per_iteration_s": ideal / n_iter,
        "vs_ideal": makespan / ideal if ideal > 0 else math.nan,
        "makespan_s": makespan,
        "reassigned_fraction": helped / total if total else math.nan,
        "reclaimed_fraction": reclaimed / total if total else math.nan,
        "wasted_fraction": float(info.get("wasted_items", 0)) / total if total else math.nan,
        "mean_iteration_s": float(durations.mean()) if len(durations) else math.nan,
        "mean_wait_for_helpers_s": float(waits.mean()) if len(waits) else math.nan,
        "do_this_per_worker_iteration": float((messages["kind"] == "DoThis").sum()) / worker_iterations,
        "messages_per_worker_iteration": float(len(messages)) / worker_iterations,
        "events": float(info.get("events", math.nan)),
        "wall_s": float(info.get("wall_s", math.nan)),
        "predicted_iterations_to_target": predicted,
        "iterations_to_target": needed,
        "time_to_target_s": tpi * needed,
        "initial_loss": losses[0] if losses else math.nan,
        "final_loss": losses[-1] if losses else math.nan,
    }
