"""Straggler models of [Harlap] §3.4.1 as pure, seeded speed profiles, shared by simulator and runtime.

A profile answers two questions for one worker, in closed form: how long does ``work`` take when
started at time ``t0`` with ``w0`` work already done by this worker (``elapsed``), and how much work gets
done in ``dt`` seconds from there (``work_in``). Work is measured in nominal iterations (1.0 = one
worker's nominal items) and ``iteration_s`` is the undelayed iteration time. The simulator uses these to
jump between events; a runtime uses ``elapsed`` to decide how long to sleep after real work; ``Ideal``
integrates them.

Two shapes, both piecewise-constant and so exact:

* *work-paced* (Slow Worker, Power-Law, trace): the slowdown is attached to the worker's own processing,
  as the paper's sleeps are inserted between items (§3.4.1: 1000 sleep points per iteration). Time is a
  piecewise-linear function of the worker's cumulative work ``w``; idling does not consume a slowdown.
* *time-paced* (Disrupted Machine): a disruptor steals the CPU for wall-clock periods, whatever the
  worker is doing; work is a piecewise-linear function of time.

Profiles generate their randomness lazily in fixed blocks from the Generator they were given, so the
realisation over any range does not depend on how far a run went: every mode of a paired comparison sees
the same stragglers.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence

import numpy as np

_BLOCK = 16  # iterations (work-paced) or periods (time-paced) generated at a time


class _Piecewise:
    """A continuous, strictly increasing piecewise-linear map x -> y from (0, 0), extended on demand.

    ``more()`` returns the next (x_end, slope) segments; it is called until the map reaches far enough.
    """

    def __init__(self, more: Callable[[], list[tuple[float, float]]]) -> None:
        self._more = more
        self.xs: list[float] = [0.0]
        self.ys: list[float] = [0.0]
        self.slopes: list[float] = []

    def _grow(self) -> None:
        for x_end, slope in self._more():
            x0, y0 = self.xs[-1], self.ys[-1]
            if x_end <= x0:
                continue
            if slope <= 0:
                raise ValueError(f"slopes must be positive, got {slope}")
            self.slopes.append(slope)
            self.xs.append(x_end)
            self.ys.append(y0 + slope * (x_end - x0))

    def y(self, x: float) -> float:
        while self.xs[-1] <= x:
            self._grow()
        i = bisect_right(self.xs, x) - 1
        return self.ys[i] + self.slopes[i] * (x - self.xs[i])

    def x(self, y: float) -> float:
        while self.ys[-1] <= y:
            self._grow()
        i = bisect_right(self.ys, y) - 1
        return self.xs[i] + (y - self.ys[i]) / self.slopes[i]


class SpeedProfile:
    """One worker's speed. Subclasses set ``paced`` and the map."""

    paced: str = "work"

    def __init__(self, iteration_s: float, segments: Callable[[], list[tuple[float, float]]]) -> None:
        if iteration_s <= 0:
            raise ValueError(f"iteration_s must be positive, got {iteration_s}")
        self.iteration_s = iteration_s
        # work-paced: x = cumulative work, y = busy seconds; time-paced: x = seconds, y = work
        self._map = _Piecewise(segments)

    def elapsed(self, t0: float, w0: float, work: float) -> float:
        """Seconds to do ``work`` starting at time ``t0`` with ``w0`` work done so far."""
        if work <= 0:
            return 0.0
        if self.paced == "work":
            return self._map.y(w0 + work) - self._map.y(w0)
        return self._map.x(self._map.y(t0) + work) - t0

    def work_in(self, t0: float, w0: float, dt: float) -> float:
        """Work done in ``dt`` busy seconds from time ``t0`` with ``w0`` done so far."""
        if dt <= 0:
            return 0.0
        if self.paced == "work":
            return self._map.x(self._map.y(w0) + dt) - w0
        return self._map.y(t0 + dt) - self._map.y(t0)

    def slowdown_at(self, t: float, w: float) -> float:
        """The current time-per-work factor (1 = nominal), e.g. for a runtime's sleep injection."""
        m = self._map
        if self.paced == "work":
            m.y(w)
            i = bisect_right(m.xs, w) - 1
            return m.slopes[i] / self.iteration_s
        m.y(t)
        i = bisect_right(m.xs, t) - 1
        return 1.0 / (m.slopes[i] * self.iteration_s)


class WorkPaced(SpeedProfile):
    paced = "work"


class TimePaced(SpeedProfile):
    paced = "time"


def nominal(iteration_s: float) -> SpeedProfile:
    """No stragglers: one iteration of work takes ``iteration_s``."""
    return WorkPaced(iteration_s, lambda: [(np.inf, iteration_s)])


def slow_worker(
    rng: np.random.Generator,
    iteration_s: float,
    delay: float,
    *,
    probability: float = 0.01,
    points_per_iteration: int = 10,
    max_duration: float = 2.0,
) -> SpeedProfile:
    """Slow Worker pattern (§3.4.1): at each of 10 delay points per iteration the worker becomes slowed
    with probability 1%, for U(0, 2) iterations, running (1 + delay)x slower.

    [interp] The delay points sit at fixed positions of the worker's own processing and a
    period is measured in undelayed work, so a slowed worker that idles stays slowed; overlapping periods
    extend rather than stack. Only this reading makes BSP grow linearly with the delay, as Fig. 3.6 does.
    """
    state = {"next_block": 0, "slow_until": 0.0}
    step = 1.0 / points_per_iteration

    def more() -> list[tuple[float, float]]:
        first = state["next_block"] * _BLOCK * points_per_iteration
        count = _BLOCK * points_per_iteration
        starts = rng.random(count) < probability
        durations = rng.uniform(0.0, max_duration, count)
        segments: list[tuple[float, float]] = []
        for k in range(count):
            pos = (first + k) * step
            if starts[k]:
                state["slow_until"] = max(state["slow_until"], pos + durations[k])
            end = pos + step
            slow_end = min(state["slow_until"], end)
            if slow_end > pos:
                segments.append((slow_end, iteration_s * (1.0 + delay)))
            if slow_end < end:
                segments.append((end, iteration_s))
        state["next_block"] += 1
        return segments

    return WorkPaced(iteration_s, more)


def power_law(rng: np.random.Generator, iteration_s: float, alpha: float) -> SpeedProfile:
    """Power-Law pattern (§3.4.1): each iteration's length is drawn independently with density
    p(t) ∝ t^-alpha for t >= iteration_s (Pareto; the text's "t^alpha" must mean this, since a smaller
    alpha gives "more delay on average"), stretched evenly over the iteration's work."""
    if alpha <= 2:
        raise ValueError(f"alpha must exceed 2 for a finite mean, got {alpha}")
    state = {"next": 0}

    def more() -> list[tuple[float, float]]:
        factors = 1.0 + rng.pareto(alpha - 1.0, _BLOCK)  # numpy's Lomax: 1 + X is Pareto(alpha - 1)
        first = state["next"]
        state["next"] += _BLOCK
        return [(first + k + 1.0, iteration_s * float(f)) for k, f in enumerate(factors)]

    return WorkPaced(iteration_s, more)


def trace_driven(iteration_s: float, factors: Sequence[float], offset: int = 0) -> SpeedProfile:
    """Iteration k of this worker takes ``factors[(offset + k) mod len]`` x ``iteration_s`` (measured
    per-worker minibatch times divided by their job's median, e.g. the Alibaba PAI traces)."""
    values = [float(f) for f in factors]
    if not values or min(values) <= 0:
        raise ValueError("trace factors must be a non-empty sequence of positive numbers")
    state = {"next": 0}

    def more() -> list[tuple[float, float]]:
        first = state["next"]
        state["next"] += _BLOCK
        return [
            (first + k + 1.0, iteration_s * values[(offset + first + k) % len(values)]) for k in range(_BLOCK)
        ]

    return WorkPaced(iteration_s, more)


def disrupted_machine(
    rng: np.random.Generator,
    iteration_s: float,
    delay: float,
    *,
    period_s: float = 20.0,
    probability: float = 0.2,
) -> SpeedProfile:
    """Disrupted Machine pattern (§3.4.1): every 20 s each machine starts, with probability 20%, a
    disruptor of delay x cores spinning threads for 20 s; under fair sharing every worker of the machine
    then runs at 1 / (1 + delay) of its speed. One profile serves all workers of a machine."""
    state = {"next": 0}

    def more() -> list[tuple[float, float]]:
        hits = rng.random(_BLOCK) < probability
        first = state["next"]
        state["next"] += _BLOCK
        rate = 1.0 / iteration_s
        return [
            ((first + k + 1) * period_s, rate / (1.0 + delay) if hit else rate) for k, hit in enumerate(hits)
        ]

    return TimePaced(iteration_s, more)


def ideal_time(profiles: Sequence[SpeedProfile], total_work: float, tolerance: float = 1e-9) -> float:
    """Ideal (§3.4.1, "all work is at all times perfectly balanced with no overhead"): the earliest T at
    which every worker, busy from time 0, has together done ``total_work`` [interp]. No
    schedule can finish earlier: a worker can never have done more work by T than when never idle."""
    if total_work <= 0:
        return 0.0

    def done(t: float) -> float:
        return sum(p.work_in(0.0, 0.0, t) for p in profiles)

    hi = max(p.iteration_s for p in profiles) * total_work / len(profiles)
    while done(hi) < total_work:
        hi *= 2.0
    lo = 0.0
    while hi - lo > tolerance * hi:
        mid = 0.5 * (lo + hi)
        if done(mid) >= total_work:
            hi = mid
        else:
            lo = mid
    return hi
