"""The straggler patterns a FlexRR scenario names (``stragglers.model``; [Harlap] §3.4.1): registry
``STRAGGLERS``.

A model turns the scenario's straggler knobs into one speed profile per worker (``stragglers``) and says how
many items each worker owns (all equal but for the Uneven pattern of §3.4.4). Randomness comes from
``rng(*key)``, a Generator per key that depends on the scenario's seed alone, so that every mode of a paired
comparison sees the same stragglers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from clustertwin.policies.flexrr import stragglers as st
from clustertwin.policies.flexrr.groups import machine_of
from clustertwin.policies.registry import Registry

Streams = Callable[..., np.random.Generator]


@dataclass(frozen=True)
class StragglerParams:
    """The knobs of the scenario's ``stragglers`` section that the models read.

    ``probability`` None means the model's own default; ``series`` loads the measured per-worker factor
    series (a trace), called only by a model that replays one.
    """

    delay: float = 0.0
    probability: float | None = None
    points_per_iteration: int = 10
    max_duration: float = 2.0
    period_s: float = 20.0
    alpha: float = 11.0
    heavy_share: float = 0.75
    heavy_machines: str = "first_half"  # first_half | alternate
    series: Callable[[], list[list[float]]] | None = None


class StragglerModel(ABC):
    """One straggler pattern: per-worker speed profiles and the items each worker owns."""

    default_probability: ClassVar[float] = 0.01  # the paper's probability, where the model draws one
    even_machines: ClassVar[bool] = False  # whether the pattern needs an even number of machines
    replays_trace: ClassVar[bool] = False  # whether ``stragglers.trace_file`` is read

    def probability(self, p: StragglerParams) -> float:
        """The probability in effect: the scenario's, or the paper's for this model."""
        return self.default_probability if p.probability is None else p.probability

    @abstractmethod
    def profiles(
        self, p: StragglerParams, times: Sequence[float], machines: int, rng: Streams
    ) -> list[st.SpeedProfile]:
        """One profile per worker; ``times[w]`` is worker ``w``'s undelayed iteration time."""

    def items(self, p: StragglerParams, per_worker: int, workers: int, machines: int) -> list[int]:
        """Items each worker owns: ``per_worker`` each."""
        return [per_worker] * workers


STRAGGLERS: Registry[type[StragglerModel]] = Registry(
    "flexrr stragglers",
    "FlexRR's straggler patterns (stragglers.model of kind flexrr)",
    builtin="clustertwin.policies.flexrr.straggler_models",
    noun="straggler model",
)
register = STRAGGLERS.register


def straggler_model(name: str) -> StragglerModel:
    """The registered straggler model ``name`` (an unknown name lists the known ones)."""
    return STRAGGLERS.get(name)()


def _nominal(times: Sequence[float]) -> list[st.SpeedProfile]:
    return [st.nominal(t) for t in times]


@register("none")
class NoStragglers(StragglerModel):
    """No stragglers: every worker at its undelayed speed."""

    def profiles(
        self, p: StragglerParams, times: Sequence[float], machines: int, rng: Streams
    ) -> list[st.SpeedProfile]:
        return _nominal(times)


@register("slow_worker")
class SlowWorker(StragglerModel):
    """Slow Worker: each worker is slowed by (1 + delay) for random stretches of its own work."""

    def profiles(
        self, p: StragglerParams, times: Sequence[float], machines: int, rng: Streams
    ) -> list[st.SpeedProfile]:
        if p.delay == 0:
            return _nominal(times)
        return [
            st.slow_worker(
                rng(w),
                t,
                p.delay,
                probability=self.probability(p),
                points_per_iteration=p.points_per_iteration,
                max_duration=p.max_duration,
            )
            for w, t in enumerate(times)
        ]


@register("disrupted_machine")
class DisruptedMachine(StragglerModel):
    """Disrupted Machine: a disruptor takes a machine's cores for a period, slowing all its workers."""

    default_probability = 0.2

    def profiles(
        self, p: StragglerParams, times: Sequence[float], machines: int, rng: Streams
    ) -> list[st.SpeedProfile]:
        if p.delay == 0:
            return _nominal(times)
        # one disruptor per machine; its workers share the profile (so they share one iteration time:
        # that of the machine's first worker)
        per_machine = [
            st.disrupted_machine(
                rng(m), times[m], p.delay, period_s=p.period_s, probability=self.probability(p)
            )
            for m in range(machines)
        ]
        return [per_machine[machine_of(w, machines)] for w in range(len(times))]


@register("power_law")
class PowerLaw(StragglerModel):
    """Power-Law: every iteration's length drawn from a Pareto tail of exponent alpha."""

    def profiles(
        self, p: StragglerParams, times: Sequence[float], machines: int, rng: Streams
    ) -> list[st.SpeedProfile]:
        return [st.power_law(rng(w), t, p.alpha) for w, t in enumerate(times)]


@register("uneven")
class Uneven(StragglerModel):
    """Uneven work (§3.4.4): half of the machines hold heavy_share of the items, no slowdown."""

    even_machines = True

    def profiles(
        self, p: StragglerParams, times: Sequence[float], machines: int, rng: Streams
    ) -> list[st.SpeedProfile]:
        return _nominal(times)

    def items(self, p: StragglerParams, per_worker: int, workers: int, machines: int) -> list[int]:
        """The heavy half of the machines (the first half, or the even ones) holds ``heavy_share`` of
        all items, the rest the remainder (the paper does not say which half)."""
        share = p.heavy_share
        heavy, light = round(2 * share * per_worker), max(1, round(2 * (1 - share) * per_worker))

        def is_heavy(machine: int) -> bool:
            if p.heavy_machines == "alternate":
                return machine % 2 == 0
            return machine < machines // 2

        return [heavy if is_heavy(machine_of(w, machines)) else light for w in range(workers)]


@register("trace")
class Trace(StragglerModel):
    """Measured per-worker minibatch times (a trace), cycled over the workers."""

    replays_trace = True

    def profiles(
        self, p: StragglerParams, times: Sequence[float], machines: int, rng: Streams
    ) -> list[st.SpeedProfile]:
        if p.series is None:
            raise ValueError("the trace straggler model needs the trace's series")
        series = p.series()
        offsets = rng(0).integers(0, 10**6, len(times))
        # worker w replays trace worker w mod len(series) from a random start, so co-replaying workers
        # are not in lockstep
        return [
            st.trace_driven(t, series[w % len(series)], int(offsets[w]) % len(series[w % len(series)]))
            for w, t in enumerate(times)
        ]
