"""The assignments PSLD is compared with ([PSLD], §2.2, §6 and the notes' §6).

* MXNet default ("Baseline"): a tensor larger than 4 MB is split evenly over *all* PSs (footnote 2); a
  smaller tensor goes to a PS chosen at random, counted by tensor, not by bytes (the paper's words), or,
  with ``small="hash"``, to PS (key x 9973) mod |PS| with key = the tensor's index: MXNet's own KVStore
  rule for small arrays, whose period explains Table 2's skew at 3 and 6 PSs.
* TensorFlow: round-robin over variables, whole tensors, counted by variable (Table 1).
* BytePS: tensors cut into ~4 MB partitions whose keys are spread over PSs by a hash (not described in the
  paper; BytePS's own behaviour). The key of partition i of the tensor declared k-th is (k << 16) + i, and
  BytePS's default server choice (``BYTEPS_KEY_HASH_FN=djb2``; bytedance/byteps,
  ``byteps/common/global.cc``) is Bernstein's djb2 hash of the key's decimal digits, modulo |PS|.
* Strawman (the paper's own): each PS gets a share of the bytes proportional to its profiled speed.
* Round-robin over blocks: PSLD's initial assignment (Fig. 8).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from clustertwin.policies.psld.blocks import Block, Tensor, split_blocks, split_even


def mxnet_layout(
    tensors: Sequence[Tensor],
    servers: Sequence[int],
    threshold_bytes: int,
    rng: np.random.Generator,
    small: str = "random",
) -> tuple[tuple[Block, ...], list[int]]:
    """Blocks and owners of MXNet's default KVStore placement (``small``: random | hash)."""
    blocks = split_even(tensors, threshold_bytes, len(servers))
    owners: list[int] = []
    slice_index: dict[int, int] = {}
    for b in blocks:
        if tensors[b.tensor].nbytes > threshold_bytes and len(servers) > 1:
            k = slice_index.get(b.tensor, 0)
            slice_index[b.tensor] = k + 1
            owners.append(servers[k])
        elif small == "hash":
            owners.append(servers[(b.tensor * 9973) % len(servers)])
        else:
            owners.append(servers[int(rng.integers(len(servers)))])
    return blocks, owners


def tensorflow_layout(
    tensors: Sequence[Tensor], servers: Sequence[int]
) -> tuple[tuple[Block, ...], list[int]]:
    """Whole tensors, variable i on PS i mod |PS| (TensorFlow's round-robin device function)."""
    blocks = tuple(Block(i, i, 0, t.nbytes) for i, t in enumerate(tensors))
    return blocks, [servers[i % len(servers)] for i in range(len(tensors))]


def key_hash(key: int) -> int:
    """djb2 over the decimal digits of ``key`` (h = 33 h + c from 5381, in unsigned 64-bit arithmetic), as
    BytePS hashes a partition key. A multiplicative hash taken modulo a power of two would keep only the
    key's low bits, i.e. the partition index, and put every one-partition tensor on one PS."""
    h = 5381
    for c in str(key).encode():
        h = (h * 33 + c) & 0xFFFFFFFFFFFFFFFF
    return h


def byteps_layout(
    tensors: Sequence[Tensor], servers: Sequence[int], block_bytes: int
) -> tuple[tuple[Block, ...], list[int]]:
    """~4 MB partitions, partition key (tensor << 16) + part hashed onto the PSs by :func:`key_hash`."""
    blocks = split_blocks(tensors, block_bytes)
    owners = []
    for b in blocks:
        key = (b.tensor << 16) + b.offset // block_bytes
        owners.append(servers[key_hash(key) % len(servers)])
    return blocks, owners


def round_robin_owners(n_blocks: int, servers: Sequence[int]) -> list[int]:
    """PSLD's initial assignment: blocks round-robin over the PSs."""
    return [servers[i % len(servers)] for i in range(n_blocks)]


def strawman_owners(sizes: Sequence[float], servers: Sequence[int], speeds: Mapping[int, float]) -> list[int]:
    """Bytes proportional to speed: blocks in descending size, each to the PS furthest below its target.

    A server missing from ``speeds`` gets the mean speed of the others.
    """
    known = [speeds[r] for r in servers if r in speeds and np.isfinite(speeds[r])]
    fallback = float(np.mean(known)) if known else 1.0
    weight = {r: (speeds[r] if r in speeds and np.isfinite(speeds[r]) else fallback) for r in servers}
    total_w = sum(weight.values())
    total = float(sum(sizes))
    target = {r: total * weight[r] / total_w for r in servers}
    load = dict.fromkeys(servers, 0.0)
    owners = [-1] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        r = max(servers, key=lambda r: (target[r] - load[r], -servers.index(r)))
        owners[i] = r
        load[r] += sizes[i]
    return owners
