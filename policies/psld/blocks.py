"""Parameter tensors and the blocks they are cut into ([PSLD], §4 and footnote 2).

PSLD assigns *blocks*, not tensors: every learnable tensor larger than the partition size (4 MB by
default, the best value of Fig. 19c) is cut into consecutive blocks of at most that size; a smaller
tensor is one block. Blocks keep the tensor they came from and their byte offset, so an executor can map
a block back onto a slice of a real tensor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

MB = 1024 * 1024
DEFAULT_BLOCK_BYTES = 4 * MB


@dataclass(frozen=True)
class Tensor:
    """One learnable weight tensor (a framework "variable"), in bytes, with the layer that owns it.

    ``layer`` orders tensors along the network (0 = closest to the input); executors use it for
    layer-wise gradient readiness in the backward pass.
    """

    name: str
    nbytes: int
    layer: int = 0


@dataclass(frozen=True)
class Block:
    """A contiguous byte range ``[offset, offset + nbytes)`` of tensor ``tensor`` (an index)."""

    id: int
    tensor: int
    offset: int
    nbytes: int


def split_blocks(tensors: Sequence[Tensor], block_bytes: int) -> tuple[Block, ...]:
    """Cut every tensor into blocks of at most ``block_bytes`` (the last block of a tensor is the rest)."""
    if block_bytes <= 0:
        raise ValueError(f"block size must be positive, got {block_bytes}")
    out: list[Block] = []
    for t_index, tensor in enumerate(tensors):
        pieces = max(1, math.ceil(tensor.nbytes / block_bytes))
        for k in range(pieces):
            offset = k * block_bytes
            out.append(Block(len(out), t_index, offset, min(block_bytes, tensor.nbytes - offset)))
    return tuple(out)


def split_even(tensors: Sequence[Tensor], threshold_bytes: int, parts: int) -> tuple[Block, ...]:
    """MXNet's partition (footnote 2): a tensor larger than ``threshold_bytes`` is cut into ``parts``
    near-equal slices (one per PS); a smaller tensor stays whole."""
    out: list[Block] = []
    for t_index, tensor in enumerate(tensors):
        if tensor.nbytes > threshold_bytes and parts > 1:
            base, extra = divmod(tensor.nbytes, parts)
            offset = 0
            for k in range(parts):
                size = base + (1 if k < extra else 0)
                out.append(Block(len(out), t_index, offset, size))
                offset += size
        else:
            out.append(Block(len(out), t_index, 0, tensor.nbytes))
    return tuple(out)
