"""Statistical efficiency for real: iterations to a target training loss under BSP, SSP and FlexRR
([Harlap], §3.4.3 "Convergence Tests", Fig. 3.7), the staleness model fitted from them, and the
simulator's time to the target with that model. From the repository root:

    python -m experiments.flexrr_convergence [--scenario scenarios/flexrr-real-ps.yaml] [--out DIR]
        [--set key=value ...]

1. **Real runs**: BSP, SSP and FlexRR (and SSP at slack 2, for the slope) of the scenario, all in one
   launch of the worker and shard processes; each run's loss curve is the training loss of every
   iteration's model (``runtime/flexrr/launch.py``). Iterations to target: the first iteration whose
   model's loss is at or below ``convergence.target_loss``.
2. **Serial replay** of the same problem at each slack (``runtime/flexrr/model.replay``): under the exact
   SSP read rule the loss curve is a function of the slack alone, so a real run must need exactly the
   replay's iterations (any difference is a lost or duplicated update).
3. **Fit** ``convergence.iterations`` and ``convergence.per_staleness`` (``policies/flexrr/convergence.py``)
   from the real counts by slack, and **simulate** each mode with them: time per iteration beside time
   to the target loss.

Writes ``DIR/convergence.json`` and prints a markdown table. The thesis measures convergence by a 2%
change over 10 iterations of the objective (MF, LDA); a fixed target loss is the same question asked of a
smaller model in fewer iterations.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from clustertwin.analysis.flexrr_metrics import flexrr_metrics
from clustertwin.policies.flexrr.convergence import fit
from clustertwin.runtime.flexrr.launch import run_real_many
from clustertwin.runtime.flexrr.model import Trainer, problem_for, replay
from clustertwin.scenarios.flexrr_setup import items_per_worker
from clustertwin.scenarios.load import load_scenario
from clustertwin.sim.flexrr import run as simulate

from clustertwin.atomic import write_json

RUNS = {
    "bsp": ["mode=bsp"],
    "ssp": ["mode=ssp"],
    "flexrr": ["mode=flexrr"],
    "ssp-slack2": ["mode=ssp", "slack=2"],
}


def first_at_or_below(losses: list[float], target: float) -> int | None:
    return next((k for k, x in enumerate(losses) if x <= target), None)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", type=Path, default=Path("scenarios/flexrr-real-ps.yaml"))
    ap.add_argument("--out", type=Path, default=Path("runs/flexrr-convergence"))
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    args = ap.parse_args(argv)
    scenarios = {name: load_scenario(args.scenario, [*args.overrides, *o]) for name, o in RUNS.items()}
    target = scenarios["bsp"].convergence.target_loss
    if target is None:
        raise SystemExit(f"{args.scenario}: convergence.target_loss is needed")
    with tempfile.TemporaryDirectory(prefix="flexrr-convergence-") as tmp:
        results = run_real_many(list(scenarios.values()), Path(tmp))
    rows: dict[str, dict] = {}
    for (name, s), (result, _final) in zip(scenarios.items(), results, strict=True):
        losses = [float(x) for x in result.info["loss_per_iteration"].split(",")]
        m = flexrr_metrics(result)
        rows[name] = {
            "slack": s.effective_slack,
            "real_iterations_to_target": first_at_or_below(losses, target),
            "real_time_per_iteration_s": m["time_per_iteration_s"],
            "reassigned_fraction": m["reassigned_fraction"],
            "losses": losses,
        }
    problem = problem_for(scenarios["bsp"], sum(items_per_worker(scenarios["bsp"])))
    trainer = Trainer(problem)
    horizon = scenarios["bsp"].iterations
    for row in rows.values():
        curve = [trainer.loss(w) for w in replay(problem, horizon, row["slack"])]
        row["replay_iterations_to_target"] = first_at_or_below(curve, target)
    measured = {
        r["slack"]: r["real_iterations_to_target"] for r in rows.values() if r["real_iterations_to_target"]
    }
    model = fit(measured)
    for name, s in scenarios.items():
        fitted = s.model_copy(
            update={
                "convergence": s.convergence.model_copy(
                    update={"iterations": model.iterations, "per_staleness": model.per_staleness}
                )
            }
        )
        m = flexrr_metrics(simulate(fitted))
        rows[name].update(
            sim_time_per_iteration_s=m["time_per_iteration_s"],
            sim_iterations_to_target=m["iterations_to_target"],
            sim_time_to_target_s=m["time_to_target_s"],
        )
    out = {
        "scenario": str(args.scenario),
        "overrides": args.overrides,
        "target_loss": target,
        "fit": {"iterations": model.iterations, "per_staleness": model.per_staleness},
        "runs": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "convergence.json", out)
    print(
        f"target loss {target}; fitted convergence: iterations={model.iterations:g}, "
        f"per_staleness={model.per_staleness:.4f}\n"
    )
    print(
        "| run | slack | real iters | replay iters | real s/iter | sim s/iter | sim iters"
        " | sim time to target s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(
            f"| {name} | {r['slack']} | {r['real_iterations_to_target']} |"
            f" {r['replay_iterations_to_target']} |"
            f" {r['real_time_per_iteration_s']:.3f} | {r['sim_time_per_iteration_s']:.3f} |"
            f" {r['sim_iterations_to_target']:.0f} | {r['sim_time_to_target_s']:.2f} |"
        )
    return out


if __name__ == "__main__":
    main()
