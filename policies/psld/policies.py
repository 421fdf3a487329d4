"""The placement policies a PSLD scenario names (``policy:``): the registry ``PLACEMENT`` and its entries.

A placement policy answers what both executors ask of it: the initial layout (the model's tensors cut into
blocks, and each block's PS) and whether a scheduler later reassigns the blocks, and with which algorithm
(``PSLDScheduler``'s exploitation-exploration of Algorithms 1-3, or the proportional strawman of [PSLD]
§6). The adaptive policies start from PSLD's round-robin over ``block_bytes`` blocks (Fig. 8); the
frameworks' defaults (§2.2, §6) keep their own layout for the whole run.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
from clustertwin.policies.psld.baselines import (
    byteps_layout,
    mxnet_layout,
    round_robin_owners,
    tensorflow_layout,
)
from clustertwin.policies.psld.blocks import Block, Tensor, split_blocks
from clustertwin.policies.registry import Registry

Layout = tuple[tuple[Block, ...], list[int]]


class Placement(ABC):
    """One placement policy: its initial layout, and how (if at all) its blocks are reassigned.

    ``reassign`` names the scheduler's algorithm (``SchedulerConfig.policy``: ``psld`` or ``strawman``),
    or is None for a layout that is never changed; ``explore`` is False to run PSLD with epsilon = 0.
    """

    reassign: ClassVar[str | None] = None
    explore: ClassVar[bool] = True

    @property
    def adaptive(self) -> bool:
        """Whether a scheduler reassigns blocks (and so whether removals and scale-out can happen)."""
        return self.reassign is not None

    @abstractmethod
    def layout(
        self,
        tensors: Sequence[Tensor],
        servers: Sequence[int],
        block_bytes: int,
        rng: np.random.Generator,
        small: str,
    ) -> Layout:
        """Blocks of ``tensors`` (at most ``block_bytes`` where the policy splits) and their PSs.

        ``small`` is how a tensor below ``block_bytes`` is placed where the policy draws one PS for it
        (MXNet: ``random`` or ``hash``); ``rng`` is the layout's own random stream.
        """


PLACEMENT: Registry[type[Placement]] = Registry(
    "psld placement",
    "PSLD's placement policies (policy of kind psld)",
    builtin="clustertwin.policies.psld.policies",
    noun="policy",
)
register = PLACEMENT.register


def placement(name: str) -> Placement:
    """The registered placement policy ``name`` (an unknown name lists the known ones)."""
    return PLACEMENT.get(name)()


class _RoundRobin(Placement):
    """PSLD's initial assignment (Fig. 8): ``block_bytes`` blocks, round-robin over the PSs."""

    def layout(
        self,
        tensors: Sequence[Tensor],
        servers: Sequence[int],
        block_bytes: int,
        rng: np.random.Generator,
        small: str,
    ) -> Layout:
        blocks = split_blocks(tensors, block_bytes)
        return blocks, round_robin_owners(len(blocks), servers)


@register("psld")
class PSLD(_RoundRobin):
    """PSLD: exploitation-exploration reassignment and elastic scaling (Algorithms 1-3)."""

    reassign = "psld"


@register("psld_noexplore")
class PSLDNoExplore(_RoundRobin):
    """PSLD without exploration (epsilon = 0), the ablation of Fig. 18."""

    reassign = "psld"
    explore = False


@register("strawman")
class Strawman(_RoundRobin):
    """Bytes proportional to each PS's profiled speed, reassigned like PSLD's (§6)."""

    reassign = "strawman"


@register("mxnet")
class MXNet(Placement):
    """MXNet's default KVStore layout, never reassigned (§2.2)."""

    def layout(
        self,
        tensors: Sequence[Tensor],
        servers: Sequence[int],
        block_bytes: int,
        rng: np.random.Generator,
        small: str,
    ) -> Layout:
        return mxnet_layout(tensors, servers, block_bytes, rng, small)


@register("tensorflow")
class TensorFlow(Placement):
    """TensorFlow's round-robin over whole variables, never reassigned (Table 1)."""

    def layout(
        self,
        tensors: Sequence[Tensor],
        servers: Sequence[int],
        block_bytes: int,
        rng: np.random.Generator,
        small: str,
    ) -> Layout:
        return tensorflow_layout(tensors, servers)


@register("byteps")
class BytePS(Placement):
    """BytePS's hashed ~4 MB partitions, never reassigned."""

    def layout(
        self,
        tensors: Sequence[Tensor],
        servers: Sequence[int],
        block_bytes: int,
        rng: np.random.Generator,
        small: str,
    ) -> Layout:
        return byteps_layout(tensors, servers, block_bytes)
