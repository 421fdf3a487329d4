"""``reproduce pipedream``: PipeDream, 2BW/Flush, GPipe, interleaved and PTD-P claims ([PipeDream-arXiv];
[Narayanan] ch. 2-4, Table 7.1) as claim rows (``claim_results``).

Rows 1-5 run no scenario and are computed live from our code when the command runs; row 6 runs
scenarios:

1. simulation oracles (zero communication, uniform stage costs t_f = 1, t_b = 2): iteration times of
   GPipe, Flush and interleaved 1F1B, and Table 7.1's weight versions and activation stashes as the
   op-level simulator measures them;
2. the partitioning DP ([PipeDream-arXiv] §3.1, [Narayanan] §2.4.1) against exhaustive search on random
   small instances (``policies.pipedream.brute_force``);
3. the planner's choices on the shipped profiles against the published ones ([Narayanan] §2.5.2, Table
   2.2); the choices we do not reproduce are reported, with the reason, not checked;
4. PTD-P's parameter (Eq. 4.3) and FLOP (Eq. 4.2) formulas against Tables 4.1 and 4.2 and §4.5.1's
   training-time estimates, and the bubble and communication takeaways of §4.3;
5. our speed targets on ``clustertwin.bench_pipedream``'s inputs, checked on this process's
   CPU time (the wall time, printed beside it, depends on the machine's other load);
6. the papers' headline speedups in simulation (PipeDream vs data and model parallelism, 2BW vs GPipe
   and Flush, interleaved vs not) on their cluster shapes from the bundled profiles: claims as data in
   ``scenarios/claims/pipedream/speedups.yaml``, each a baseline and a treatment run of a scenario
   (``claim_runs``: a run pool and a per-run cache under ``<out>/runs``).

Tolerances: an identity of the model (an oracle, DP = brute force, a takeaway's ratio) is checked to
1e-9 relative; a published number is checked to its printed rounding (Table 4.1's 0.1B is ±0.05B; whole
days are ±0.5 day plus what rounding X to 1 TFLOP/s moves); a plan is checked for equality. ``--quick``
runs fewer oracle settings, random instances and planner timings, and simulates fewer inputs in the
speedup claims.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from clustertwin.bench_pipedream import (
    FLAT_16,
    HIERARCHY_2X8,
    REPRODUCE_SHAPES,
    best_times,
    largest_profile,
    largest_shape,
    planner_args,
    vgg16_1f1b_inputs,
)
from clustertwin.claim_results import ClaimRow, report
from clustertwin.claim_runs import Spec, run_specs
from clustertwin.policies.pipedream import ptdp
from clustertwin.policies.pipedream.brute_force import brute_force
from clustertwin.policies.pipedream.partition import Convention, Level, plan_partition
from clustertwin.policies.pipedream.schedules import make_schedule, schedule_spec
from clustertwin.reproduce import claim_row, runs_of
from clustertwin.scenarios.claims import load_claims
from clustertwin.scenarios.pipedream_schema import PipeDreamModel
from clustertwin.sim.pipedream.executor import SimOutcome, simulate
from clustertwin.sim.pipedream.model import ChunkCost, Device, Network
from clustertwin.traces.pipedream_profile import bundled_profile

PAPER = (
    "Harlap, Narayanan et al., PipeDream: Fast and Efficient Pipeline Parallel DNN Training; Narayanan,"
    " PhD dissertation ch. 2-4"
)
TF, TB = 1.0, 2.0  # the oracles' stage costs (t_b = 2 t_f, as in practice)
EXACT = 1e-9  # relative slack for identities: floating-point summation only
SEED = 0  # of the random planner instances
GB = 1e9

# Cluster topologies of [Narayanan] §2.5.1 as in experiments/pipedream_choices.py: A = 4 V100 per server on
# shared PCIe (10 GB/s assumed), 10 Gbps between servers; B = 8 V100 with NVLink (30 GB/s assumed),
# 25 Gbps between servers; "flat 16" = [PipeDream-arXiv]'s flat DP over 16 workers on 10 Gbps.
A_4X4 = REPRODUCE_SHAPES["A 4x4"]
A_1X4 = REPRODUCE_SHAPES["A 1x4"]
B_2X8 = HIERARCHY_2X8
SPEEDUPS = "pipedream/speedups"  # scenarios/claims/pipedream/speedups.yaml
BATCH = {"vgg16": 64, "resnet50": 128, "gnmt": 64, "gnmt_large": 64}  # per-GPU batches, §2.5.1

# Table 4.1 (SC'21 Table 1; an image in the seed, values from the published paper): parameters in
# billions, hidden size, layers. V = 51,200 and s = 2048 for every model (§4.5.1).
VOCAB, SEQ = 51200, 2048
TABLE_4_1 = [
    (1.7, 2304, 24),
    (3.6, 3072, 30),
    (7.5, 4096, 36),
    (18.4, 6144, 40),
    (39.1, 8192, 48),
    (76.1, 10240, 60),
    (145.6, 12288, 80),
    (310.1, 16384, 96),
    (529.6, 20480, 105),
    (1008.0, 25600, 128),
]
# Table 4.2 (in the seed): scheme, parameters (B), layers, hidden, GPUs, achieved TFLOP/s per GPU,
# published days for 300B tokens. The 174.6B model is GPT-3 (96 x 12288); 529.6B is Table 4.1's.
TABLE_4_2 = [
    ("ZeRO-3", 174.6, 96, 12288, 384, 144, 90),
    ("ZeRO-3", 174.6, 96, 12288, 768, 88, 74),
    ("ZeRO-3", 174.6, 96, 12288, 1536, 44, 74),
    ("ZeRO-3", 529.6, 105, 20480, 640, 138, 169),
    ("ZeRO-3", 529.6, 105, 20480, 1120, 98, 137),
    ("ZeRO-3", 529.6, 105, 20480, 2240, 48, 140),
    ("PTD-P", 174.6, 96, 12288, 384, 153, 84),
    ("PTD-P", 174.6, 96, 12288, 768, 149, 43),
    ("PTD-P", 174.6, 96, 12288, 1536, 141, 23),
    ("PTD-P", 529.6, 105, 20480, 560, 171, 156),
    ("PTD-P", 529.6, 105, 20480, 1120, 167, 80),
    ("PTD-P", 529.6, 105, 20480, 2240, 159, 42),
]

SIM_TARGET_S = 2.0  # 8-stage, 64-microbatch 1F1B simulation
PLANNER_TARGET_S = 10.0  # planner on the largest shipped profile


def _exact(value: float) -> tuple[float, float]:
    """The band of an identity around ``value``."""
    slack = EXACT * max(1.0, abs(value))
    return (value - slack, value + slack)


def _oracle_run(name: str, p: int, m: int, v: int = 1, batches: int = 1) -> SimOutcome:
    """Simulate ``name`` on ``p`` devices with uniform stages and no communication."""
    schedule = make_schedule(name, (1,) * p, m, num_batches=batches, chunks_per_device=v)
    costs = [ChunkCost(TF / v, TB / v, 1.0, 1.0, 0.0, 0.0) for _ in range(schedule.num_chunks)]
    return simulate(schedule, costs, [Device() for _ in schedule.workers], Network())


def _deviation(measured: list[int], expected: list[int]) -> float:
    """Largest per-stage difference (0 when the lists agree)."""
    if len(measured) != len(expected):
        return math.inf
    return float(max(abs(a - b) for a, b in zip(measured, expected, strict=True)))


def _versions(name: str, p: int) -> list[int]:
    """Table 7.1's weight versions per stage of schedule ``name`` on ``p`` stages."""
    spec = schedule_spec(name)
    return [spec.weight_versions(p, s) for s in range(p)]


def _stashes(name: str, p: int, m: int) -> list[int]:
    """Table 7.1's stashed activations per stage of schedule ``name`` on ``p`` stages, ``m`` microbatches."""
    spec = schedule_spec(name)
    counts = [spec.stashed_activations(p, m, s) for s in range(p)]
    return [c for c in counts if c is not None]  # the schedules checked here all state a count


def _listed(values: list[int]) -> str:
    return ",".join(str(x) for x in values)


def oracle_rows(quick: bool) -> list[ClaimRow]:
    """Claim 1: iteration times and Table 7.1's versions and stashes in simulation ([Narayanan] §2.2.1,
    §3.2, §4.2.2, Table 7.1)."""
    rows: list[ClaimRow] = []
    flush_cases = [(4, 8), (8, 16)] if quick else [(4, 8), (8, 16), (3, 5), (1, 4), (6, 24)]
    for name, label in (("gpipe", "GPipe"), ("flush", "PipeDream-Flush")):
        for p, m in flush_cases:
            # Eq. 4.1 (ptdp.batch_time) is the same (m + p - 1)(t_f + t_b) law.
            expected = ptdp.batch_time(m, p, TF, TB)
            rows.append(
                ClaimRow(
                    f"oracle-{name}-p{p}-m{m}",
                    f"{label} iteration, p={p}, m={m}, t_f=1, t_b=2, no communication",
                    "§2.2.1, §3.2.2, Eq. 4.1",
                    f"(m+p-1)(t_f+t_b) = {expected:g}",
                    _oracle_run(name, p, m).makespan_s,
                    _exact(expected),
                    why=(
                        "with uniform stages and no communication the schedule's makespan is this closed "
                        "form; a different time means the schedule's op order or the simulator's dependencies"
                        " depart from the paper's schedule"
                    ),
                )
            )
    inter_cases = [(4, 2, 8), (4, 4, 8)] if quick else [(4, 2, 8), (4, 4, 8), (2, 3, 4), (4, 2, 16)]
    for p, v, m in inter_cases:
        expected = (m + (p - 1) / v) * (TF + TB)
        rows.append(
            ClaimRow(
                f"oracle-interleaved-p{p}-v{v}-m{m}",
                f"Interleaved 1F1B iteration, p={p}, v={v}, m={m}: bubble divided by v",
                "§4.2.2, Table 7.1",
                f"(m+(p-1)/v)(t_f+t_b) = {expected:g}",
                _oracle_run("interleaved", p, m, v).makespan_s,
                _exact(expected),
                why=(
                    "with uniform stages and no communication the schedule's makespan is this closed form; a "
                    "different time means the schedule's op order or the simulator's dependencies depart from"
                    " the paper's schedule"
                ),
            )
        )
    # 2BW and PipeDream have no flush: several minibatches run back to back, so only one fill and
    # one drain are paid in all (Table 7.1's idle fraction 0 in steady state).
    p, m, batches = 4, 4, 4
    expected = (batches * m + p - 1) * (TF + TB)
    tbw = _oracle_run("2bw", p, m, batches=batches)
    rows.append(
        ClaimRow(
            f"oracle-2bw-p{p}-m{m}x{batches}",
            f"2BW, {batches} minibatches of m={m} on p={p}: one fill and drain in all (GPipe would flush "
            f"{batches} times: {batches * ptdp.batch_time(m, p, TF, TB):g})",
            "§3.2.1, Table 7.1",
            f"(Nm+p-1)(t_f+t_b) = {expected:g}",
            tbw.makespan_s,
            _exact(expected),
            why=(
                "2BW has no flush: back-to-back minibatches must pay one fill and one drain in all; more "
                "means the schedule flushes between minibatches"
            ),
        )
    )
    for p in (4,) if quick else (4, 6):
        m = 3 * p
        flush = _oracle_run("flush", p, m)
        gpipe = _oracle_run("gpipe", p, m)
        pipedream = _oracle_run("1f1b", p, m)
        tbw = _oracle_run("2bw", p, p, batches=4)
        # The expected counts are each schedule's own statement of Table 7.1 (its registry entry).
        checks = [
            ("flush-stashes", "Flush peak activation stashes per stage", flush.peak_stashes,
             _stashes("flush", p, m), "p..1", "§3.2.2, Table 7.1"),
            ("gpipe-stashes", f"GPipe peak activation stashes per stage (m={m})", gpipe.peak_stashes,
             _stashes("gpipe", p, m), "m", "§2.2.1, Table 7.1"),
            ("1f1b-versions", "PipeDream 1F1B weight versions per stage (stage s keeps p-s)",
             pipedream.peak_versions, _versions("1f1b", p), "p-s", "§2.4.3, Table 7.1"),
            ("2bw-versions", "2BW weight versions per stage", tbw.peak_versions, _versions("2bw", p), "2",
             "§3.2.1, Table 7.1"),
            ("flush-versions", "Flush weight versions per stage", flush.peak_versions, _versions("flush", p),
             "1", "§3.2.2, Table 7.1"),
            ("gpipe-versions", "GPipe weight versions per stage", gpipe.peak_versions, _versions("gpipe", p),
             "1", "§2.2.1, Table 7.1"),
        ]  # fmt: skip
        for cid, text, measured, expected_list, formula, source in checks:
            rows.append(
                ClaimRow(
                    f"table7.1-{cid}-p{p}",
                    f"{text}, p={p}: measured {_listed(measured)} (ours = largest difference)",
                    source,
                    f"{formula} = {_listed(expected_list)}",
                    _deviation(measured, expected_list),
                    (0.0, 0.0),
                    "{:.0f}",
                    why=(
                        "Table 7.1's weight versions and activation stashes follow from the schedule; a "
                        "difference means the schedule keeps more (or fewer) versions or in-flight "
                        "microbatches than the paper's"
                    ),
                )
            )
    for v, stage_equivalents in ((2, 5.5), (4, 4.75)):
        out = _oracle_run("interleaved", 4, 8, v)
        rows.append(
            ClaimRow(
                f"oracle-interleaved-stash-v{v}",
                f"Interleaved v={v}, p=4: device 0's peak stashes in stage equivalents ('comparable "
                "memory' to 1F1B's p)",
                "§4.2.2",
                f"p+(p-1)/v = {stage_equivalents:g}",
                out.peak_stashes[0] / v,
                _exact(stage_equivalents),
                why=(
                    "interleaving keeps p + (p-1)/v stage equivalents of activations on the first device; "
                    "more means the interleaved schedule runs further ahead than the paper's"
                ),
            )
        )
    return rows


def brute_force_rows(quick: bool, seed: int = SEED) -> list[ClaimRow]:
    """Claim 2: the DP's optimum equals exhaustive search on random flat instances, for every
    communication convention, straight or not ([PipeDream-arXiv] §3.1; [Narayanan] §2.4.1)."""
    rng = np.random.default_rng(seed)
    conventions: tuple[Convention, ...] = ("dissertation", "arxiv", "code")
    per_convention = 15 if quick else 150
    rows = []
    for convention in conventions:
        worst = 0.0
        for _ in range(per_convention):
            layers = int(rng.integers(1, 6))  # brute force is exponential: up to 5 layers, 4 devices
            devices = int(rng.integers(1, 5))
            straight = bool(rng.integers(0, 2)) and devices <= layers  # straight needs a layer a device
            compute = rng.uniform(0.01, 5.0, layers).tolist()
            params = rng.uniform(0.0, 5.0, layers).tolist()
            cuts = rng.uniform(0.0, 5.0, layers).tolist()
            bandwidth = float(rng.uniform(0.2, 10.0))
            plan = plan_partition(compute, params, cuts, [Level(devices, bandwidth)], convention, straight)
            best = brute_force(compute, params, cuts, devices, bandwidth, convention, straight)
            gap = abs(plan.time_per_input - best) / best
            if plan.num_devices != devices:
                gap = math.inf  # a plan on other devices than given is wrong whatever its cost
            worst = max(worst, gap)
        rows.append(
            ClaimRow(
                f"planner-brute-force-{convention}",
                f"Partitioning DP = exhaustive search, {per_convention} random instances (<= 5 layers, "
                f"<= 4 devices, seed {seed}), {convention} convention (ours = largest relative gap)",
                "[PipeDream-arXiv] §3.1; §2.4.1",
                "optimal",
                worst,
                (0.0, EXACT),
                "{:.1e}",
                why=(
                    "the partitioning DP must find the optimum that exhaustive search finds; a gap means the "
                    "DP's recurrence or its communication term departs from [PipeDream-arXiv] §3.1"
                ),
            )
        )
    return rows


def _plan_config(model: str, levels: list[Level], convention: Convention) -> tuple[str, float]:
    """The planner's configuration and predicted ms per input for a shipped profile at its per-GPU
    batch, at a scenario's default resolution (``model.max_blocks``: every layer of a bundled profile)."""
    profile = bundled_profile(model).scaled(BATCH[model]).coarsened(PipeDreamModel().max_blocks)
    plan = plan_partition(*planner_args(profile), levels, convention)
    return plan.config, plan.time_per_input * 1e3


def choice_rows() -> list[ClaimRow]:
    """Claim 3: the planner's choices vs the published ones ([Narayanan] §2.5.2: VGG-16 15-1, ResNet-50
    data parallel, GNMT straight). Rows we do not reproduce are reported with the reason."""
    straight4 = "1-1-1-1"
    cases: list[tuple[str, str, str, list[Level], Convention, str, str | None]] = [
        # (id, model label, cluster label, levels, convention, published, reason if reported only)
        ("vgg16-flat16-arxiv", "VGG-16", "flat 16 @10 Gbps", FLAT_16, "arxiv", "15-1", None),
        ("resnet50-a4x4-arxiv", "ResNet-50", "A 4x4", A_4X4, "arxiv", "16", None),
        ("resnet50-b2x8-dissertation", "ResNet-50", "B 2x8", B_2X8, "dissertation", "16", None),
        ("resnet50-b2x8-arxiv", "ResNet-50", "B 2x8", B_2X8, "arxiv", "16", None),
        ("resnet50-flat16-arxiv", "ResNet-50", "flat 16 @10 Gbps", FLAT_16, "arxiv", "16", None),
        ("gnmt-a1x4-dissertation", "GNMT-8", "A 1x4", A_1X4, "dissertation", straight4, None),
        ("gnmt-a1x4-arxiv", "GNMT-8", "A 1x4", A_1X4, "arxiv", straight4, None),
        ("gnmt-a1x4-code", "GNMT-8", "A 1x4", A_1X4, "code", straight4, None),
        ("vgg16-a4x4-dissertation", "VGG-16", "A 4x4", A_4X4, "dissertation", "15-1",
         "the hierarchical DP gives each top-level stage whole 4-GPU servers, so 15-1 cannot be built"),
        ("vgg16-b2x8-dissertation", "VGG-16", "B 2x8", B_2X8, "dissertation", "15-1",
         "whole 8-GPU servers per top-level stage, as on A"),
        ("resnet50-a4x4-dissertation", "ResNet-50", "A 4x4", A_4X4, "dissertation", "16",
         "the max-form sync term 2(m-1)S|w|/B makes 16-way DP over 10 Gbps look costly"),
        ("gnmt-a4x4-dissertation", "GNMT-8", "A 4x4", A_4X4, "dissertation", "straight",
         "the DP ignores replica all-reduces and shared NICs, and breaks ties arbitrarily"),
        ("gnmt16-b2x8-dissertation", "GNMT-16", "B 2x8", B_2X8, "dissertation", "straight",
         "as GNMT-8 on A 4x4; the published choice also reflects memory, which the DP does not check"),
    ]  # fmt: skip
    models = {"VGG-16": "vgg16", "ResNet-50": "resnet50", "GNMT-8": "gnmt", "GNMT-16": "gnmt_large"}
    rows = []
    for cid, label, cluster, levels, convention, published, reason in cases:
        config, ms = _plan_config(models[label], levels, convention)
        if published == "straight":
            same = all(part == "1" for part in config.split("-")) and config.count("-") > 0
        else:
            same = config == published
        text = f"{label}, {cluster}, {convention}: our plan {config} ({ms:.1f} ms/input predicted)"
        if reason:
            text += f"; differs because {reason} (docs/algorithms/pipedream.md)"
        rows.append(
            ClaimRow(
                f"choice-{cid}",
                text + " (ours: 1 = same as published)",
                "§2.5.2" if convention != "arxiv" else "§2.5.2; flat DP of [PipeDream-arXiv] §3.1",
                published if published != "16" else "16 (DP)",
                1.0 if same else 0.0,
                None if reason else (1.0, 1.0),
                "{:.0f}",
                why=reason
                or "the planner's choice differs from the published one on the shipped profile: the profile,"
                " the topology or the DP's cost terms changed (docs/algorithms/pipedream.md)",
            )
        )
    return rows


def ptdp_rows() -> list[ClaimRow]:
    """Claim 4: PTD-P's analytical model against Tables 4.1 and 4.2 and §4.3's takeaways ([Narayanan]
    ch. 4)."""
    rows = []
    for billions, hidden, layers in TABLE_4_1:
        rows.append(
            ClaimRow(
                f"ptdp-params-{billions:g}b",
                f"Eq. 4.3 parameters of the {billions:g}B model (h={hidden}, l={layers}), billions",
                "§4.5.1, Table 4.1",
                f"{billions:g}",
                ptdp.parameters(layers, hidden, VOCAB, SEQ) / 1e9,
                (billions - 0.05, billions + 0.05),  # printed to 0.1B
                "{:.3f}",
                why=(
                    "Eq. 4.3 reproduces Table 4.1's parameter counts to their printed rounding; a miss means "
                    "the formula's terms changed"
                ),
            )
        )
    # Table 4.2's training days for 300B tokens follow from Eq. 4.2's FLOPs per iteration, the
    # I = T/(B s) iterations of §4.5.1 and the achieved X; B cancels (F is linear in B).
    tokens = 300e9
    for scheme, billions, layers, hidden, gpus, tflops, days in TABLE_4_2:
        flops_per_token = ptdp.flops_per_iteration(1, SEQ, layers, hidden, VOCAB) / SEQ
        ours = tokens * flops_per_token / (gpus * tflops * 1e12) / 86400
        slack = 0.5 + days * 0.5 / tflops  # whole days, and X rounded to 1 TFLOP/s
        rows.append(
            ClaimRow(
                f"ptdp-days-{scheme.lower()}-{billions:g}b-{gpus}",
                f"Eq. 4.2 training days for 300B tokens, {scheme} {billions:g}B on {gpus} GPUs at "
                f"{tflops} TFLOP/s",
                "§4.5.2, Table 4.2",
                f"{days}",
                ours,
                (days - slack, days + slack),
                "{:.1f}",
                why=(
                    "Table 4.2's days follow from Eq. 4.2's FLOPs, the iteration count and the achieved "
                    "TFLOP/s; a miss means Eq. 4.2's terms changed"
                ),
            )
        )
    trillion = ptdp.parameters(128, 25600, VOCAB, SEQ)
    for cid, text, params, tokens_, gpus, tflops, days in (
        ("gpt3", "GPT-3 175B, 300B tokens, 1024 GPUs at 140 TFLOP/s", 175e9, 300e9, 1024, 140, 34),
        ("1t", "1T (Eq. 4.3 P), 450B tokens, 3072 GPUs at 163 TFLOP/s", trillion, 450e9, 3072, 163, 84),
    ):
        rows.append(
            ClaimRow(
                f"ptdp-eq4.4-{cid}",
                f"Eq. 4.4 (8TP/(nX)) training days, {text}",
                "§4.5.1",
                f"{days}",
                ptdp.training_days(params, tokens_, gpus, tflops * 1e12),
                (days - 0.5, days + 0.5),
                "{:.1f}",
                why=(
                    "Eq. 4.4's 8TP/(nX) estimate gives §4.5.1's days; a miss means the estimate's formula "
                    "changed"
                ),
            )
        )
    # Eq. 4.2's closed form equals the sum of its per-operation terms (§4.5.1's derivation).
    worst = 0.0
    for _, hidden, layers in TABLE_4_1:
        b, s, h, n, v = 1, SEQ, hidden, layers, VOCAB
        terms = 4 * n * (24 * b * s * h * h + 4 * b * s * s * h) + 6 * b * s * h * v
        worst = max(worst, abs(ptdp.flops_per_iteration(b, s, n, h, v) / terms - 1))
    rows.append(
        ClaimRow(
            "ptdp-eq4.2-terms",
            "Eq. 4.2 closed form = 4 x (24Bsh^2 + 4Bs^2h) per layer + 6BshV, Table 4.1 models "
            "(ours = largest relative gap)",
            "§4.5.1",
            "equal",
            worst,
            (0.0, EXACT),
            "{:.1e}",
            why=(
                "Eq. 4.2's closed form must equal the sum of its per-operation terms; a gap means the closed "
                "form changed"
            ),
        )
    )
    # Takeaway 1 (§4.3.2): at fixed n, B, b and d = 1, more tensor parallelism shrinks the bubble.
    bubbles = [ptdp.bubble_fraction_tensor(64, t, 1, 128, 1) for t in (1, 2, 4, 8)]
    shrinking = all(later < earlier for earlier, later in zip(bubbles, bubbles[1:], strict=False))
    rows.append(
        ClaimRow(
            "ptdp-takeaway1-bubble",
            "Takeaway 1: bubble (n/t-1)/m at n=64, B=128, b=1 for t=1,2,4,8: "
            + ", ".join(f"{x:.3f}" for x in bubbles)
            + " (ours: 1 = strictly shrinking)",
            "§4.3.2",
            "shrinks with t",
            1.0 if shrinking else 0.0,
            (1.0, 1.0),
            "{:.0f}",
            why=(
                "the pipeline bubble (n/t-1)/m must shrink as tensor parallelism grows; otherwise the bubble "
                "formula changed"
            ),
        )
    )
    # Takeaway 2 (§4.3.3): with t = 1 the bubble (n-d)/b' shrinks as d grows, so model parallelism
    # should be just large enough to fit and data parallelism used to scale.
    ratio = ptdp.bubble_fraction_tensor(64, 1, 4, 128, 1) / ptdp.bubble_fraction_tensor(64, 1, 2, 128, 1)
    rows.append(
        ClaimRow(
            "ptdp-takeaway2-bubble",
            "Takeaway 2: bubble (n-d)/b' at d=4 over d=2 (n=64, t=1, B=128, b=1)",
            "§4.3.3",
            "(64-4)/(64-2) < 1",
            ratio,
            _exact(60 / 62),
            "{:.4f}",
            why=(
                "the bubble (n-d)/b' at t = 1 must shrink with data parallelism as the formula says; "
                "otherwise the bubble formula changed"
            ),
        )
    )
    b, s, h = 1, SEQ, 12288
    rows.append(
        ClaimRow(
            "ptdp-comm-tensor-vs-pipeline",
            "Tensor-parallel bytes per layer over pipeline bytes per microbatch at t=8 (so tensor "
            "parallelism stays inside a server)",
            "§4.3.2",
            "8(t-1)/t = 7",
            ptdp.tensor_bytes_per_layer(b, s, h, 8) / ptdp.pipeline_bytes_per_microbatch(b, s, h),
            _exact(7.0),
            why=(
                "tensor-parallel bytes per layer are 8(t-1)/t of a microbatch's pipeline bytes (§4.3.2); "
                "otherwise a byte count changed"
            ),
        )
    )
    rows.append(
        ClaimRow(
            "ptdp-scatter-gather",
            "Scatter/gather: cross-node bytes per microbatch over plain send, t=8",
            "§4.4.1",
            "1/t = 0.125",
            ptdp.scatter_gather_bytes(b, s, h, 8) / ptdp.pipeline_bytes_per_microbatch(b, s, h),
            _exact(0.125),
            "{:.3f}",
            why=(
                "scatter/gather sends 1/t of a microbatch's bytes across nodes (§4.4.1); otherwise the byte "
                "count changed"
            ),
        )
    )
    return rows


def speed_rows(quick: bool) -> list[ClaimRow]:
    """Claim 5: our speed targets. Each is checked on the best CPU time of this process over
    repeated calls, since the wall time on a shared machine mostly measures the other jobs; the best
    wall time is printed beside it."""
    schedule, costs, devices, network = vgg16_1f1b_inputs(64)
    ops = sum(len(w.ops) for w in schedule.workers)
    name, full = largest_profile()
    every = planner_args(full)  # a scenario's default resolution: every layer
    shape, levels = largest_shape()
    timings: list[tuple[str, str, Callable[[], object], int, float]] = [
        ("sim-1f1b-8x64", f"8-stage, 64-microbatch 1F1B simulation (VGG-16, 2x4 devices, {ops} ops)",
         lambda: simulate(schedule, costs, devices, network), 3, SIM_TARGET_S),
        ("planner-2x8-full", f"Planner, {name} (all {full.num_layers} layers), hierarchical 2x8",
         lambda: plan_partition(*every, B_2X8), 1 if quick else 3, PLANNER_TARGET_S),
        ("planner-flat16-full", f"Planner, {name} (all {full.num_layers} layers), flat 16",
         lambda: plan_partition(*every, FLAT_16), 1 if quick else 3, PLANNER_TARGET_S),
    ]  # fmt: skip
    if not quick:
        timings.append(
            (
                "planner-largest-shape-full",
                f"Planner, {name} (all {full.num_layers} layers), the largest cluster shape of this set"
                f" ({shape})",
                lambda: plan_partition(*every, levels),
                1,
                PLANNER_TARGET_S,
            )
        )
    rows = []
    for cid, text, call, repeats, target in timings:
        wall, cpu = best_times(call, repeats)
        rows.append(
            ClaimRow(
                f"speed-{cid}",
                f"{text}: CPU seconds (wall {wall:.3f} s)",
                "speed target",
                f"<= {target:g} s",
                cpu,
                (0.0, target),
                "{:.3f}",
                why=(
                    "the simulator or the planner got slower than its target on this machine's CPU time (a "
                    "loaded or slower machine also moves it)"
                ),
            )
        )
    return rows


def simulate_spec(spec: Spec) -> dict[str, float]:
    """One speedup run's flat metrics (runs in a worker process)."""
    from clustertwin.analysis.pipedream_metrics import pipedream_metrics
    from clustertwin.scenarios.load import load_scenario
    from clustertwin.sim.pipedream import run

    return pipedream_metrics(run(load_scenario(spec.scenario, spec.overrides)))


def speedup_rows(quick: bool, out: Path, workers: int | None = None) -> list[ClaimRow]:
    """Claim 6: the papers' headline speedups in simulation (``scenarios/claims/pipedream/speedups.yaml``):
    ours is metric(baseline) / metric(treatment) of one scenario's two runs."""
    claim_set = load_claims(SPEEDUPS)
    plan = {claim.id: runs_of(claim, quick) for claim in claim_set.claims}
    specs = {spec.key: spec for arms in plan.values() for runs in arms.values() for spec in runs}
    done = run_specs("pipedream", out, specs, simulate_spec, workers)
    rows = []
    for claim in claim_set.claims:
        arms = plan[claim.id]
        per_seed = [
            done[b.key][claim.metric] / done[t.key][claim.metric]
            for b, t in zip(arms["baseline"], arms["treatment"], strict=True)
        ]
        rows.append(claim_row(claim, per_seed))
    return rows


def reproduce(quick: bool, out: Path, workers: int | None = None) -> int:
    """Compute every claim, print the table and save ``<out>/claims.json``; 0 when every gated claim
    holds, else 1."""
    started = time.perf_counter()
    rows = [
        *oracle_rows(quick),
        *brute_force_rows(quick),
        *choice_rows(),
        *ptdp_rows(),
        *speed_rows(quick),
        *speedup_rows(quick, out, workers),
    ]
    print(f"computed {len(rows)} claims in {time.perf_counter() - started:.1f} s")
    return report("pipedream", PAPER, quick, [SEED], out, rows)


if __name__ == "__main__":  # python -m clustertwin.reproduce_pipedream [--quick] [OUT]
    args = [a for a in sys.argv[1:] if a != "--quick"]
    quick = "--quick" in sys.argv[1:]
    sys.exit(reproduce(quick, Path(args[0]) if args else Path("runs/reproduce-pipedream")))
