"""PTD-P formulas against the dissertation's published numbers ([Narayanan] ch. 4; Table 4.1 is the SC'21
paper's Table 1, absent from the seed text as it was an image) and its takeaways."""

from __future__ import annotations

import pytest
from clustertwin.policies.pipedream import ptdp

V, S = 51200, 2048

# (parameters in billions, attention heads, hidden, layers, t, p, GPUs, batch, TFLOP/s per GPU,
#  aggregate PFLOP/s), Table 4.1.
TABLE_4_1 = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137, 4.4),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 138, 8.8),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142, 18.2),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135, 34.6),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138, 70.8),
    (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140, 143.8),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148, 227.1),
    (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155, 297.4),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163, 410.2),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163, 502.0),
]


@pytest.mark.parametrize("row", TABLE_4_1, ids=[f"{r[0]}B" for r in TABLE_4_1])
def test_parameter_formula_reproduces_table_4_1(row):
    billions, _, h, layers, *_ = row
    assert ptdp.parameters(layers, h, V, S) / 1e9 == pytest.approx(billions, abs=0.051)


@pytest.mark.parametrize("row", TABLE_4_1, ids=[f"{r[0]}B" for r in TABLE_4_1])
def test_aggregate_throughput_is_gpus_times_per_gpu(row):
    *_, gpus, _, per_gpu, aggregate = row
    assert gpus * per_gpu / 1000 == pytest.approx(aggregate, rel=0.01)
    # And the per-GPU figure is the stated share of the A100's 312 TFLOP/s peak (44%..52%).
    assert 0.43 <= per_gpu / 312 <= 0.53


def test_training_time_estimates():
    # §4.5.1: GPT-3 175B on 300B tokens, 1024 GPUs at 140 TFLOP/s: ~34 days; 1T on 450B tokens,
    # 3072 GPUs at 163 TFLOP/s: ~84 days (P of Table 4.1, 1008B).
    assert ptdp.training_days(175e9, 300e9, 1024, 140e12) == pytest.approx(34, abs=0.5)
    assert ptdp.training_days(1008e9, 450e9, 3072, 163e12) == pytest.approx(84, abs=0.5)


def test_flops_formula_matches_its_terms():
    B, s, layers, h, v = 8, 2048, 4, 1024, 51200
    per_layer_forward = 24 * B * s * h * h + 4 * B * s * s * h
    expected = 4 * layers * per_layer_forward + 6 * B * s * h * v
    assert ptdp.flops_per_iteration(B, s, layers, h, v) == pytest.approx(expected)


def test_bubble_takeaways():
    # Interleaving divides the bubble by v; more microbatches shrink it.
    assert ptdp.bubble_fraction(8, 32, 2) == pytest.approx(ptdp.bubble_fraction(8, 32) / 2)
    assert ptdp.bubble_fraction(8, 64) < ptdp.bubble_fraction(8, 32)
    # Takeaway 1: at fixed n, B, b and d = 1, a larger tensor-parallel size shrinks the bubble.
    bubbles = [ptdp.bubble_fraction_tensor(64, t, 1, 128, 1) for t in (1, 2, 4, 8)]
    assert bubbles == sorted(bubbles, reverse=True)
    # Takeaway 2: at fixed model-parallel size, more data parallelism with fixed B has a bigger bubble
    # per pipeline ((n − d)/b′ grows with d when t = 1), so model parallelism should be just big enough.
    assert ptdp.bubble_fraction_tensor(64, 1, 4, 128, 1) < ptdp.bubble_fraction_tensor(64, 1, 2, 128, 1)


def test_communication_takeaways():
    b, s, h = 1, 2048, 12288
    # Tensor parallelism moves far more bytes per layer than a pipeline boundary does per microbatch,
    # so it belongs inside a server (NVLink) and pipelining across servers.
    assert ptdp.tensor_bytes_per_layer(b, s, h, 8) >= 7 * ptdp.pipeline_bytes_per_microbatch(b, s, h)
    assert ptdp.tensor_bytes_per_layer(b, s, h, 1) == 0
    # Scatter/gather cuts the cross-node traffic by t.
    assert ptdp.scatter_gather_bytes(b, s, h, 8) == ptdp.pipeline_bytes_per_microbatch(b, s, h) / 8
    # Eq. 4.1 is the (m + p − 1) law the simulator's oracles use.
    assert ptdp.batch_time(8, 4, 1.0, 2.0) == 33.0
