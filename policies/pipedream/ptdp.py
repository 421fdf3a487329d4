"""PTD-P's analytical model ([Narayanan] ch. 4): FLOPs, parameters, training time, bubbles, communication.

Notation (§4.3.1): ``p`` pipeline, ``t`` tensor, ``d`` data-parallel size, ``n = p·t·d`` GPUs, global
batch ``B``, microbatch ``b``, ``m = B/(b·d)`` microbatches per pipeline; a GPT model has ``l`` layers,
hidden size ``h``, sequence length ``s`` and vocabulary ``V``.
"""

from __future__ import annotations


def parameters(layers: int, hidden: int, vocab: int, seq_len: int) -> float:
    """Eq. 4.3: P = 12 l h² (1 + 13/(12h) + (V + s)/(12 l h))."""
    n, h = layers, hidden
    return 12 * n * h * h * (1 + 13 / (12 * h) + (vocab + seq_len) / (12 * n * h))


def flops_per_iteration(batch: int, seq_len: int, layers: int, hidden: int, vocab: int) -> float:
    """Eq. 4.2 (with activation recomputation): F = 96 B s l h² (1 + s/(6h) + V/(16 l h)).

    Per layer the forward pass is 24Bsh² + 4Bs²h (QKV 6Bsh², scores and attention over values 4Bs²h,
    output projection 2Bsh², MLP 16Bsh²); backward costs twice that and recomputation once more (×4),
    and the logit layer adds 6BshV."""
    B, s, n, h, V = batch, seq_len, layers, hidden, vocab
    return 96 * B * s * n * h * h * (1 + s / (6 * h) + V / (16 * n * h))


def training_days(params: float, tokens: float, gpus: int, flops_per_gpu: float) -> float:
    """§4.5.1: end-to-end training time ≈ 8 T P / (n X) seconds (T tokens, X FLOP/s per GPU)."""
    return 8 * tokens * params / (gpus * flops_per_gpu) / 86400.0


def bubble_fraction(pipeline: int, microbatches: int, chunks_per_device: int = 1) -> float:
    """§4.2.2: idle over ideal time, (p−1)/m for 1F1B/GPipe and (1/v)·(p−1)/m interleaved."""
    return (pipeline - 1) / (microbatches * chunks_per_device)


def bubble_fraction_tensor(gpus: int, tensor: int, data: int, batch: int, microbatch: int) -> float:
    """§4.3.2 with d = 1 generalised: p = n/(t·d) and m = B/(b·d), so the bubble is
    (n/(t·d) − 1) / (B/(b·d)); larger t (up to the server size) shrinks it (takeaway 1)."""
    p = gpus / (tensor * data)
    m = batch / (microbatch * data)
    return (p - 1) / m


def pipeline_bytes_per_microbatch(
    microbatch: int, seq_len: int, hidden: int, bytes_per_element: int = 2
) -> float:
    """§4.3.2: ``b·s·h`` elements cross each stage boundary per microbatch and direction."""
    return microbatch * seq_len * hidden * bytes_per_element


def tensor_bytes_per_layer(
    microbatch: int, seq_len: int, hidden: int, tensor: int, bytes_per_element: int = 2
) -> float:
    """§4.3.2: 4 all-reduces per layer per microbatch (2 forward, 2 backward), each moving
    2(t−1)/t · bsh elements per device: 8 b s h (t−1)/t elements in all."""
    return 8 * microbatch * seq_len * hidden * (tensor - 1) / tensor * bytes_per_element


def scatter_gather_bytes(
    microbatch: int, seq_len: int, hidden: int, tensor: int, bytes_per_element: int = 2
) -> float:
    """§4.4.1: with scatter/gather each of the t ranks sends bsh/t over its own inter-node link."""
    return pipeline_bytes_per_microbatch(microbatch, seq_len, hidden, bytes_per_element) / tensor


def batch_time(microbatches: int, pipeline: int, t_forward: float, t_backward: float) -> float:
    """Eq. 4.1: time per batch ≈ (b′/b + p − 1)·(t_f(b) + t_b(b)), with b′/b = m microbatches."""
    return (microbatches + pipeline - 1) * (t_forward + t_backward)
