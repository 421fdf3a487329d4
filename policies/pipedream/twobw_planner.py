"""PipeDream-2BW's planner ([Narayanan] §3.3, Algorithm 1, with the closed-form costs of §3.3.3).

For a model of ``num_blocks`` identical blocks (transformer layers) on ``N`` GPUs, sweep every
data-parallel size ``d`` and pipeline depth ``p = N/d`` (equi-replicated stages of ``num_blocks/p``
blocks, §3.2.3), every profiled microbatch size ``b``, with and without activation recomputation and
with and without pipelining; drop configurations whose MEMORY exceeds the device, keep the highest
THROUGHPUT. Costs:

- ``m(b, d) = B/(d·b)`` microbatches between weight updates (gradient accumulation);
- activations between stages: ``T^comm_{j→i} = 2|A_inp+out(b)|·𝟙(p>1) / bw_in-pipeline(p)``,
  summed over a stage's neighbours;
- weight gradients across the ``d`` replicas of a stage: a ring all-reduce of ``|W|/p`` bytes,
  ``2(d−1)/d·|W|/p / bw_cross-pipeline(d)``, once per ``m`` microbatches;
- with pipelining ``t = max_i max(c·T^comp_i + Σ_j T^comm_{j→i}, T^comm_i / m)``; without,
  ``t = Σ_i max(…)``; ``c = c_extra`` (4/3) with recomputation, else 1. Throughput is ``d·b/t``;
- memory per GPU (2BW, pipelined): ``2|W|/p + p·|A_total(b)|/p + p·|A_input(b)|`` without and
  ``2|W|/p + |A_total(b)|/p + p·|A_input(b)|`` with recomputation, plus gradients and optimizer state
  (``state_factor·|W|/p``, which the dissertation's formula omits). Without pipelining there is one
  weight version and one microbatch in flight (with recomputation: every block's input plus one
  block's activations).

The bandwidth functions are the dissertation's: ``bw_cross(d) = B_high`` if ``d`` < GPUs per server
else ``B_low``; stages of one pipeline sit on consecutive GPUs, so ``bw_in(p) = B_high`` if ``p`` ≤ GPUs
per server else ``B_low``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class BlockModel:
    """A model of identical blocks. ``block_time_s[b]``: forward + backward seconds of one block at
    per-GPU microbatch ``b`` (profiled, so non-linear in ``b`` is fine); bytes per sample below."""

    num_blocks: int
    block_time_s: Mapping[int, float]
    block_parameter_bytes: float
    block_activation_bytes: float  # all activations a block stashes, per sample (|A_total| / blocks)
    block_io_bytes: float  # a block's input (= output) activation, per sample (|A_input|)


@dataclass(frozen=True)
class Hardware:
    """``num_gpus`` GPUs in servers of ``gpus_per_server``; bandwidths in bytes/s."""

    num_gpus: int
    gpus_per_server: int
    memory_bytes: float
    bandwidth_high: float
    bandwidth_low: float


@dataclass(frozen=True)
class TwoBWPlan:
    """The chosen configuration and its predicted throughput (samples/s) and memory (bytes/GPU)."""

    data_parallel: int
    stages: int
    microbatch: int
    recompute: bool
    pipelined: bool
    accumulation: int  # m(b, d): microbatches per weight update
    throughput: float
    memory_bytes: float


def _bw_in(p: int, hw: Hardware) -> float:
    return hw.bandwidth_high if p <= hw.gpus_per_server else hw.bandwidth_low


def _bw_cross(d: int, hw: Hardware) -> float:
    return hw.bandwidth_high if d < hw.gpus_per_server else hw.bandwidth_low


def memory(model: BlockModel, p: int, b: int, recompute: bool, pipelined: bool, state_factor: float) -> float:
    """MEMORY(d, p, b, r) per GPU in bytes (see the module docstring)."""
    weights = model.num_blocks * model.block_parameter_bytes / p
    a_total = model.num_blocks * model.block_activation_bytes * b  # the whole model, one microbatch
    a_input = model.block_io_bytes * b
    if not pipelined or p == 1:
        # One microbatch in flight; recomputation keeps each block's input and rebuilds one block at a time.
        blocks = model.num_blocks / p
        acts = blocks * a_input + model.block_activation_bytes * b if recompute else a_total / p
        return weights * (1 + state_factor) + acts
    stashed = a_total / p if recompute else p * a_total / p
    return 2 * weights + weights * state_factor + stashed + p * a_input


def time_per_microbatch(
    model: BlockModel,
    hw: Hardware,
    d: int,
    p: int,
    b: int,
    batch: int,
    recompute: bool,
    pipelined: bool,
    c_extra: float = 4.0 / 3.0,
) -> float:
    """THROUGHPUT's ``t`` for one (d, p, b, r, pipelining) configuration (seconds per microbatch)."""
    m = batch / (d * b)
    comp = model.num_blocks / p * model.block_time_s[b] * (c_extra if recompute else 1.0)
    boundary = 2 * model.block_io_bytes * b / _bw_in(p, hw) if p > 1 else 0.0
    weights = model.num_blocks * model.block_parameter_bytes / p
    allreduce = 2 * (d - 1) / d * weights / _bw_cross(d, hw) if d > 1 else 0.0
    per_stage = []
    for i in range(p):
        neighbours = (i > 0) + (i < p - 1)
        per_stage.append(max(comp + neighbours * boundary, allreduce / m))
    return max(per_stage) if pipelined else sum(per_stage)


def plan_2bw(
    model: BlockModel, hw: Hardware, batch: int, state_factor: float = 3.0, c_extra: float = 4.0 / 3.0
) -> TwoBWPlan:
    """Algorithm 1: the fastest configuration that fits in memory; raises ``ValueError`` if none does.
    ``batch`` is the global batch B (the maximum safe batch size); ``state_factor`` bytes of gradients
    and optimizer state per weight byte (fp32 Adam: 1 + 2)."""
    best: TwoBWPlan | None = None
    for d in range(1, hw.num_gpus + 1):
        if hw.num_gpus % d:
            continue
        p = hw.num_gpus // d
        if model.num_blocks % p:
            continue  # equi-replicated stages hold whole blocks
        for b in sorted(model.block_time_s):
            m = batch / (d * b)
            if m < 1 or not float(m).is_integer():
                continue
            for pipelined in (False, True) if p > 1 else (False,):
                if pipelined and m < p:
                    continue  # 2BW needs at least p microbatches per update
                for recompute in (False, True):
                    mem = memory(model, p, b, recompute, pipelined, state_factor)
                    if mem > hw.memory_bytes:
                        continue
                    t = time_per_microbatch(model, hw, d, p, b, batch, recompute, pipelined, c_extra)
                    throughput = d * b / t
                    if best is None or throughput > best.throughput * (1 + 1e-12):
                        best = TwoBWPlan(d, p, b, recompute, pipelined, int(m), throughput, mem)
    if best is None:
        raise ValueError(
            f"no configuration of {hw.num_gpus} GPUs fits {model.num_blocks} blocks in"
            f" {hw.memory_bytes / 2**30:.1f} GiB per GPU at batch {batch}"
        )
    return best
