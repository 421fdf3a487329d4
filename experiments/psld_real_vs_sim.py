"""PSLD for real on this host's CPUs next to the simulator's prediction (docs/psld.md, "Real runs (CPU)").

Run: ``python -m experiments.psld_real_vs_sim`` (from the repository root; ~3 min on 2 cores).

One invocation runs ``scenarios/psld-real-cpu.yaml`` (ResNet-18, 4 workers, 2 PSs, PS 1's bucket at
0.5 Gbit/s) for real three times, with ``duration_s`` 20 and ``warmup_s`` 4:

1. **profiling run**: the same job without the straggler (``stragglers: []``, policy mxnet);
2. **baseline**: ``policy: mxnet`` (MXNet's default layout, never reassigned) with the straggler;
3. **PSLD**: ``policy: psld`` with the straggler.

The simulator then predicts runs 2 and 3 twice: *raw* (the scenario's own 10 Gbit/s links, 4 cores and
the PipeDream compute profile) and *calibrated*: the one free parameter, the links' bandwidth
(``cluster.worker_gbps`` = ``cluster.server_gbps``), is set by bisection so that the simulated
straggler-free iteration time equals the profiling run's measured one (the real runtime's compute, the
closed-form toy gradient plus SGD, is not separated from its transfers, so it is folded into that
bandwidth). The straggler's 0.5 Gbit/s is the same number in both. The simulations use ``duration_s``
60 (steady state; the window starts at ``warmup_s`` 4 in both).
"""

from __future__ import annotations

import math
from pathlib import Path

from analysis.psld_metrics import psld_metrics
from runtime.psld.run import run_real
from scenarios.load import load_scenario
from sim.psld import run as simulate

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "psld-real-cpu.yaml"
REAL = ["duration_s=20", "warmup_s=4"]
SIM = ["duration_s=60", "warmup_s=4"]


def rate(result) -> float:
    return psld_metrics(result)["iterations_per_s"]


def calibrate_gbps(target_s: float) -> float:
    """Link bandwidth at which the simulated straggler-free mxnet job takes ``target_s`` per iteration."""
    lo, hi = math.log(0.01), math.log(100.0)
    for _ in range(20):
        mid = 0.5 * (lo + hi)
        g = math.exp(mid)
        sc = load_scenario(
            SCENARIO,
            [*SIM, "policy=mxnet", "stragglers=[]", f"cluster.worker_gbps={g}", f"cluster.server_gbps={g}"],
        )
        t = 1.0 / rate(simulate(sc))
        lo, hi = (mid, hi) if t > target_s else (lo, mid)
    return math.exp(0.5 * (lo + hi))


def main() -> None:
    real = {}
    for name, extra in [
        ("profiling (no straggler)", ["policy=mxnet", "stragglers=[]"]),
        ("mxnet", ["policy=mxnet"]),
        ("psld", ["policy=psld"]),
    ]:
        result = run_real(load_scenario(SCENARIO, [*REAL, *extra]))
        m = psld_metrics(result)
        real[name] = (m["iterations_per_s"], m["reassignments"], m["max_server_share"], result.info["wall_s"])
        line = f"real {name}: {m['iterations_per_s']:.3f} it/s, {m['reassignments']:.0f} reassignments,"
        line += f" final max PS share {m['max_server_share']:.2f}, wall {result.info['wall_s']:.0f} s"
        print(line, flush=True)
    t0 = 1.0 / real["profiling (no straggler)"][0]
    gbps = calibrate_gbps(t0)
    print(f"calibrated link bandwidth: {gbps:.3f} Gbit/s (straggler-free iteration {t0:.3f} s)")
    rows = []
    for policy in ("mxnet", "psld"):
        raw = rate(simulate(load_scenario(SCENARIO, [*SIM, f"policy={policy}"])))
        cal_sc = load_scenario(
            SCENARIO, [*SIM, f"policy={policy}", f"cluster.worker_gbps={gbps}", f"cluster.server_gbps={gbps}"]
        )
        cal = rate(simulate(cal_sc))
        rows.append((policy, real[policy][0], raw, cal))
    print("\n| policy | real it/s | sim raw it/s | sim calibrated it/s | calibrated / real |")
    print("|---|---|---|---|---|")
    for policy, r, raw, cal in rows:
        print(f"| {policy} | {r:.3f} | {raw:.3f} | {cal:.3f} | {cal / r:.2f} |")
    print(f"\nPSLD / mxnet: real {rows[1][1] / rows[0][1]:.2f}x, sim raw {rows[1][2] / rows[0][2]:.2f}x,"
          f" sim calibrated {rows[1][3] / rows[0][3]:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
