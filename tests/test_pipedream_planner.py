"""The partitioning DP ([Narayanan] §2.4.1) against brute force, and its choices on the shipped profiles."""

from __future__ import annotations

import time

import pytest
from clustertwin.policies.pipedream.brute_force import brute_force
from clustertwin.policies.pipedream.partition import Level, pipeline_time, plan_partition
from clustertwin.traces.pipedream_profile import bundled_profile
from hypothesis import given, settings
from hypothesis import strategies as st


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
