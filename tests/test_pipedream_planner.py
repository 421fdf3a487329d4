"""The partitioning DP ([Narayanan] §2.4.1) against brute force, and its choices on the shipped profiles."""

from __future__ import annotations

import functools
import math
import time

import pytest
from clustertwin.policies.pipedream.brute_force import brute_force, compositions
from clustertwin.policies.pipedream.partition import Level, StagePlan, pipeline_time, plan_partition
from clustertwin.policies.pipedream.plan_memory import plan_memory_bytes, stage_memory
from clustertwin.sim.pipedream.runner import scenario_profile
from clustertwin.traces.pipedream_profile import BUNDLED_BATCH_SIZES, bundled_profile
from hypothesis import given, settings
from hypothesis import strategies as st

from clustertwin.bench_pipedream import REPRODUCE_SHAPES, planner_args
from tests.test_pipedream_scenario import scenario


@settings(max_examples=60, deadline=None)
@given(
    layers=st.lists(
        st.tuples(st.floats(0.01, 5.0), st.floats(0.0, 5.0), st.floats(0.0, 5.0)), min_size=1, max_size=5
    ),
    devices=st.integers(1, 4),
    bandwidth=st.floats(0.2, 10.0),
    convention=st.sampled_from(["dissertation", "arxiv", "code"]),
    straight=st.booleans(),
)
def test_flat_dp_equals_brute_force(layers, devices, bandwidth, convention, straight):
    compute = [c for c, _, _ in layers]
    params = [w for _, w, _ in layers]
    cuts = [a for _, _, a in layers]
    if straight and devices > len(layers):
        with pytest.raises(ValueError, match="straight"):
            plan_partition(compute, params, cuts, [Level(devices, bandwidth)], convention, straight)
        return
    plan = plan_partition(compute, params, cuts, [Level(devices, bandwidth)], convention, straight)
    expected = brute_force(compute, params, cuts, devices, bandwidth, convention, straight)
    assert plan.time_per_input == pytest.approx(expected, rel=1e-9)
    # The reported plan is a real plan with that cost, on exactly the given devices.
    assert plan.num_devices == devices
    assert pipeline_time(plan.stages, compute, params, cuts, bandwidth, convention) == pytest.approx(expected)


@settings(max_examples=30, deadline=None)
@given(
    layers=st.lists(st.tuples(st.floats(0.01, 5.0), st.floats(0.0, 5.0)), min_size=1, max_size=4),
    devices=st.integers(1, 4),
)
def test_a_level_of_single_devices_changes_nothing(layers, devices):
    # Level k components of one level-(k-1) component each: A^k(·, 1) = A^{k-1}, so a hierarchy
    # (1 device per server, n servers) must plan exactly like the flat DP over n devices.
    compute = [c for c, _ in layers]
    params = [w for _, w in layers]
    cuts = [0.5] * len(layers)
    flat = plan_partition(compute, params, cuts, [Level(devices, 2.0)])
    hier = plan_partition(compute, params, cuts, [Level(1, 50.0), Level(devices, 2.0)])
    assert hier.time_per_input == pytest.approx(flat.time_per_input)
    assert hier.num_devices == devices


def test_noam_and_config_string():
    plan = plan_partition([1.0, 1.0, 0.1], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [Level(4, 1.0)])
    assert plan.num_devices == 4
    assert plan.noam == -(-4 // plan.stages[0].replicas)
    assert plan.config == "-".join(str(s.replicas) for s in plan.stages)


# Per-GPU batch sizes of [Narayanan] §2.5.1 (VGG-16 64, ResNet-50 128, GNMT 64).
def args(model: str, batch: int):
    profile = bundled_profile(model).scaled(batch).coarsened(64)
    return profile.compute_s(), [lay.parameter_bytes for lay in profile.layers], list(profile.cut_bytes)


def test_vgg16_replicates_the_first_stage_15_1():
    # 16 workers over 10 Gbps (1.25 GB/s), the arXiv (parameter-server) convention: the convolutional
    # layers (small weights, much compute) are replicated 15 ways, the fully connected layers
    # (~500 MB of weights) get one worker. The dissertation's max-form on the 4x4 hierarchy gives
    # 12-3-1 (docs/algorithms/pipedream.md explains the difference).
    plan = plan_partition(*args("vgg16", 64), [Level(16, 1.25e9)], "arxiv")
    assert plan.config == "15-1"
    hier = plan_partition(*args("vgg16", 64), [Level(4, 10e9), Level(4, 1.25e9)])
    assert hier.stages[0].replicas >= 12 and hier.stages[-1].replicas == 1


@pytest.mark.parametrize(
    ("levels", "convention"),
    [
        ([Level(8, 30e9), Level(2, 3.125e9)], "dissertation"),  # 2x8 V100 with NVLink, 25 Gbps
        ([Level(4, 10e9), Level(4, 1.25e9)], "arxiv"),  # 4x4 V100 over PCIe, 10 Gbps
        ([Level(16, 1.25e9)], "arxiv"),
    ],
)
def test_resnet50_is_data_parallel(levels, convention):
    plan = plan_partition(*args("resnet50", 128), levels, convention)
    assert plan.is_data_parallel and plan.num_devices == 16


@pytest.mark.parametrize("convention", ["dissertation", "arxiv", "code"])
def test_gnmt_on_one_server_is_a_straight_pipeline(convention):
    # GNMT-8 on 1x4 (Cluster-A): the LSTM layers' large weights make replication cost more than a
    # straight pipeline's small activations.
    plan = plan_partition(*args("gnmt", 64), [Level(4, 10e9)], convention)
    assert plan.is_straight and len(plan.stages) == 4


def test_planner_is_fast_on_the_largest_shipped_profile():
    profile = bundled_profile("resnet101").scaled(64).coarsened(64)
    started = time.perf_counter()
    plan_partition(
        profile.compute_s(),
        [lay.parameter_bytes for lay in profile.layers],
        list(profile.cut_bytes),
        [Level(8, 30e9), Level(2, 3.125e9)],
    )
    assert time.perf_counter() - started < 10.0


def _recurrence(compute, params, cuts, levels, convention, straight, ratio=None):
    """The hierarchical recurrence of [Narayanan] §2.4.1 (with the reference optimizer's ``code`` terms)
    evaluated top-down with memoisation: an oracle independent of the DP's vectorised loop."""
    n = len(compute)

    def total(values, i, j):
        return sum(values[i : j + 1])

    def stage(c, w, m, bw, inner):
        if m == 1:
            return c
        if convention == "dissertation":
            return max(c, 2 * (m - 1) * w / bw) / m
        sync = 4 * (m - 1) * w / (m * bw)
        return max(c, sync) / m if convention == "arxiv" else (c + sync / inner) / m

    @functools.cache
    def best(k, i, j, m):
        count, bw = levels[k].count, levels[k].bandwidth
        inner = levels[k - 1].count if k > 0 else 1

        def below(a, b):
            return total(compute, a, b) if k == 0 else best(k - 1, a, b, levels[k - 1].count)

        out = math.inf
        if m == 1 or not straight:
            out = stage(below(i, j), total(params, i, j), m, bw, inner)
        for s in range(i, j):
            for mp in (1,) if straight else range(1, m):
                if mp >= m:
                    continue
                right = stage(below(s + 1, j), total(params, s + 1, j), mp, bw, 1)
                if ratio is not None:
                    right = max(right, 2 * cuts[s] / (bw * mp * ratio))
                    if j < n - 1:
                        right = max(right, 2 * cuts[j] / (bw * mp * ratio))
                comm = 0.0 if convention == "code" else 2 * cuts[s] / bw
                out = min(out, max(best(k, i, s, m - mp), comm, right))
        assert count >= m
        return out

    return best(len(levels) - 1, 0, n - 1, levels[-1].count)


@settings(max_examples=60, deadline=None)
@given(
    layers=st.lists(
        st.tuples(st.floats(0.01, 5.0), st.floats(0.0, 5.0), st.floats(0.0, 5.0)), min_size=1, max_size=6
    ),
    inner=st.integers(1, 3),
    outer=st.integers(1, 3),
    bandwidths=st.tuples(st.floats(0.5, 20.0), st.floats(0.2, 5.0)),
    convention=st.sampled_from(["dissertation", "arxiv", "code", "code-compressed"]),
    straight=st.booleans(),
)
def test_hierarchical_dp_equals_the_recurrence(layers, inner, outer, bandwidths, convention, straight):
    compute = [c for c, _, _ in layers]
    params = [w for _, w, _ in layers]
    cuts = [a for _, _, a in layers]
    levels = [Level(inner, bandwidths[0]), Level(outer, bandwidths[1])]
    ratio = 2.5 if convention == "code-compressed" else None
    conv = "code" if ratio else convention
    expected = _recurrence(compute, params, cuts, levels, conv, straight, ratio)
    if not math.isfinite(expected):
        with pytest.raises(ValueError, match="no plan"):
            plan_partition(compute, params, cuts, levels, conv, straight, activation_compression_ratio=ratio)
        return
    plan = plan_partition(compute, params, cuts, levels, conv, straight, activation_compression_ratio=ratio)
    assert plan.time_per_input == pytest.approx(expected, rel=1e-12)
    assert plan.num_devices == inner * outer
    assert [s.first for s in plan.stages][0] == 0 and plan.stages[-1].last == len(layers) - 1


def test_code_convention_divides_a_single_stage_sync_by_the_gpus_per_server():
    # Hand-computed: layers T = (8, 0.01), |w| = (1, 0.001), 2 GPUs per server at B = 10, 2 servers at
    # B = 1. Level 1: A(0→1, 2) = min((8.01 + 4·1·1.001/(2·10))/2, max(8, 0.01)) = 4.1051; A(0→0, 2) = 4.1.
    # Level 2, one stage on both servers: (4.1051 + 4·1·1.001/(2·1) / 2)/2 = 2.55305 (without dividing
    # by the 2 GPUs per server: 3.05355); the split across servers costs max(4.1, 0.0051) = 4.1.
    plan = plan_partition([8.0, 0.01], [1.0, 0.001], [0.0, 0.0], [Level(2, 10.0), Level(2, 1.0)], "code")
    assert plan.time_per_input == pytest.approx(2.55305, rel=1e-12)
    assert plan.is_data_parallel and plan.num_devices == 4
    # One level of 4 devices divides by nothing: (8.01 + 4·3·1.001/(4·1))/4 = 2.75325, or the split
    # 3-1 at max((8 + 4·2·1/(3·1))/3, 0.01) = 3.5556.
    flat = plan_partition([8.0, 0.01], [1.0, 0.001], [0.0, 0.0], [Level(4, 1.0)], "code")
    assert flat.time_per_input == pytest.approx((8.01 + 3.003) / 4, rel=1e-12)


def test_activation_compression_ratio_charges_a_split_stage_its_transfers():
    # T = (2, 2), |w| = (10, 10), a = (3, 1), 2 devices at B = 1. One replicated stage:
    # (4 + 4·1·20/(2·1))/2 = 22; the split 1-1: max(2, 2, input 2·3/(1·1·ratio)), no output term after
    # the model's last layer: 3 at ratio 2, 2 at ratio 6, and 2 without compression.
    args = ([2.0, 2.0], [10.0, 10.0], [3.0, 1.0], [Level(2, 1.0)], "code")
    assert plan_partition(*args, activation_compression_ratio=2.0).time_per_input == pytest.approx(3.0)
    assert plan_partition(*args, activation_compression_ratio=6.0).time_per_input == pytest.approx(2.0)
    assert plan_partition(*args).time_per_input == pytest.approx(2.0)
    # Three straight stages, a = (1, 4, 0.5), ratio 1: the middle stage pays its input 2·1 and its output
    # 2·4 = 8; the last stage its input 8.
    three = plan_partition(
        [2.0] * 3,
        [10.0] * 3,
        [1.0, 4.0, 0.5],
        [Level(3, 1.0)],
        "code",
        True,
        activation_compression_ratio=1.0,
    )
    assert three.time_per_input == pytest.approx(8.0)
    with pytest.raises(ValueError, match="convention 'code'"):
        plan_partition(*args[:4], "dissertation", activation_compression_ratio=2.0)


@settings(max_examples=25, deadline=None)
@given(
    layers=st.lists(
        st.tuples(st.floats(0.01, 5.0), st.floats(0.0, 5.0), st.floats(0.0, 5.0), st.floats(0.0, 5.0)),
        min_size=1,
        max_size=5,
    ),
    devices=st.integers(1, 4),
    capacity=st.floats(5.0, 60.0),
    schedule=st.sampled_from(["1f1b", "flush", "gpipe", "2bw"]),
)
def test_memory_aware_dp_is_the_best_plan_that_fits(layers, devices, capacity, schedule):
    compute = [c for c, _, _, _ in layers]
    params = [w for _, w, _, _ in layers]
    cuts = [a for _, _, a, _ in layers]
    acts = [x for _, _, _, x in layers]
    straight = schedule != "1f1b"
    memory = stage_memory(
        schedule, devices, microbatches=4, capacity_bytes=capacity, activation_bytes=acts, state_factor=1.0
    )
    best = math.inf
    for stages in range(1, min(len(layers), devices) + 1):
        for sizes in compositions(len(layers), stages):
            for reps in compositions(devices, stages):
                if straight and any(r != 1 for r in reps):
                    continue
                plan, first = [], 0
                for size, r in zip(sizes, reps, strict=True):
                    plan.append(StagePlan(first, first + size - 1, r))
                    first += size
                if max(plan_memory_bytes(plan, params, cuts, memory)) <= capacity:
                    best = min(best, pipeline_time(plan, compute, params, cuts, 1.0))
    level = [Level(devices, 1.0)]
    if not math.isfinite(best):
        with pytest.raises(ValueError, match="no plan"):
            plan_partition(compute, params, cuts, level, straight=straight, memory=memory)
        return
    plan = plan_partition(compute, params, cuts, level, straight=straight, memory=memory)
    assert plan.time_per_input == pytest.approx(best, rel=1e-9)
    assert max(plan_memory_bytes(plan.stages, params, cuts, memory)) <= capacity


# Every bundled profile on every cluster shape of `clustertwin reproduce pipedream`: a scenario's default
# coarsening (``model.max_blocks``) must not change the plan's time per stage by more than 1%.
@pytest.mark.parametrize("model", list(BUNDLED_BATCH_SIZES))
def test_default_coarsening_keeps_the_full_resolution_plan(model):
    full = bundled_profile(model).scaled(64)
    default = scenario_profile(scenario(**{"model.profile": model, "microbatch_size": 64}))
    if default.num_layers == full.num_layers:
        assert default.cut_bytes == full.cut_bytes  # the planner sees the full-resolution profile
        return
    for levels in REPRODUCE_SHAPES.values():
        ours = plan_partition(*planner_args(default), levels).time_per_input
        assert ours <= plan_partition(*planner_args(full), levels).time_per_input * 1.01


def test_only_planners_that_need_it_see_a_coarsened_profile():
    # A one-level DP costs N^2 per level and plans every layer whatever model.max_blocks says; the
    # hierarchical DP (a level below the top costs N^3) and manual stages (block indices) are coarsened.
    small = {"model.profile": "resnet101", "model.max_blocks": 32}
    assert scenario_profile(scenario(**small, **{"planner.mode": "straight"})).num_layers == 347
    assert scenario_profile(scenario(**small, schedule="flush")).num_layers == 347
    assert scenario_profile(scenario(**small)).num_layers == 32
