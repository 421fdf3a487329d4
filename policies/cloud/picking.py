"""Picking an instance by cost-normalised throughput ([Narayanan] ch. 6, §6.3.1 "Instance Type Choice",
Table 6.1, and §6.3.2 "End-to-End Cost Reduction", Fig. 6.5).

A single-GPU job runs on one GPU of an instance. Its cost per unit of work on an option is the option's
price per GPU-hour divided by the job's throughput on that GPU type: the chapter's "dollar-normalised
throughput", inverted. A multi-GPU instance is priced per GPU on the chapter's assumption that its other
GPUs run other jobs of the same kind (packing, §6.3.2 "Per-GPU Price for Multi-GPU Instances"). The pick is
the allowed option of least cost per work; ties go to the lower price per GPU, then to the option's key,
so the pick never depends on the order options are listed in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Option:
    """One instance on offer at one instant."""

    cloud: str
    region: str
    zone: str
    instance_type: str
    gpu_type: str
    gpus: int
    price: float  # USD per instance-hour now
    spot: bool  # spot / low-priority / preemptible, or on-demand

    @property
    def key(self) -> tuple[str, str, str, str, bool]:
        return (self.cloud, self.region, self.zone, self.instance_type, self.spot)

    @property
    def gpu_price(self) -> float:
        """USD per GPU-hour."""
        return self.price / self.gpus


@dataclass(frozen=True)
class Allowed:
    """Which options a strategy may use (None: any). The chapter's stacked strategies (Fig. 6.5) are
    successive widenings: spot, then any GPU type, then multi-GPU instances, then more clouds."""

    spot: bool | None = None  # True: spot only; False: on-demand only
    gpu_types: frozenset[str] | None = None
    max_gpus: int | None = None
    clouds: frozenset[str] | None = None

    def admits(self, option: Option) -> bool:
        return (
            (self.spot is None or option.spot == self.spot)
            and (self.gpu_types is None or option.gpu_type in self.gpu_types)
            and (self.max_gpus is None or option.gpus <= self.max_gpus)
            and (self.clouds is None or option.cloud in self.clouds)
        )


ANY = Allowed()


def cost_per_work(option: Option, throughput: Mapping[str, float]) -> float:
    """USD per unit of work (per iteration, say, when throughput is iterations/h) on one GPU of
    ``option``; infinite where the job cannot run on that GPU type."""
    rate = throughput.get(option.gpu_type, 0.0)
    return option.gpu_price / rate if rate > 0 else math.inf


def pick(
    options: Iterable[Option], throughput: Mapping[str, float], allowed: Allowed | None = None
) -> Option | None:
    """The allowed option of least cost per work, or None when no allowed option can run the job."""
    allowed = allowed or ANY
    best: tuple[float, float, tuple[str, str, str, str, bool]] | None = None
    chosen = None
    for option in options:
        if not allowed.admits(option):
            continue
        cost = cost_per_work(option, throughput)
        if math.isinf(cost):
            continue
        rank = (cost, option.gpu_price, option.key)
        if best is None or rank < best:
            best, chosen = rank, option
    return chosen
