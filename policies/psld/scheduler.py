"""The PSLD control loop ([PSLD], Figs. 7-8): profile, detect, redistribute, scale.

Every reporting period the executor hands the scheduler the workers' block timing samples and the
current assignment. The scheduler keeps, per PS, the samples of its last ``history_reports`` *non-empty*
reports (a PS that gets no blocks keeps its stale profile: that is why PSLD without exploration never sees
a recovery, Fig. 18), refits Pred(r, s), computes the speed variation and, above the straggler threshold
(1) and outside the cooldown, runs Algorithm 1 (superior set, possibly scale-out) and Algorithm 3
(epsilon-greedy) or, for the strawman, the proportional split. A new assignment is applied only when it
is predicted to shorten the slowest PS's time by ``min_gain``, confidently: the current map at its PSs'
lower bounds against the new one at their upper bounds, with each PS's uncertainty taken over workers and
over reporting periods (``gain_test: significant``, ``policies.psld.stability``; ours: the paper
recomputes from scratch and says nothing about churn; without this guard a random exploration draw, or
the period-to-period noise of fast PSs' profiles, would reshuffle blocks for no gain).

``recheck`` (ours, on by default): below the threshold the scheduler still reruns Algorithms 1 and 3 once
per cooldown and applies the result under the same ``min_gain`` test. Fig. 18 shows PSLD reassigning
after the stragglers recover; in our model the speed-variation test alone does not fire then (beta is
tiny next to alpha s, so lightly loaded recovered PSs measure as fast as the rest), while the refreshed
profiles of the exploration blocks make a fresh Algorithm 3 run clearly better. Without exploration the
profiles stay stale and the recheck finds nothing, which is the paper's ablation result.

The scheduler never reads a clock: report indices count periods, and randomness comes from the caller.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from clustertwin.policies.psld.baselines import strawman_owners
from clustertwin.policies.psld.placement import eps_greedy, loads_of, predicted_makespan
from clustertwin.policies.psld.profiling import Z_90, Sample, ServerModel, fit_model
from clustertwin.policies.psld.scaling import needs_scale_out, new_server_model
from clustertwin.policies.psld.stability import clear_gain
from clustertwin.policies.psld.superior import superior_set
from clustertwin.policies.psld.trigger import server_speeds, speed_variation


@dataclass(frozen=True)
class SchedulerConfig:
    """Defaults are the paper's (§2.7 of the notes) except the ones marked ours."""

    policy: str = "psld"  # psld | strawman
    epsilon: float = 0.1
    theta_ratio: float = 1.0  # theta1 / theta0
    z: float = Z_90
    straggler_threshold: float = 1.0
    scale_threshold: float = 0.5  # of the initial PS count
    scale_out: bool = True
    history_reports: int = 4  # ours
    cooldown_reports: int = 2  # ours
    min_gain: float = 0.05  # ours
    speed_metric: str = "paper"  # paper | reference
    strict_superior: bool = False
    order: str = "descending"
    recheck: bool = True  # ours: below the threshold, still rerun Algs. 1 and 3 and apply a clear gain
    # ours: "significant" applies a map only when its gain clears the predictions' uncertainty (over
    # workers and over reporting periods, policies.psld.stability); "point" compares means only
    gain_test: str = "significant"


@dataclass(frozen=True)
class Decision:
    """What the scheduler wants done. ``owners`` is None for ``action == "none"``."""

    action: str  # none | reassign | scale_out | remove
    owners: tuple[int, ...] | None
    servers: tuple[int, ...]  # active PSs after the decision
    superior: tuple[int, ...] = ()
    variation: float = 0.0
    added: int = -1
    predicted_before_s: float = float("nan")
    predicted_after_s: float = float("nan")


@dataclass
class PSLDScheduler:
    """State of the PSLD (or strawman) scheduler for one job."""

    sizes: Sequence[float]
    active: list[int]
    standby: list[int]
    config: SchedulerConfig = field(default_factory=SchedulerConfig)

    def __post_init__(self) -> None:
        if not self.active:
            raise ValueError("the scheduler needs at least one active PS")
        self.initial = len(self.active)
        self.history: dict[int, deque[list[Sample]]] = {}
        self.models: dict[int, ServerModel] = {}
        self.last_change = -(10**9)

    # -- profiling -----------------------------------------------------------------------------
    def observe(self, samples: Sequence[Sample]) -> None:
        """Append one report's samples to the per-PS history and refit the PSs that got samples."""
        per: dict[int, list[Sample]] = {}
        for s in samples:
            per.setdefault(s.server, []).append(s)
        for r, group in per.items():
            hist = self.history.setdefault(r, deque(maxlen=self.config.history_reports))
            hist.append(group)
            self.models[r] = fit_model(x for report in hist for x in report)[r]

    def model(self) -> dict[int, ServerModel]:
        """Fitted models of the active PSs; an unmeasured PS gets the mean of the measured ones."""
        known = {r: m for r, m in self.models.items() if r in self.active}
        if not known:
            return {}
        missing = [r for r in self.active if r not in known]
        if missing:
            prior = ServerModel.average(known.values())
            known.update(dict.fromkeys(missing, prior))
        return known

    # -- decisions -----------------------------------------------------------------------------
    def decide(self, report: int, owners: Sequence[int], rng: np.random.Generator) -> Decision:
        """The decision at the end of reporting period ``report`` (after ``observe``)."""
        model = self.model()
        servers = tuple(self.active)
        if not model:
            return Decision("none", None, servers)
        s_ref = float(sum(self.sizes)) / len(self.active)
        speeds = server_speeds(
            model, self.active, loads_of(self.sizes, owners), s_ref, self.config.speed_metric
        )
        var = speed_variation(speeds)
        triggered = var > self.config.straggler_threshold
        if report - self.last_change < self.config.cooldown_reports or not (triggered or self.config.recheck):
            return Decision("none", None, servers, variation=var)
        superior = superior_set(
            model, self.active, s_ref, z=self.config.z, strict=self.config.strict_superior
        )
        action, added = "reassign", -1
        if (
            triggered
            and self.config.scale_out
            and self.standby
            and needs_scale_out(superior, self.initial, self.config.scale_threshold)
        ):
            added = self.standby.pop(0)
            self.models[added] = new_server_model(model, superior)
            self.active.append(added)
            model[added] = self.models[added]
            superior = (*superior, added)
            action = "scale_out"
        new = self._assign(model, superior, rng)
        before = predicted_makespan(self.sizes, owners, model)
        after = predicted_makespan(self.sizes, new, model)
        if action == "reassign" and not self._worth_it(owners, new, model, before, after):
            return Decision("none", None, servers, superior, var, -1, before, after)
        self.last_change = report
        return Decision(action, tuple(new), tuple(self.active), superior, var, added, before, after)

    def _worth_it(
        self,
        owners: Sequence[int],
        new: Sequence[int],
        model: dict[int, ServerModel],
        before: float,
        after: float,
    ) -> bool:
        """Whether the new map is applied: its gain passes the configured test."""
        if self.config.gain_test == "point":
            return after <= before * (1.0 - self.config.min_gain)
        history = {r: list(self.history[r]) for r in model if r in self.history}
        return clear_gain(self.sizes, owners, new, model, history, self.config.z, self.config.min_gain)

    def remove_server(self, server: int, rng: np.random.Generator) -> Decision:
        """DEL_SERVER: drop ``server`` and redistribute every block over the rest by Algorithm 3."""
        if server not in self.active:
            raise ValueError(f"server {server} is not active")
        if len(self.active) == 1:
            raise ValueError("cannot remove the last PS")
        self.active.remove(server)
        model = self.model()
        if not model:  # nothing measured yet: round-robin over the rest
            new = [self.active[i % len(self.active)] for i in range(len(self.sizes))]
            return Decision("remove", tuple(new), tuple(self.active))
        s_ref = float(sum(self.sizes)) / len(self.active)
        superior = superior_set(
            model, self.active, s_ref, z=self.config.z, strict=self.config.strict_superior
        )
        new = self._assign(model, superior, rng)
        return Decision("remove", tuple(new), tuple(self.active), superior)

    def _assign(
        self, model: dict[int, ServerModel], superior: Sequence[int], rng: np.random.Generator
    ) -> list[int]:
        if self.config.policy == "strawman":
            s_ref = float(sum(self.sizes)) / len(self.active)
            speeds = server_speeds(model, self.active, {}, s_ref, "reference")
            return strawman_owners(self.sizes, self.active, speeds)
        return eps_greedy(
            self.sizes,
            self.active,
            superior,
            model,
            self.config.epsilon,
            rng,
            theta_ratio=self.config.theta_ratio,
            order=self.config.order,
        )
