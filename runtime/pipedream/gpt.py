"""A GPT-style workload for the pipeline runtimes and the profiler.

Token embedding plus learned positions, ``layers`` pre-LN transformer blocks (causal
``F.scaled_dot_product_attention``, MLP 4x with GELU) and a final LayerNorm with an LM head, trained
with cross-entropy on synthetic next-token data. This is the model family of [Narayanan] ch. 3-4 (GPT
with 2BW/Flush, PTD-P), at a size one H100 pair or quad trains a step of in well under a second.

Determinism: every layer is built right after ``torch.manual_seed(seed, layer index)``, so a layer's
weights do not depend on how the model is cut into chunks nor on which rank builds it; chunk ``i`` of
``n`` holds ``layers / n`` blocks, plus the embedding (first chunk) and the head (last chunk).

Precision: with ``amp`` (the GPU default) every layer runs its forward under
``torch.autocast(bfloat16)``: weights, the residual stream (and so every chunk boundary) and the
optimizer stay fp32, matmuls and attention run in bf16. Putting autocast inside the layers means the
profiler, our runtime and ``torch.distributed.pipelining`` all run exactly the same numerics. Without
``amp`` everything runs in ``dtype`` (float64 in the numerics tests).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class GPTConfig:
    """Model and microbatch sizes. ``GPU`` and ``TINY`` below are the two presets used."""

    vocab: int = 8192
    hidden: int = 2048
    heads: int = 16
    layers: int = 16
    seq: int = 1024
    microbatch: int = 4
    amp: bool = True  # bf16 autocast in every layer (CUDA); fp32 weights and boundaries
    dtype: torch.dtype = field(default=torch.float32)

    def __post_init__(self) -> None:
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")

    def parameters(self) -> int:
        """Parameter count (embedding, positions, blocks, head)."""
        h = self.hidden
        block = 12 * h * h + 13 * h  # qkv, proj, fc1, fc2 weights+biases, two LayerNorms
        return self.vocab * h + self.seq * h + self.layers * block + 2 * h + self.vocab * h


GPU = GPTConfig()  # ~0.84B parameters; ~2.2e13 FLOP per microbatch (forward + backward)
TINY = GPTConfig(vocab=64, hidden=32, heads=2, layers=8, seq=16, microbatch=2, amp=False)


class _AmpLayer(nn.Module):
    """Runs ``_forward`` under bf16 autocast when the config asks for it (see the module docstring)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.amp = config.amp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=self.amp):
            return self._forward(x)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError


class Embedding(nn.Module):
    """Token embedding plus learned positions; input int64 tokens (b, s), output (b, s, h)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.tokens = nn.Embedding(config.vocab, config.hidden)
        self.positions = nn.Parameter(torch.empty(config.seq, config.hidden))
        nn.init.normal_(self.tokens.weight, std=0.02)
        nn.init.normal_(self.positions, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.tokens(tokens) + self.positions[: tokens.shape[1]]


class Block(_AmpLayer):
    """Pre-LN transformer block: x + attn(LN(x)), then x + MLP(LN(x)), causal self-attention."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__(config)
        h = config.hidden
        self.heads = config.heads
        self.ln1 = nn.LayerNorm(h)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h)
        self.fc1 = nn.Linear(h, 4 * h)
        self.fc2 = nn.Linear(4 * h, h)
        # GPT-2's initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2 layers).
        for lin in (self.qkv, self.proj, self.fc1, self.fc2):
            std = 0.02 / math.sqrt(2 * config.layers) if lin in (self.proj, self.fc2) else 0.02
            nn.init.normal_(lin.weight, std=std)
            nn.init.zeros_(lin.bias)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, s, h))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Head(_AmpLayer):
    """Final LayerNorm and the LM head (logits over the vocabulary; bf16 under autocast)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__(config)
        self.ln = nn.LayerNorm(config.hidden)
        self.out = nn.Linear(config.hidden, config.vocab, bias=False)
        nn.init.normal_(self.out.weight, std=0.02)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.ln(x))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy, in fp32 whatever the logits' dtype."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def build_layer(config: GPTConfig, seed: int, index: int, device: torch.device | str) -> nn.Module:
    """Layer ``index`` of the chain: 0 the embedding, 1..layers the blocks, layers+1 the head."""
    if not 0 <= index <= config.layers + 1:
        raise IndexError(f"layer {index} out of 0..{config.layers + 1}")
    torch.manual_seed(seed * 100_003 + index)  # per-layer seed: weights independent of the chunking
    with torch.device(device):
        if index == 0:
            layer: nn.Module = Embedding(config)
        elif index == config.layers + 1:
            layer = Head(config)
        else:
            layer = Block(config)
    return layer.to(config.dtype)


def chunk_layers(config: GPTConfig, chunks: int, index: int) -> range:
    """Indices (as in ``build_layer``) of the layers of chunk ``index`` of ``chunks``."""
    if chunks < 1 or config.layers % chunks:
        raise ValueError(f"{config.layers} blocks cannot be cut into {chunks} equal chunks")
    per = config.layers // chunks
    first = 0 if index == 0 else 1 + index * per
    last = config.layers + 1 if index == chunks - 1 else (index + 1) * per
    return range(first, last + 1)


def gpt_sequential(config: GPTConfig, seed: int, device: torch.device | str = "cpu") -> nn.Sequential:
    """The whole model as an ``nn.Sequential`` of layers, for ``runtime.pipedream.profiler``."""
    return nn.Sequential(*(build_layer(config, seed, i, device) for i in range(config.layers + 2)))


@dataclass(frozen=True)
class GPTWorkload:
    """``GPTConfig`` as a ``runtime.pipedream.workload.Workload``: synthetic uniform tokens, targets
    are the inputs shifted by one position."""

    config: GPTConfig
    seed: int = 0

    def chunk(self, index: int, chunks: int, device: torch.device) -> nn.Module:
        return nn.Sequential(
            *(
                build_layer(self.config, self.seed, i, device)
                for i in chunk_layers(self.config, chunks, index)
            )
        )

    def microbatch(self, k: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + k + 1)
        tokens = torch.randint(c.vocab, (c.microbatch, c.seq + 1), generator=g)
        return tokens[:, :-1].contiguous().to(device), tokens[:, 1:].contiguous().to(device)

    def boundary(self, chunks: int) -> tuple[tuple[int, ...], torch.dtype]:
        # The residual stream stays in the weights' dtype under autocast (fp32 + bf16 -> fp32).
        c = self.config
        return (c.microbatch, c.seq, c.hidden), c.dtype

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return lm_loss(output, target)
