"""``reproduce flexrr``: FlexRR's claims ([Harlap], ch. 3) in simulation, as claim rows (``claim_results``).

Every claim is computed from seed-averaged time per iteration (the paper reports arithmetic means of
>= 3 runs, §3.4.1) of scenario runs under ``scenarios/flexrr/``; all modes of one seed share the straggler
realisation. Both modes average several seeds, so that a claim is the paper's statistic and not one
run's: ``--quick`` uses seeds 0-2 (the paper's minimum), the full run seeds 0-4 (a tighter mean). One
seed is not enough: Slow Worker 400% FlexRR/Ideal is 1.165 for seed 0 alone, 1.116 averaged over seeds 0-9
(sigma ~0.022; docs/algorithms/flexrr.md). Each finished run's metrics go to ``<out>/runs/<key>.json`` at
once, so a rerun reuses them. Rows whose ``accept`` is ``None`` are reported only (no pass/fail): the paper
gives a number for a setting we do not model (e.g. Cluster-A's natural jitter at 0% injected delay).

Which rows decide the exit status (``ClaimRow.gated``): the paper's central claims. Slow
Worker 0-400% (BSP about linear in the delay, SSP absorbs 50%, FlexRR within 15% of Ideal at every
level, the fraction of work reassigned), Power-Law alpha = 11's ordering (FlexRR's gain over BSP exceeds
SSP's and BSP RR's), Disrupted Machine's FlexRR "up to 63%" better than BSP, and the helper-group
sensitivity (near-Ideal from 3, negligible spread over 3-16, 0 = SSP), and partial replication's
ordering (FlexRR with 25% replicated still beats SSP). Every other paper claim (per-mode Power-Law
magnitudes, Disrupted Machine's SSP / BSP RR magnitudes and FlexRR/Ideal, SSP and BSP RR at Slow Worker
400%, the uneven workload, natural stragglers, the extreme-case headline, replication's magnitudes) is
checked and printed beside them, marked "(not
gated)", with its reason in ``why`` and docs/algorithms/flexrr.md, but does not decide the exit status.
Exit status 1 when any gated claim fails. Tolerances were set from the paper's wording before looking at our
numbers; where we differ, docs/algorithms/flexrr.md says why.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from pathlib import Path

from clustertwin.claim_results import ClaimRow, report
from clustertwin.claim_runs import Spec, run_specs, with_per_seed

PAPER = (
    "Harlap et al., Addressing the straggler problem for iterative convergent parallel ML (SoCC 2016);"
    " Harlap, PhD dissertation ch. 3"
)
SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios" / "flexrr"
MODES = ("bsp", "ssp", "bsp_rr", "flexrr")
SLOW_DELAYS = (0.0, 0.5, 1.0, 2.0, 3.0, 4.0)  # Fig. 3.6: 0-400%
DISRUPT_DELAYS = (0.5, 1.0, 2.0, 4.0)  # Fig. 3.9's levels are not in the text; 50-400% like Fig. 3.6
GROUP_SIZES = (0, 1, 2, 3, 4, 8, 16)  # Fig. 3.12(a): 0-16
SENSITIVITY_DELAY = 2.0  # Fig. 3.12 uses the Slow Worker pattern; its delay is not given
REPLICATION = (0.25, 0.5, 1.0)  # Fig. 3.11's tail fractions (25% is the one the text names)


def simulate(spec: Spec) -> dict[str, float]:
    """One run's flat metrics (in a worker process)."""
    from clustertwin.analysis.flexrr_metrics import flexrr_metrics
    from clustertwin.scenarios.load import load_scenario
    from clustertwin.sim.flexrr import run

    scenario = load_scenario(SCENARIOS / spec.scenario, spec.overrides)
    return flexrr_metrics(run(scenario))


class _Plan:
    """Collects the runs the claims need, keyed by (scenario, overrides without the seed)."""

    def __init__(self, seeds: list[int]) -> None:
        self.seeds = seeds
        self.specs: dict[str, Spec] = {}

    def need(self, scenario: str, *overrides: str) -> list[Spec]:
        specs = [Spec(scenario, (*overrides, f"seed={s}", "record_messages=false")) for s in self.seeds]
        for spec in specs:
            self.specs[spec.key] = spec
        return specs


def _claims(plan: _Plan) -> Callable[[dict[str, dict[str, float]]], list[ClaimRow]]:
    """Register the runs and return the function that turns their metrics into rows."""
    slow = {
        (d, m): plan.need("slow-worker.yaml", f"mode={m}", f"stragglers.delay={d}")
        for d in SLOW_DELAYS
        for m in MODES
    }
    power = {m: plan.need("power-law.yaml", f"mode={m}", "stragglers.alpha=11") for m in MODES}
    disrupt = {
        (d, m): plan.need("disrupted-machine.yaml", f"mode={m}", f"stragglers.delay={d}")
        for d in DISRUPT_DELAYS
        for m in MODES
    }
    groups = {
        h: plan.need(
            "slow-worker.yaml",
            "mode=flexrr",
            f"stragglers.delay={SENSITIVITY_DELAY}",
            f"rr.helper_group_size={h}",
        )
        for h in GROUP_SIZES
    }
    uneven = {m: plan.need("uneven.yaml", f"mode={m}") for m in ("ssp", "flexrr")}
    even = {m: plan.need("uneven.yaml", f"mode={m}", "stragglers.model=none") for m in ("ssp", "flexrr")}
    alternate = plan.need("uneven.yaml", "mode=flexrr", "stragglers.heavy_machines=alternate")
    trace = {m: plan.need("trace-alibaba.yaml", f"mode={m}") for m in MODES}
    # jobs 1-3 only: transient per-worker jitter, without job 4's workers that run 2-5x apart all along
    transient = {
        m: plan.need("trace-alibaba.yaml", f"mode={m}", "stragglers.trace_jobs=[1,2,3]") for m in MODES
    }
    replicated = {
        r: plan.need("trace-alibaba.yaml", "mode=flexrr", f"rr.replication={r}") for r in REPLICATION[:-1]
    }
    replicated[1.0] = trace["flexrr"]
    power4 = {m: plan.need("power-law.yaml", f"mode={m}", "stragglers.alpha=4") for m in MODES}

    def rows(done: dict[str, dict[str, float]]) -> list[ClaimRow]:
        def mean(specs: list[Spec], metric: str = "time_per_iteration_s") -> float:
            return statistics.fmean(done[s.key][metric] for s in specs)

        def gain(base: list[Spec], treat: list[Spec]) -> float:
            return 100.0 * (1.0 - mean(treat) / mean(base))

        out: list[ClaimRow] = []
        # --- Slow Worker (Fig. 3.6a) ---
        xs = list(SLOW_DELAYS)
        ys = [mean(slow[(d, "bsp")]) for d in xs]
        out.append(
            ClaimRow(
                "slow-bsp-linear",
                "Slow Worker: BSP time/iteration grows linearly with delay (R^2 of a line over 0-400%)",
                "§3.4.3, Fig. 3.6a",
                "linear",
                _r_squared(xs, ys),
                (0.95, 1.0),
                "{:.3f}",
                why=(
                    "BSP waits for the slowest worker every iteration: a curve rather than a line means the "
                    "slowed worker's delay is not the barrier's (straggler model or BSP barrier changed)"
                ),
            )
        )
        out.append(
            ClaimRow(
                "slow-bsp-slope",
                "Slow Worker: BSP time/iteration at 400% / at 0% (linear in (1+d) would be 5)",
                "§3.4.3",
                "~5 (linear)",
                ys[-1] / ys[0],
                None,
            )
        )
        ssp50 = mean(slow[(0.5, "ssp")]) / mean(slow[(0.5, "flexrr")], "ideal_per_iteration_s")
        bsp50 = mean(slow[(0.5, "bsp")]) / mean(slow[(0.5, "flexrr")], "ideal_per_iteration_s")
        out.append(
            ClaimRow(
                "slow-ssp-50",
                f"Slow Worker 50%: SSP mitigates the delay (SSP/Ideal; BSP/Ideal is {bsp50:.2f})",
                "§3.4.3",
                "mitigated",
                ssp50,
                (1.0, 1.15),
                why=(
                    "SSP's staleness bound should let the others run ahead of a 50%-slowed worker; above the "
                    "band the bound blocks too early or the straggler is slowed more than the scenario says"
                ),
            )
        )
        ssp400 = mean(slow[(4.0, "ssp")]) / mean(slow[(4.0, "flexrr")], "ideal_per_iteration_s")
        out.append(
            ClaimRow(
                "slow-ssp-400",
                "Slow Worker 400%: SSP 'then too suffers linearly' (SSP/Ideal)",
                "§3.4.3",
                "large",
                ssp400,
                (1.5, float("inf")),
                gated=False,
                why=(
                    "not gated: the paper's 'suffers linearly' has no number; ours is reported beside it "
                    "(docs/algorithms/flexrr.md)"
                ),
            )
        )
        for d in SLOW_DELAYS:
            out.append(
                ClaimRow(
                    f"slow-flexrr-ideal-{int(d * 100)}",
                    f"Slow Worker {int(d * 100)}%: FlexRR nearly matches Ideal (FlexRR/Ideal)",
                    "§3.4.3, Fig. 3.6a",
                    "~1.0",
                    mean(slow[(d, "flexrr")], "vs_ideal"),
                    (1.0, 1.15),
                    "{:.3f}",
                    why=(
                        "RapidReassignment as §3.3 describes it drifts from Ideal as the delay grows: a "
                        "slowed worker sheds work only to its busy helpers while the SSP gate is cluster-wide"
                        " (docs/algorithms/flexrr.md, 'Slow Worker 400%: where FlexRR loses to Ideal')"
                    ),
                )
            )
        out.append(
            ClaimRow(
                "slow-bsprr-vs-flexrr-400",
                "Slow Worker 400%: BSP RR slower than FlexRR (BSP RR / FlexRR)",
                "§3.4.3",
                "> 1 (10x on Cluster-B)",
                mean(slow[(4.0, "bsp_rr")]) / mean(slow[(4.0, "flexrr")]),
                (1.0, float("inf")),
                gated=False,
                why="not gated: the paper's 10x is Cluster-B's; docs/algorithms/flexrr.md",
            )
        )
        out.append(
            ClaimRow(
                "slow-reassigned-0",
                "Slow Worker 0%: fraction of work reassigned by FlexRR",
                "§3.4.3",
                "8-9%",
                100 * mean(slow[(0.0, "flexrr")], "reassigned_fraction"),
                None,
                "{:.1f}%",
            )
        )
        out.append(
            ClaimRow(
                "slow-reassigned-400",
                "Slow Worker 400%: fraction of work reassigned by FlexRR",
                "§3.4.3",
                "19-22%",
                100 * mean(slow[(4.0, "flexrr")], "reassigned_fraction"),
                (10.0, 33.0),
                "{:.1f}%",
                why=(
                    "the share of work moved follows the 20% trigger and the helper groups; outside the band "
                    "the reassignment policy or the progress reports changed"
                ),
            )
        )
        # --- Power-Law alpha = 11 (Fig. 3.8, MF) ---
        g = {m: gain(power["bsp"], power[m]) for m in ("ssp", "bsp_rr", "flexrr")}
        for m, paper in (("flexrr", 48), ("ssp", 39), ("bsp_rr", 40)):
            out.append(
                ClaimRow(
                    f"power-{m}",
                    f"Power-Law a=11: {m.upper().replace('_', ' ')} time/iteration reduction vs BSP",
                    "§3.4.4, Fig. 3.8 (MF)",
                    f"{paper}%",
                    g[m],
                    (paper - 15.0, paper + 15.0),
                    "{:.1f}%",
                    gated=False,
                    why=(
                        "not gated: our alpha = 11 BSP is 1.6x Ideal without the paper cluster's natural "
                        "jitter, which caps every gain vs BSP lower (docs/algorithms/flexrr.md)"
                    ),
                )
            )
        out.append(
            ClaimRow(
                "power-order",
                "Power-Law a=11: FlexRR's gain exceeds both SSP's and BSP RR's (margin, points)",
                "§3.4.4",
                "48 > 39, 40",
                g["flexrr"] - max(g["ssp"], g["bsp_rr"]),
                (0.0, float("inf")),
                "{:.1f}",
                why=(
                    "FlexRR should gain most under Power-Law stragglers: when SSP or BSP RR gains more, "
                    "reassignment is not helping the power-law stragglers (trigger or helper choice)"
                ),
            )
        )
        # --- Disrupted Machine (Fig. 3.9) ---
        best = {m: max(gain(disrupt[(d, "bsp")], disrupt[(d, m)]) for d in DISRUPT_DELAYS) for m in MODES[1:]}
        for m, paper in (("flexrr", 63), ("ssp", 49), ("bsp_rr", 42)):
            out.append(
                ClaimRow(
                    f"disrupted-{m}",
                    f"Disrupted Machine: {m.upper().replace('_', ' ')} reduction vs BSP, best of 50-400%",
                    "§3.4.4, Fig. 3.9",
                    f"up to {paper}%",
                    best[m],
                    (paper - 15.0, paper + 15.0),
                    "{:.1f}%",
                    gated=m == "flexrr",  # FlexRR's "up to 63%" is the claim; SSP's and BSP RR's are context
                    why=(
                        "FlexRR's gain over BSP under a disrupted machine depends on how long a disruption "
                        "lasts against an iteration"
                        if m == "flexrr"
                        else "not gated: our helpers pick up work at no cost (no PS traffic, no prefetch), "
                        "which favours BSP RR (docs/algorithms/flexrr.md)"
                    ),
                )
            )
        # §3.4.4's words for SSP and BSP RR are "reduce the delay experienced by BSP": reported in that
        # reading too, (BSP - X) / (BSP - Ideal), best over the delays
        for m in ("ssp", "bsp_rr"):
            out.append(
                ClaimRow(
                    f"disrupted-{m}-delay",
                    f"Disrupted Machine: {m.upper().replace('_', ' ')} reduction of BSP's delay over Ideal "
                    "(other reading of the text)",
                    "§3.4.4",
                    "up to 49%" if m == "ssp" else "up to 42%",
                    max(
                        100
                        * (mean(disrupt[(d, "bsp")]) - mean(disrupt[(d, m)]))
                        / (mean(disrupt[(d, "bsp")]) - mean(disrupt[(d, "flexrr")], "ideal_per_iteration_s"))
                        for d in DISRUPT_DELAYS
                    ),
                    None,
                    "{:.1f}%",
                    gated=False,
                )
            )
        out.append(
            ClaimRow(
                "disrupted-flexrr-ideal",
                "Disrupted Machine 400%: FlexRR matches Ideal (FlexRR/Ideal)",
                "§3.4.4",
                "~1.0",
                mean(disrupt[(4.0, "flexrr")], "vs_ideal"),
                (1.0, 1.15),
                "{:.3f}",
                gated=False,
                why=(
                    "not gated: the paper shows no FlexRR/Ideal number for the disrupted machine "
                    "(docs/algorithms/flexrr.md)"
                ),
            )
        )
        # --- Helper group size (Fig. 3.12a) ---
        per_size = {h: mean(groups[h], "vs_ideal") for h in GROUP_SIZES}
        out.append(
            ClaimRow(
                "group-0-is-ssp",
                "Helper group 0 = SSP (FlexRR(0) / SSP, same delay)",
                "§3.4.6",
                "1.00",
                mean(groups[0]) / mean(slow[(SENSITIVITY_DELAY, "ssp")]),
                (0.999, 1.001),
                "{:.3f}",
                why=(
                    "with no helpers FlexRR must be SSP run for run; a difference means helper-group 0 still "
                    "reassigns, or the runs no longer share the straggler draw"
                ),
            )
        )
        out.append(
            ClaimRow(
                "group-3plus-near-ideal",
                "Helper group >= 3 near Ideal (worst FlexRR/Ideal over sizes 3-16, Slow Worker "
                f"{int(SENSITIVITY_DELAY * 100)}%)",
                "§3.4.6, Fig. 3.12a",
                "near-Ideal",
                max(v for h, v in per_size.items() if h >= 3),
                (1.0, 1.15),
                "{:.3f}",
                why=(
                    "from three helpers FlexRR should be near Ideal; above the band the helpers cannot absorb"
                    " the slowed worker's load at this delay (docs/algorithms/flexrr.md)"
                ),
            )
        )
        spread = [v for h, v in per_size.items() if h >= 3]
        out.append(
            ClaimRow(
                "group-3to16-negligible",
                "Helper groups 3-16 differ negligibly (max/min of time/iteration)",
                "§3.4.6",
                "negligible",
                max(spread) / min(spread),
                (1.0, 1.10),
                "{:.3f}",
                why=(
                    "helper groups of 3-16 should perform alike; a spread means larger groups cost (messages,"
                    " choice of helper) or smaller ones starve"
                ),
            )
        )
        best_h = min(per_size, key=lambda h: per_size[h])
        out.append(
            ClaimRow(
                "group-best",
                "Helper group size with the best time/iteration ("
                + ", ".join(f"{h}: {v:.3f}" for h, v in per_size.items())
                + ")",
                "§3.4.6",
                "4",
                float(best_h),
                None,
                "{:.0f}",
            )
        )
        # --- Uneven workload (Fig. 3.10) ---
        out.append(
            ClaimRow(
                "uneven-ssp",
                "Uneven workload: SSP slowdown vs an even split",
                "§3.4.4, Fig. 3.10",
                "54% (50% predicted)",
                100 * (mean(uneven["ssp"]) / mean(even["ssp"]) - 1),
                (40.0, 65.0),
                "{:.1f}%",
                gated=False,
                why=(
                    "not gated: the uneven workload is reported beside the listed claims"
                    " (docs/algorithms/flexrr.md)"
                ),
            )
        )
        out.append(
            ClaimRow(
                "uneven-flexrr",
                "Uneven workload: FlexRR close to 'FlexRR Even' (uneven / even time/iteration)",
                "§3.4.4, Fig. 3.10",
                "close",
                mean(uneven["flexrr"]) / mean(even["flexrr"]),
                (1.0, 1.15),
                "{:.3f}",
                gated=False,
                why=(
                    "not gated: the paper does not say which machines are heavy; with the first half heavy "
                    "our helper groups are mostly heavy too (docs/algorithms/flexrr.md)"
                ),
            )
        )
        out.append(
            ClaimRow(
                "uneven-flexrr-alternate",
                "Uneven workload, alternate machines heavy (helper-topology what-if): FlexRR uneven / even",
                "§3.4.4; our helper groups",
                "close",
                mean(alternate) / mean(even["flexrr"]),
                None,
                "{:.3f}",
                gated=False,
            )
        )
        # --- Alibaba trace (no paper number) ---
        for m in ("ssp", "bsp_rr", "flexrr"):
            out.append(
                ClaimRow(
                    f"trace-{m}",
                    f"Alibaba PAI trace: {m.upper().replace('_', ' ')} reduction vs BSP (what-if)",
                    "traces/data/alibaba",
                    "-",
                    gain(trace["bsp"], trace[m]),
                    None,
                    "{:.1f}%",
                    gated=False,
                )
            )
        out.append(
            ClaimRow(
                "trace-flexrr-ideal",
                "Alibaba PAI trace: FlexRR/Ideal (what-if)",
                "traces/data/alibaba",
                "-",
                mean(trace["flexrr"], "vs_ideal"),
                None,
                "{:.3f}",
                gated=False,
            )
        )
        out += _natural_rows(gain, trace, "")
        out += _natural_rows(gain, transient, ", jobs 1-3")
        out += _extreme_rows(mean, slow, power4, disrupt)
        out += _replication_rows(mean, replicated, trace)
        return out

    return rows


Mean = Callable[..., float]


def _natural_rows(
    gain: Callable[[list[Spec], list[Spec]], float], trace: dict[str, list[Spec]], jobs: str
) -> list[ClaimRow]:
    """Figs. 3.1 and 3.3-3.5: no injected delay on EC2, Azure and Nome, whose jitter the paper neither
    traces nor describes. Our stand-in for a cloud's natural jitter is the Alibaba PAI trace (measured
    per-worker mini-batch times of a production cluster), replayed on Cluster-A's 128 workers: all four
    jobs, or jobs 1-3 (``jobs``), whose workers only jitter around their median (job 4's run 2-5x apart
    for the whole trace, a persistent imbalance rather than jitter)."""
    why = (
        "not gated: the clouds' jitter was not measured in the paper; ours is another production "
        "cluster's (Alibaba PAI). With job 4, some workers are 2-5x slower for the whole run: SSP's slack "
        "cannot absorb a persistent straggler, so SSP gains ~1% and FlexRR's gain over it far exceeds the "
        "paper's; jobs 1-3 alone jitter less than the clouds did (docs/algorithms/flexrr.md)"
    )
    key = "-jobs123" if jobs else ""
    return [
        ClaimRow(
            f"natural-flexrr-vs-bsp{key}",
            f"Natural stragglers (Alibaba PAI trace{jobs} as the cloud's jitter): FlexRR reduction vs BSP",
            "§3.4.2, Figs. 3.1, 3.3-3.5",
            "34-56%",
            gain(trace["bsp"], trace["flexrr"]),
            (34.0 - 15.0, 56.0 + 15.0),
            "{:.1f}%",
            gated=False,
            why=why,
        ),
        ClaimRow(
            f"natural-flexrr-vs-ssp{key}",
            f"Natural stragglers (Alibaba PAI trace{jobs} as the cloud's jitter): FlexRR reduction vs SSP",
            "§3.4.2, Figs. 3.1, 3.3-3.5",
            "15-39%",
            gain(trace["ssp"], trace["flexrr"]),
            (15.0 - 15.0, 39.0 + 15.0),
            "{:.1f}%",
            gated=False,
            why=why,
        ),
    ]


def _extreme_rows(
    mean: Mean,
    slow: dict[tuple[float, str], list[Spec]],
    power4: dict[str, list[Spec]],
    disrupt: dict[tuple[float, str], list[Spec]],
) -> list[ClaimRow]:
    """The chapter's headline "5-10x improvement over BSP and SSP in extreme cases": the largest
    time-per-iteration ratio over the most extreme settings we run (Slow Worker 400%, Power-Law
    alpha = 4, Disrupted Machine 400%)."""
    cases = {"slow-400": slow, "power-4": power4, "disrupted-400": disrupt}

    def pick(case: str, m: str) -> list[Spec]:
        runs = cases[case]
        return runs[m] if case == "power-4" else runs[(4.0, m)]  # type: ignore[index]

    out = []
    for base in ("bsp", "ssp"):
        ratios = {c: mean(pick(c, base)) / mean(pick(c, "flexrr")) for c in cases}
        best = max(ratios, key=lambda c: ratios[c])
        out.append(
            ClaimRow(
                f"extreme-vs-{base}",
                f"Extreme cases: {base.upper()} / FlexRR time per iteration, best of "
                + ", ".join(f"{c} {v:.2f}" for c, v in ratios.items()),
                "ch. 3 introduction; §3.4.3",
                "5-10x",
                ratios[best],
                (5.0, 10.0),
                "{:.2f}x",
                gated=False,
                why=(
                    "not gated: the text names no setting for its extreme cases. Without the clouds' natural"
                    " jitter on top, BSP at 400% is about 5x the nominal iteration while FlexRR stays near "
                    "Ideal (1.3-1.5x nominal), which caps the ratio near 4x; the 10x the text reports is "
                    "BSP RR on Cluster-B (docs/algorithms/flexrr.md)"
                ),
            )
        )
    return out


def _replication_rows(
    mean: Mean, replicated: dict[float, list[Spec]], trace: dict[str, list[Spec]]
) -> list[ClaimRow]:
    """Fig. 3.11: MF with no injected delay on Cluster-A, helpers holding only the tail fraction of their
    helpees' input (``rr.replication``). The jitter is again the Alibaba trace's (the paper's Cluster-A
    jitter is not described)."""
    out = [
        ClaimRow(
            f"replication-{int(r * 100)}",
            f"Partial replication {int(r * 100)}%: FlexRR / FlexRR at 100% (time per iteration)",
            "§3.4.5, Fig. 3.11",
            "close" if r == 0.25 else "-",
            mean(replicated[r]) / mean(replicated[1.0]),
            (1.0, 1.15) if r == 0.25 else None,
            "{:.3f}",
            gated=False,
            why=(
                "not gated: a helper may take only the tail it holds, so a slowed worker sheds at most "
                f"{int(r * 100)}% of its range; the Alibaba trace's slowdowns last whole iterations and "
                "exceed that (job 4's slow workers stay 2-5x slow), while the paper's Cluster-A jitter "
                "evidently did not (docs/algorithms/flexrr.md)"
            ),
        )
        for r in REPLICATION[:-1]
    ]
    out.append(
        ClaimRow(
            "replication-25-vs-ssp",
            "Partial replication 25%: SSP / FlexRR (time per iteration; 'much better than SSP')",
            "§3.4.5, Fig. 3.11",
            "much better",
            mean(trace["ssp"]) / mean(replicated[0.25]),
            (1.1, float("inf")),
            "{:.2f}",
            why=(
                "with a quarter of each helpee's input replicated, reassignment should still beat SSP "
                "clearly; below the band the replication cap blocks help (policies/flexrr/worker.py)"
            ),
        )
    )
    return out


def _r_squared(xs: list[float], ys: list[float]) -> float:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    syy = sum((y - my) ** 2 for y in ys)
    return 1.0 if syy == 0 else min(1.0, sxy * sxy / (sxx * syy))  # clamp rounding above 1


def reproduce(quick: bool, out: Path, workers: int | None = None) -> int:
    """Run (or reuse) every run the claims need, print the table; 0 when every gated claim holds."""
    # quick: the paper's minimum of three runs (§3.4.1); full: five, for a tighter mean. One seed is not the
    # paper's statistic (Slow Worker 400% FlexRR/Ideal: 1.165 for seed 0, mean 1.116 over seeds 0-9)
    plan = _Plan([0, 1, 2] if quick else [0, 1, 2, 3, 4])
    make_rows = _claims(plan)
    done = run_specs("flexrr", out, plan.specs, simulate, workers)
    rows = with_per_seed(make_rows(done), make_rows, done, plan.specs, plan.seeds)
    return report("flexrr", PAPER, quick, plan.seeds, out, rows)


if __name__ == "__main__":  # python -m clustertwin.reproduce_flexrr [--quick] [OUT]
    args = [a for a in sys.argv[1:] if a != "--quick"]
    sys.exit(reproduce("--quick" in sys.argv[1:], Path(args[0]) if args else Path("runs/reproduce-flexrr")))
