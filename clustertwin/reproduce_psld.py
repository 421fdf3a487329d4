"""``reproduce psld``: PSLD's claims ([PSLD]) in simulation, as claim rows (``claim_results``).

Runs scenarios under ``scenarios/psld/`` (seed-averaged throughput; each finished run's metrics go to
``<out>/runs/<key>.json`` at once, so a rerun reuses them) and computes the default-assignment tables
(Tables 1-2) directly from the policies. Tolerances come from the paper's wording and were written down
before our numbers were looked at: an ordering claim ("PSLD > strawman > baseline") is checked as a ratio
above 1; a stated range ("beats the straggling baseline by 39%-286%") is checked as that range; an
"up to X" value over configurations the text does not list is reported, not checked. Rows with
``accept=None`` are reported only. docs/algorithms/psld.md explains every difference.

Which rows decide the exit status (``ClaimRow.gated``): the paper's central claims. The
default assignments' shape (Tables 1-2: ResNet-101's size in our catalogue, TensorFlow's and MXNet's
key-hash default imbalanced, worst at 3 and 6 PSs), Fig. 11's ordering PSLD > strawman > baseline for
AlexNet, ResNet-50 and VGG-16 with VGG-16 gaining most, the speedup growing with 2 and 4 stragglers
(Figs. 12-14), Fig. 18's recovery (with exploration PSLD detects it; without it, it does not and keeps
the recovered PSs empty) and Fig. 19a's epsilon sensitivity (epsilon > 0.1 hurts). Every other paper
claim (Fig. 11's gain magnitudes, Figs. 12-13 "PSLD performs steadily", Fig. 14's PSLD / strawman, Fig. 18's
PSLD / strawman after recovery, Fig. 17's scale-out, Fig. 20's pause) is checked and printed beside them,
marked "(not gated)", with its reason in ``why`` and docs/algorithms/psld.md, but does not decide the exit
status. Exit status 1 when any gated claim fails.

The Cluster-B claims (Figs. 15, 16, 19b-d, 20b: real-world stragglers, TensorFlow's assignment, the
sensitivity to theta, block size and ScaleThreshold, the pause against checkpoint-and-restart) are data:
``scenarios/claims/psld/claims.yaml`` holds each one's source, paper value, band, gating and why, and
the sweeps and checkpoint costs they rest on; ``cluster_b_figures`` computes the figures they name from
runs of ``scenarios/psld/cluster-b.yaml``. Of them, Figs. 15-16's orderings (PSLD faster than MXNet's
default on BytePS and a vanilla PS, and than TensorFlow's round-robin) gate.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from clustertwin.claim_results import ClaimRow, report
from clustertwin.claim_runs import Spec, run_specs, with_per_seed
from clustertwin.errors import InputError
from clustertwin.scenarios.claims import CLAIMS_DIR, FigureClaim, load_claim_file

PAPER = "Chen et al., Elastic Parameter Server Load Distribution in Deep Learning Clusters"
SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios" / "psld"
CLAIMS_FILE = CLAIMS_DIR / "psld" / "claims.yaml"  # the Cluster-B claims (Figs. 15, 16, 19b-d, 20b)
INF = float("inf")
FIG11_MODELS = ("alexnet", "resnet50", "vgg16")
# Fig. 11 per model, %: baseline drop, PSLD over straggling baseline, over straggler-free, over strawman
FIG11_PAPER = {
    "alexnet": (67, 224, 68, 53),
    "resnet50": (38, 109, 30, 13),
    "vgg16": (62, 286, 62, 29),
}
TABLE1_TF = {
    2: (21.6, 22.9),
    3: (2.0, 29.0, 13.5),
    4: (9.9, 10.3, 11.7, 12.7),
    5: (8.5, 7.1, 9.9, 12.2, 6.8),
    6: (1.0, 15.2, 6.8, 1.0, 13.9, 6.7),
}
TABLE2_MX = {
    2: (22.3, 22.3),
    3: (7.5, 31.1, 5.9),
    4: (10.9, 11.0, 11.4, 11.3),
    5: (9.7, 8.8, 9.0, 8.3, 8.7),
    6: (3.7, 15.6, 3.0, 3.8, 15.6, 2.9),
}
BW_LEVELS = (5.0, 2.0, 1.0, 0.5)  # Fig. 12's levels are not in the text (Gbit/s of 10)
CPU_LEVELS = (2.0, 1.0, 0.5, 0.25)  # Fig. 13's levels are not in the text (cores of 4)
EPSILONS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5)  # Fig. 19a
# Figs. 12-13 compare PSLD's training speed across intensities once it has acted. The first decision
# comes after ~7 iterations of the round-robin start, whose length grows with the intensity: at 0.5 Gbit/s
# a round-robin VGG-16 iteration takes ~10 s, so the decision lands at ~72 s, after the scenario's 60 s
# warm-up, and the slow start used to count in the highest-intensity rate. Every policy and level gets the
# same longer run, measured after the first decision at every level.
INTENSITY_WINDOW = ("duration_s=240", "warmup_s=120")
RECOVERY_WINDOWS = {"before": (30.0, 90.0), "during": (150.0, 360.0), "after": (380.0, 450.0)}


def simulate(spec: Spec) -> dict[str, float]:
    """One run's flat metrics plus the Fig. 18 window rates (in a worker process)."""
    from clustertwin.analysis.psld_metrics import psld_metrics, window_rate
    from clustertwin.scenarios.load import load_scenario
    from clustertwin.sim.psld import run

    scenario = load_scenario(SCENARIOS / spec.scenario, spec.overrides)
    result = run(scenario)
    out = psld_metrics(result)
    if spec.scenario == "recovery.yaml":
        it = result.tables["iterations"]
        for name, (a, b) in RECOVERY_WINDOWS.items():
            out[f"rate_{name}"] = window_rate(it, a, b)
        loads = result.tables["loads"]
        last = loads[loads["map_version"] == loads["map_version"].max()]
        out["loaded_after"] = float((last["bytes"] > 0).sum())
    return out


def default_loads(framework: str, servers: int, seed: int = 0) -> list[float]:
    """Millions of parameters per PS of ResNet-101 under TensorFlow's or MXNet's default (Tables 1-2)."""
    import numpy as np

    from clustertwin.policies.psld.baselines import mxnet_layout, tensorflow_layout
    from clustertwin.traces.psld_models import psld_model

    tensors = psld_model("resnet101").tensors
    ids = list(range(servers))
    if framework == "tensorflow":
        blocks, owners = tensorflow_layout(tensors, ids)
    else:
        small = "hash" if framework == "mxnet-hash" else "random"
        blocks, owners = mxnet_layout(tensors, ids, 4 * 1024 * 1024, np.random.default_rng(seed), small)
    loads = [0.0] * servers
    for b, r in zip(blocks, owners, strict=True):
        loads[r] += b.nbytes / 4 / 1e6
    return loads


class _Plan:
    def __init__(self, seeds: list[int]) -> None:
        self.seeds = seeds
        self.specs: dict[str, Spec] = {}

    def need(self, scenario: str, *overrides: str) -> list[Spec]:
        specs = [Spec(scenario, (*overrides, f"seed={s}")) for s in self.seeds]
        for spec in specs:
            self.specs[spec.key] = spec
        return specs


def _stragglers(n: int, what: str = "bandwidth", value: float = 1.0) -> str:
    items = ", ".join(f"{{server: {i}, what: {what}, value: {value}}}" for i in range(n))
    return f"stragglers=[{items}]"


MODES = ("byteps", "vanilla")  # Fig. 15a, 15b
FIG15_POLICIES = ("mxnet", "strawman", "psld")
# Fig. 19's knobs: (override, the paper's default, the inputs' list of values)
SWEEPS = {
    "fig19b": ("psld.theta_ratio", 1.0, "theta_ratios"),
    "fig19c": ("block_mb", 4.0, "block_mbs"),
    "fig19d": ("psld.scale_threshold", 0.5, "scale_thresholds"),
}
RunKey = tuple[str, ...]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Checkpoint(_Strict):
    """Fig. 20b's checkpoint-and-restart: restart time plus the state written and read back."""

    restart_s: Annotated[float, Field(ge=0.0)]
    storage_gbytes_per_s: Annotated[float, Field(gt=0.0)]
    state_factor: Annotated[float, Field(gt=0.0)]  # state bytes per parameter byte

    def pause_s(self, model_bytes: float) -> float:
        return self.restart_s + 2 * self.state_factor * model_bytes / (self.storage_gbytes_per_s * 1e9)


class ClusterBInputs(_Strict):
    scenario: str  # under scenarios/psld/
    models: list[str]
    sweep_model: str
    theta_ratios: list[Annotated[float, Field(ge=0.0)]]
    block_mbs: list[Annotated[float, Field(gt=0.0)]]
    scale_thresholds: list[Annotated[float, Field(ge=0.0, le=1.0)]]
    checkpoint: Checkpoint
    quick_set: list[str]

    @model_validator(mode="after")
    def _sweeps(self) -> ClusterBInputs:
        # each Fig. 19 claim compares the paper's default with settings on both sides of it
        for _, default, values in SWEEPS.values():
            got = getattr(self, values)
            if default not in got or not (min(got) < default < max(got)):
                raise ValueError(
                    f"{values} must hold {default} (the paper's default) and values on both sides"
                )
        return self


class PSLDClaims(_Strict):
    paper: str
    inputs: ClusterBInputs
    claims: list[FigureClaim]


def load_psld_claims(path: Path = CLAIMS_FILE) -> PSLDClaims:
    return load_claim_file(path, PSLDClaims)


def cluster_b_runs(plan: _Plan, inputs: ClusterBInputs, quick: bool) -> dict[RunKey, list[Spec]]:
    """The Cluster-B runs, by (figure, ...): Fig. 15's policies per mode and model, Fig. 16's TensorFlow
    runs (BytePS, as PSLD's), and Fig. 19's sweeps on the sweep model, whose default point is Fig. 15a's
    PSLD run of that model."""
    window = tuple(inputs.quick_set) if quick else ()
    runs: dict[RunKey, list[Spec]] = {}
    for mode in MODES:
        for m in inputs.models:
            for p in FIG15_POLICIES:
                runs[("fig15", mode, m, p)] = plan.need(
                    inputs.scenario, f"model={m}", f"mode={mode}", f"policy={p}", *window
                )
    for m in inputs.models:
        runs[("fig16", m)] = plan.need(
            inputs.scenario, f"model={m}", "mode=byteps", "policy=tensorflow", *window
        )
    default = runs[("fig15", "byteps", inputs.sweep_model, "psld")]
    for fig, (field, paper_default, values) in SWEEPS.items():
        for v in getattr(inputs, values):
            runs[(fig, str(v))] = (
                default
                if v == paper_default
                else plan.need(
                    inputs.scenario,
                    f"model={inputs.sweep_model}",
                    "mode=byteps",
                    "policy=psld",
                    f"{field}={v}",
                    *window,
                )
            )
    return runs


def cluster_b_figures(
    inputs: ClusterBInputs, runs: dict[RunKey, list[Spec]], mean: Callable[[list[Spec], str], float]
) -> tuple[dict[str, float], dict[str, str]]:
    """The figures the Cluster-B claims name (``metric``), and per figure the values behind it (printed
    with the claim)."""
    from clustertwin.traces.psld_models import psld_model

    def rate(key: RunKey) -> float:
        return mean(runs[key], "samples_per_s")

    fig: dict[str, float] = {}
    notes: dict[str, str] = {}
    gains: dict[str, list[float]] = {}
    for mode in MODES:
        straw_base, psld_straw = {}, {}
        for m in inputs.models:
            base, straw, psld = (rate(("fig15", mode, m, p)) for p in FIG15_POLICIES)
            fig[f"fig15.{mode}.{m}.psld_over_baseline"] = psld / base
            fig[f"fig15.{mode}.{m}.gain_pct"] = 100 * (psld / base - 1)
            notes[f"fig15.{mode}.{m}.psld_over_baseline"] = f"{psld:.0f} / {base:.0f} img/s"
            straw_base[m], psld_straw[m] = straw / base, psld / straw
        gains[mode] = [fig[f"fig15.{mode}.{m}.gain_pct"] for m in inputs.models]
        fig[f"fig15.{mode}.strawman_over_baseline_max"] = max(straw_base.values())
        notes[f"fig15.{mode}.strawman_over_baseline_max"] = _listed(straw_base)
        fig[f"fig15.{mode}.psld_over_strawman_max_pct"] = 100 * (max(psld_straw.values()) - 1)
        notes[f"fig15.{mode}.psld_over_strawman_max_pct"] = _listed(psld_straw)
    fig["fig15.byteps_minus_vanilla_pts"] = statistics.fmean(gains["byteps"]) - statistics.fmean(
        gains["vanilla"]
    )
    over_tf = {}
    for m in inputs.models:
        tf, psld = rate(("fig16", m)), rate(("fig15", "byteps", m, "psld"))
        fig[f"fig16.{m}.psld_over_tensorflow"] = over_tf[m] = psld / tf
        notes[f"fig16.{m}.psld_over_tensorflow"] = f"{psld:.0f} / {tf:.0f} img/s"
    fig["fig16.psld_over_tensorflow_max_pct"] = 100 * (max(over_tf.values()) - 1)
    notes["fig16.psld_over_tensorflow_max_pct"] = _listed(over_tf)
    sweep: dict[str, dict[float, float]] = {}
    for name, (_, paper_default, values) in SWEEPS.items():
        sweep[name] = {v: rate((name, str(v))) for v in getattr(inputs, values)}
        others = [r for v, r in sweep[name].items() if v != paper_default]
        listed = ", ".join(f"{v:g}: {r:.0f}" for v, r in sweep[name].items()) + " img/s"
        if name != "fig19d":
            fig[f"{name}.peak"] = sweep[name][paper_default] / max(others)
            notes[f"{name}.peak"] = listed
    blocks = sweep["fig19c"]
    fig["fig19c.largest_over_4mb"] = blocks[max(blocks)] / blocks[SWEEPS["fig19c"][1]]
    scale = sweep["fig19d"]
    below = [r for v, r in scale.items() if v < 0.5]
    above = [r for v, r in scale.items() if v > 0.5]
    fig["fig19d.rise"] = scale[0.5] / max(below)
    fig["fig19d.above"] = max(above) / scale[0.5]
    notes["fig19d.rise"] = notes["fig19d.above"] = ", ".join(f"{v:g}: {r:.0f}" for v, r in scale.items())
    for mode in MODES:
        less = {}
        for m in inputs.models:
            pause = mean(runs[("fig15", mode, m, "psld")], "max_suspension_s")
            less[m] = 100 * (1 - pause / inputs.checkpoint.pause_s(psld_model(m).nbytes))
        worst = min(less, key=lambda m: less[m])
        fig[f"fig20b.{mode}.less_pct"] = less[worst]
        pause = mean(runs[("fig15", mode, worst, "psld")], "max_suspension_s")
        io = inputs.checkpoint.pause_s(psld_model(worst).nbytes) - inputs.checkpoint.restart_s
        notes[f"fig20b.{mode}.less_pct"] = (
            f"worst: {worst}, pause {pause:.2f} s; holds for any restart over "
            f"{max(0.0, 10 * pause - io):.1f} s"
        )
    return fig, notes


def cluster_b_rows(claims: PSLDClaims, fig: dict[str, float], notes: dict[str, str]) -> list[ClaimRow]:
    rows = []
    for c in claims.claims:
        if c.metric not in fig:
            known = ", ".join(sorted(fig))
            raise InputError(str(CLAIMS_FILE), f"claim {c.id}: unknown metric {c.metric!r}; known: {known}")
        note = f" ({notes[c.metric]})" if c.metric in notes else ""
        rows.append(
            ClaimRow(c.id, c.claim + note, c.source, c.paper, fig[c.metric], c.accept, c.fmt, c.gated, c.why)
        )
    return rows


def _listed(values: dict[str, float]) -> str:
    return ", ".join(f"{m}: {v:.2f}" for m, v in values.items())


def _claims(plan: _Plan, quick: bool) -> Callable[[dict[str, dict[str, float]]], list[ClaimRow]]:
    policies = ("mxnet", "strawman", "psld")
    fig11 = {
        (m, p): plan.need("one-straggler.yaml", f"model={m}", f"policy={p}", *_vgg(m))
        for m in FIG11_MODELS
        for p in policies
    }
    free = {
        m: plan.need("one-straggler.yaml", f"model={m}", "policy=mxnet", "stragglers=[]", *_vgg(m))
        for m in FIG11_MODELS
    }
    fig14_models = ("resnet50", "vgg16")
    many = {
        (m, n, p): plan.need("four-stragglers.yaml", f"model={m}", f"policy={p}", _stragglers(n), *_vgg(m))
        for m in fig14_models
        for n in (2, 4)
        for p in policies
    }
    bw = {
        (v, p): plan.need(
            "two-stragglers.yaml", f"policy={p}", _stragglers(2, "bandwidth", v), *INTENSITY_WINDOW
        )
        for v in BW_LEVELS
        for p in policies
    }
    cpu = {
        (v, p): plan.need("two-stragglers.yaml", f"policy={p}", _stragglers(2, "cpu", v), *INTENSITY_WINDOW)
        for v in CPU_LEVELS
        for p in policies
    }
    recovery = {
        p: plan.need("recovery.yaml", f"policy={p}") for p in ("mxnet", "strawman", "psld", "psld_noexplore")
    }
    eps = {e: plan.need("real-world.yaml", f"psld.epsilon={e}") for e in EPSILONS}
    scale = {s: plan.need("scale-out.yaml", f"psld.scale_out={s}") for s in ("true", "false")}
    vanilla = plan.need("one-straggler.yaml", "model=vgg16", "policy=psld", "mode=vanilla", *_vgg("vgg16"))
    cluster_b = load_psld_claims()
    cluster_b_specs = cluster_b_runs(plan, cluster_b.inputs, quick)

    def rows(done: dict[str, dict[str, float]]) -> list[ClaimRow]:
        def mean(specs: list[Spec], metric: str = "samples_per_s") -> float:
            return statistics.fmean(done[s.key][metric] for s in specs)

        out: list[ClaimRow] = []
        # --- Tables 1-2: default assignments of ResNet-101 ---
        total = sum(default_loads("tensorflow", 1))
        out.append(
            ClaimRow(
                "resnet101-params",
                "ResNet-101 parameters (M) in our tensor catalogue",
                "§2.2, Tables 1-2",
                "44.5",
                total,
                (44.0, 45.0),
                "{:.2f}",
                why=(
                    "our tensor catalogue of ResNet-101 no longer adds up to the paper's parameter count (a "
                    "layer missing or counted twice)"
                ),
            )
        )
        for fw, table, label in (
            ("tensorflow", TABLE1_TF, "Table 1 (TF)"),
            ("mxnet", TABLE2_MX, "Table 2 (MXNet, small tensors random)"),
            ("mxnet-hash", TABLE2_MX, "Table 2 (MXNet, small tensors by key hash)"),
        ):
            worst_paper, worst_ours = 0.0, 0.0
            ratios: dict[int, float] = {}
            for n, paper in table.items():
                ours = default_loads(fw, n)
                ratio_p, ratio_o = max(paper) / min(paper), max(ours) / max(min(ours), 1e-9)
                ratios[n] = ratio_o
                worst_paper, worst_ours = max(worst_paper, ratio_p), max(worst_ours, ratio_o)
                out.append(
                    ClaimRow(
                        f"{fw}-{n}ps",
                        f"{label}: ResNet-101 on {n} PSs, max/min params per PS "
                        f"(ours: {' / '.join(f'{x:.1f}' for x in ours)})",
                        label,
                        f"{ratio_p:.1f} ({' / '.join(map(str, paper))})",
                        ratio_o,
                        None,
                        "{:.1f}",
                    )
                )
            out.append(
                ClaimRow(
                    f"{fw}-imbalanced",
                    f"{label}: some PS count leaves the default assignment imbalanced "
                    "(worst max/min over 2-6 PSs)",
                    f"§2.2, {label}",
                    f"{worst_paper:.1f}",
                    worst_ours,
                    None if fw == "mxnet" else (2.0, INF),
                    "{:.1f}",
                    why=(
                        "the default assignment's imbalance comes from a period-3 variable sequence (conv "
                        "weight, BN gamma, BN beta) meeting round-robin or a key hash; a balanced result "
                        "means the catalogue's order or the baseline layout changed"
                    ),
                )
            )
            worst_two = sorted(ratios, key=lambda n: -ratios[n])[:2]
            out.append(
                ClaimRow(
                    f"{fw}-worst-at-3-6",
                    f"{label}: the two most imbalanced PS counts are 3 and 6 (ours: {sorted(worst_two)})",
                    f"§2.2, {label}",
                    "3 and 6",
                    float(len({3, 6} & set(worst_two))),
                    None if fw == "mxnet" else (2.0, 2.0),
                    "{:.0f} of 2",
                    why=(
                        "the worst PS counts follow the catalogue's period-3 variable sequence; other counts "
                        "mean the catalogue's order or the baseline layout changed"
                    ),
                )
            )
        # --- Fig. 11: one straggler ---
        gains: dict[str, float] = {}
        for m in FIG11_MODELS:
            drop_p, gain_p, free_p, straw_p = FIG11_PAPER[m]
            base, straw, psld, ok = (
                (mean(fig11[(m, p)]) for p in (*policies,))
                if False
                else (
                    mean(fig11[(m, "mxnet")]),
                    mean(fig11[(m, "strawman")]),
                    mean(fig11[(m, "psld")]),
                    mean(free[m]),
                )
            )
            gains[m] = 100 * (psld / base - 1)
            out.append(
                ClaimRow(
                    f"fig11-{m}-order-strawman",
                    f"Fig. 11 {m}: strawman beats the straggling baseline (strawman / baseline)",
                    "§6.2, Fig. 11",
                    "> 1",
                    straw / base,
                    (1.0, INF),
                    why=(
                        "the strawman's proportional split from the same profiles should beat a baseline that"
                        " ignores the straggler; below 1 it split on stale or wrong profiles"
                    ),
                )
            )
            out.append(
                ClaimRow(
                    f"fig11-{m}-order-psld",
                    f"Fig. 11 {m}: PSLD beats the strawman (PSLD / strawman)",
                    "§6.2, Fig. 11",
                    f"> 1 (up to {1 + straw_p / 100:.2f})",
                    psld / straw,
                    (1.0, INF),
                    why=(
                        "our strawman shares PSLD's profiles, trigger and min-gain guard, so PSLD leads it by"
                        " little; below 1 PSLD's exploration cost more than it found"
                        " (docs/algorithms/psld.md, 'Strawman"
                        " vs PSLD')"
                    ),
                )
            )
            out.append(
                ClaimRow(
                    f"fig11-{m}-gain",
                    f"Fig. 11 {m}: PSLD over the straggling baseline (%)",
                    "§6.2: 'by 39%-286%'",
                    f"{gain_p}%",
                    gains[m],
                    (39.0, 286.0),
                    "{:.0f}%",
                    gated=False,  # a magnitude: the ordering and VGG-16 gaining most are the claims
                    why=(
                        "not gated: one 1 Gbps PS is far more harmful to our baseline than to the paper's "
                        "(drop 85-89% vs 38-67%), so PSLD's gain over it lies above the paper's range "
                        "(docs/algorithms/psld.md)"
                    ),
                )
            )
            out.append(
                ClaimRow(
                    f"fig11-{m}-drop",
                    f"Fig. 11 {m}: baseline throughput drop from the straggler (%)",
                    "§6.2, Fig. 11",
                    f"up to {drop_p}%",
                    100 * (1 - base / ok),
                    None,
                    "{:.0f}%",
                )
            )
            out.append(
                ClaimRow(
                    f"fig11-{m}-vs-free",
                    f"Fig. 11 {m}: PSLD (with straggler) over the straggler-free baseline (%)",
                    "§6.2, Fig. 11",
                    f"up to {free_p}%",
                    100 * (psld / ok - 1),
                    None,
                    "{:.0f}%",
                )
            )
        out.append(
            ClaimRow(
                "fig11-vgg16-most",
                "Fig. 11: VGG-16 gains most over the straggling baseline (VGG-16's gain "
                "minus the best other model's, points)",
                "§6.2: VGG16 286% > AlexNet 224% > ResNet50 109%",
                "> 0",
                gains["vgg16"] - max(gains["alexnet"], gains["resnet50"]),
                (0.0, INF),
                "{:.0f}",
                why=(
                    "VGG-16's large layers suffer most from one slow PS under the baseline's split; if "
                    "another model gains more, the per-model message sizes or the straggler's cost changed"
                ),
            )
        )
        # --- Figs. 12-14: more stragglers, intensity ---
        for m in fig14_models:
            one = mean(fig11[(m, "psld")]) / mean(fig11[(m, "mxnet")])
            two = mean(many[(m, 2, "psld")]) / mean(many[(m, 2, "mxnet")])
            four = mean(many[(m, 4, "psld")]) / mean(many[(m, 4, "mxnet")])
            paper4 = {"resnet50": (3.4, 1.7), "vgg16": (5.5, 2.8)}[m]
            out.append(
                ClaimRow(
                    f"fig14-{m}-grows",
                    f"Figs. 12-14 {m}: speedup over baseline grows with the number of "
                    f"stragglers (4 / 1 straggler; 1: {one:.2f}x, 2: {two:.2f}x)",
                    "§6.2, Fig. 14",
                    "> 1",
                    four / one,
                    (1.0, INF),
                    why=(
                        "our baseline is already bound by its slowest PS, so more 1 Gbps PSs do not slow it "
                        "further while PSLD loses capacity with each: the speedup falls"
                        " (docs/algorithms/psld.md, 'More "
                        "stragglers do not slow our baseline further')"
                    ),
                )
            )
            out.append(
                ClaimRow(
                    f"fig14-{m}-4x",
                    f"Fig. 14 {m}: PSLD / baseline with 4 of 8 PSs at 1 Gbps",
                    "§6.2, Fig. 14",
                    f"{paper4[0]}x",
                    four,
                    None,
                    "{:.2f}x",
                )
            )
            straw4 = mean(many[(m, 4, "psld")]) / mean(many[(m, 4, "strawman")])
            out.append(
                ClaimRow(
                    f"fig14-{m}-strawman",
                    f"Fig. 14 {m}: PSLD / strawman with 4 stragglers",
                    "§6.2, Fig. 14",
                    f"{paper4[1]}x",
                    straw4,
                    (1.0, INF),
                    "{:.2f}x",
                    gated=False,
                    why=(
                        "not gated: with four slow PSs PSLD's exploration puts whole blocks on stragglers "
                        "while the strawman's small shares pipeline (docs/algorithms/psld.md)"
                    ),
                )
            )
        for label, table, levels, paper_worst in (
            ("bandwidth", bw, BW_LEVELS, 4.72),
            ("cpu", cpu, CPU_LEVELS, 5.96),
        ):
            psld_rates = [mean(table[(v, "psld")]) for v in levels]
            out.append(
                ClaimRow(
                    f"fig12-13-{label}-steady",
                    f"Figs. 12-13 VGG-16, 2 {label} stragglers: PSLD steady as "
                    f"intensity rises (throughput at the highest / lowest intensity, levels {levels})",
                    "§6.2: 'PSLD performs steadily'",
                    "~1",
                    psld_rates[-1] / psld_rates[0],
                    (0.8, INF),
                    gated=False,
                    why=(
                        "not gated: exploration blocks on a 0.5 Gbps PS bound the iteration at about 1.1 s "
                        "(docs/algorithms/psld.md, 'Exploration is expensive on a very slow PS')"
                    ),
                )
            )
            worst = max(mean(table[(v, "psld")]) / mean(table[(v, "mxnet")]) for v in levels)
            out.append(
                ClaimRow(
                    f"fig12-13-{label}-speedup",
                    f"Figs. 12-13 VGG-16, 2 {label} stragglers: largest "
                    "PSLD / baseline speedup over the levels",
                    "§6.2",
                    f"{paper_worst}x",
                    worst,
                    None,
                    "{:.2f}x",
                )
            )
            gap = max(100 * (1 - mean(table[(v, "strawman")]) / mean(table[(v, "psld")])) for v in levels)
            out.append(
                ClaimRow(
                    f"fig12-13-{label}-strawman",
                    f"Figs. 12-13 VGG-16, 2 {label} stragglers: strawman below PSLD, worst level (%)",
                    "§6.2",
                    "up to 86%",
                    gap,
                    None,
                    "{:.0f}%",
                )
            )
        # --- Fig. 18: recovery ---
        rec = {p: {w: mean(s, f"rate_{w}") for w in RECOVERY_WINDOWS} for p, s in recovery.items()}
        out.append(
            ClaimRow(
                "fig18-psld-recovers",
                "Fig. 18: PSLD detects the recovery (after / before the stragglers)",
                "§6.2, Fig. 18",
                ">= 1 ('higher than before')",
                rec["psld"]["after"] / rec["psld"]["before"],
                (0.9, INF),
                why=(
                    "with exploration PSLD should see the recovered PSs and move blocks back; below the band "
                    "its exploration draws missed them within the run"
                ),
            )
        )
        out.append(
            ClaimRow(
                "fig18-noexplore-misses",
                "Fig. 18: without exploration PSLD does not (PSLD-noexplore after / PSLD after)",
                "§6.2: 'fails to identify the recovered PSs'",
                "< 1",
                rec["psld_noexplore"]["after"] / rec["psld"]["after"],
                (0.0, 0.95),
                why=(
                    "without exploration PSLD should never see the recovery; matching PSLD means some other "
                    "path (a recheck, the min-gain guard) moved blocks back"
                ),
            )
        )
        out.append(
            ClaimRow(
                "fig18-noexplore-loaded",
                "Fig. 18: PSs holding blocks after recovery, PSLD without "
                f"exploration (PSLD: {mean(recovery['psld'], 'loaded_after'):.1f})",
                "§6.2, Fig. 18",
                "2 of 4",
                mean(recovery["psld_noexplore"], "loaded_after"),
                (0.0, 2.5),
                "{:.1f}",
                why=(
                    "without exploration the recovered PSs should stay empty; more PSs holding blocks means "
                    "something other than exploration reloaded them"
                ),
            )
        )
        out.append(
            ClaimRow(
                "fig18-during",
                "Fig. 18: PSLD / baseline while two PSs straggle",
                "§6.2, Fig. 18",
                "2.31x",
                rec["psld"]["during"] / rec["mxnet"]["during"],
                None,
                "{:.2f}x",
            )
        )
        out.append(
            ClaimRow(
                "fig18-strawman",
                "Fig. 18: PSLD / strawman after recovery",
                "§6.2, Fig. 18",
                "1.34x",
                rec["psld"]["after"] / rec["strawman"]["after"],
                (1.0, INF),
                "{:.2f}x",
                gated=False,
                why=(
                    "not gated: our strawman's periodic recheck rebalances after the recovery too, which the "
                    "paper's did not (docs/algorithms/psld.md)"
                ),
            )
        )
        # --- Fig. 19a: epsilon ---
        thr = {e: mean(eps[e]) for e in EPSILONS}
        low = max(v for e, v in thr.items() if e <= 0.1)
        high = max(v for e, v in thr.items() if e > 0.1)
        out.append(
            ClaimRow(
                "fig19a-eps",
                "Fig. 19a: epsilon > 0.1 hurts (best over eps <= 0.1 / best over eps > 0.1; "
                + ", ".join(f"{e}: {v:.0f}" for e, v in thr.items())
                + " img/s)",
                "§6.3, Fig. 19a",
                "> 1",
                low / high,
                (1.0, INF),
                "{:.3f}",
                why=(
                    "epsilon's effect is within seed noise in our Markov bandwidth regimes: one epsilon's "
                    "throughput varies up to 2.3x across seeds"
                    " (docs/algorithms/psld.md, 'epsilon sensitivity is within "
                    "seed noise')"
                ),
            )
        )
        out.append(
            ClaimRow(
                "fig19a-drop",
                "Fig. 19a: largest drop at eps > 0.1 vs the best eps <= 0.1 (%)",
                "§6.3, Fig. 19a",
                "up to 24.3%",
                100 * (1 - min(v for e, v in thr.items() if e > 0.1) / low),
                None,
                "{:.1f}%",
            )
        )
        # --- Fig. 17: scale-out; Fig. 20: overhead ---
        out.append(
            ClaimRow(
                "fig17-scale-out",
                "Fig. 17: 6 of 8 PSs straggle -> PSLD scales out (PSs added)",
                "§6.2, Fig. 17",
                ">= 1",
                mean(scale["true"], "scale_outs"),
                (1.0, INF),
                "{:.1f}",
                gated=False,
                why="not gated: scale-out is reported beside the listed claims (docs/algorithms/psld.md)",
            )
        )
        out.append(
            ClaimRow(
                "fig17-boost",
                "Fig. 17: throughput after the straggle, with / without scale-out",
                "§6.2, Fig. 17",
                "'boosted again'",
                mean(scale["true"]) / mean(scale["false"]),
                None,
                "{:.2f}x",
            )
        )
        worst = max(done[s.key]["max_suspension_s"] for specs in (*fig11.values(), vanilla) for s in specs)
        out.append(
            ClaimRow(
                "fig20-overhead",
                "Fig. 20a: longest suspension per reassignment (s), Fig. 11 runs and a "
                "vanilla-PS VGG-16 run with state migration",
                "§6.3, Fig. 20a",
                "< 2 s",
                worst,
                (0.0, 2.0),
                "{:.2f}",
                gated=False,
                why=(
                    "not gated: the suspension per reassignment is reported beside the listed claims "
                    "(docs/algorithms/psld.md)"
                ),
            )
        )
        # --- Cluster-B: Figs. 15, 16, 19b-d, 20b (claims as data) ---
        out.extend(cluster_b_rows(cluster_b, *cluster_b_figures(cluster_b.inputs, cluster_b_specs, mean)))
        return out

    return rows


def _longest(spec: Spec) -> bool:
    """The recovery runs and Cluster-B's AlexNet and ResNet-50 runs (short iterations at 100 Gbit/s, so
    many messages) are the longest: started first, they do not finish last alone."""
    return spec.scenario == "recovery.yaml" or (
        spec.scenario == "cluster-b.yaml"
        and not {"model=alexnet", "model=resnet50"}.isdisjoint(spec.overrides)
    )


def _vgg(model: str) -> tuple[str, ...]:
    """VGG-16 iterations are ~10x longer under a straggler: a longer run so PSLD's reports happen."""
    return ("duration_s=150", "warmup_s=60") if model == "vgg16" else ()


def reproduce(quick: bool, out: Path, workers: int | None = None) -> int:
    """Run (or reuse) every run the claims need, print the table; 0 when every gated claim holds."""
    plan = _Plan([0] if quick else [0, 1, 2])
    make_rows = _claims(plan, quick)
    done = run_specs("psld", out, plan.specs, simulate, workers, first=_longest)
    rows = with_per_seed(make_rows(done), make_rows, done, plan.specs, plan.seeds)
    return report("psld", PAPER, quick, plan.seeds, out, rows)


if __name__ == "__main__":  # python -m clustertwin.reproduce_psld [--quick] [OUT]
    args = [a for a in sys.argv[1:] if a != "--quick"]
    sys.exit(reproduce("--quick" in sys.argv[1:], Path(args[0]) if args else Path("runs/reproduce-psld")))
