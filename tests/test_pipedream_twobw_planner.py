"""PipeDream-2BW's planner ([Narayanan] Algorithm 1): it returns the best feasible configuration of its
own cost model, respects memory, and follows the chapter's qualitative takeaways."""

from __future__ import annotations

import itertools

import pytest
from clustertwin.policies.pipedream.twobw_planner import (
    BlockModel,
    Hardware,
    memory,
    plan_2bw,
    time_per_microbatch,
)

GIB = 2.0**30

# A BERT-large-like block in fp16 (roughly): 12.6M parameters (2 bytes each), and per sample of 512 tokens
# ~30 MB of stashed activations and a 1 MB block input. Times grow sub-linearly in the microbatch.
BLOCK = dict(
    block_time_s={1: 0.004, 2: 0.007, 4: 0.013, 8: 0.025},
    block_parameter_bytes=25e6,
    block_activation_bytes=30e6,
    block_io_bytes=1e6,
)
SERVERS_8x8 = Hardware(
    num_gpus=64, gpus_per_server=8, memory_bytes=16 * GIB, bandwidth_high=100e9, bandwidth_low=3e9
)


def brute_force(model, hw, batch, state_factor=3.0):
    best = 0.0
    for d, b, rec, pipe in itertools.product(range(1, hw.num_gpus + 1), model.block_time_s, (0, 1), (0, 1)):
        p = hw.num_gpus // d
        if hw.num_gpus % d or model.num_blocks % p or (pipe and p == 1):
            continue
        m = batch / (d * b)
        if m < 1 or not m.is_integer() or (pipe and m < p):
            continue
        if memory(model, p, b, bool(rec), bool(pipe), state_factor) > hw.memory_bytes:
            continue
        best = max(best, d * b / time_per_microbatch(model, hw, d, p, b, batch, bool(rec), bool(pipe)))
    return best


@pytest.mark.parametrize("blocks", [24, 48, 96])
@pytest.mark.parametrize("batch", [256, 1024])
def test_planner_finds_the_best_feasible_configuration(blocks, batch):
    model = BlockModel(blocks, **BLOCK)
    plan = plan_2bw(model, SERVERS_8x8, batch)
    assert plan.memory_bytes <= SERVERS_8x8.memory_bytes
    assert plan.throughput == pytest.approx(brute_force(model, SERVERS_8x8, batch))
    assert plan.data_parallel * plan.stages == 64
    assert plan.accumulation * plan.data_parallel * plan.microbatch == batch


def test_small_model_on_fast_network_is_data_parallel():
    hw = Hardware(8, 8, 32 * GIB, 300e9, 300e9)
    plan = plan_2bw(BlockModel(4, **BLOCK), hw, 256)
    assert plan.stages == 1 and plan.data_parallel == 8


def test_bigger_models_need_deeper_pipelines_and_slow_links_favour_pipelining():
    # Takeaway: model parallelism just large enough to fit, data parallelism for the rest.
    depths = [plan_2bw(BlockModel(n, **BLOCK), SERVERS_8x8, 512).stages for n in (8, 64, 256)]
    assert depths == sorted(depths) and depths[0] < depths[-1]
    fast = Hardware(64, 8, 16 * GIB, 100e9, 100e9)
    slow = Hardware(64, 8, 16 * GIB, 100e9, 0.5e9)
    model = BlockModel(64, **BLOCK)
    assert plan_2bw(model, slow, 512).stages >= plan_2bw(model, fast, 512).stages


def test_no_configuration_fits():
    with pytest.raises(ValueError, match="no configuration"):
        plan_2bw(BlockModel(64, **BLOCK), Hardware(2, 2, 0.5 * GIB, 1e9, 1e9), 64)
