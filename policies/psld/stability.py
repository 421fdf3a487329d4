"""When is a new assignment worth applying? The significance test of a predicted gain (ours).

[PSLD] recomputes the assignment from scratch whenever the straggler trigger fires (§4, Fig. 8), and
says nothing about applying a new map whose advantage is within the profiles' noise. A point test
("apply when the predicted slowest-PS time falls by ``min_gain``") is what both executors used before;
it is stable only while the predictions are far more precise than ``min_gain``:

* With a straggler present the trigger stays on (the best PS is more than twice as fast as the
  straggler for as long as it straggles), so Algorithm 3 is rerun every cooldown with fresh
  exploration draws, and its map is compared with the current one on predictions alone.
* On fast hardware the fast PSs' block times sit near the measurement's resolution: a few tens of
  microseconds of jitter, shared by every block of one PS in one iteration (one scheduling hiccup
  delays them all), are a large fraction of each sample. Their fitted lines move by more than 5% from
  one reporting period to the next, so the point test sees a "gain" in most periods, applies it, and
  the next period's noise undoes it: 24 and 15 real reassignments on 4 x H200 where the calibrated
  simulation (whose links are clean lower bounds, ≥437 Gbit/s) made 1-3. The worker-to-worker SEM of
  Algorithm 1 does not show that noise, because it is shared by all workers of an iteration.

The test here applies a map only when the current one is *confidently* slower: the current map's
slowest-PS time, each PS at its lower bound, must exceed the new map's at its upper bound by
``min_gain``. A PS's bound is Pred_mean -/+ z x its uncertainty, and the uncertainty is the larger of
Algorithm 1's SEM over workers and the SEM over the reporting periods in the history (each period's
own fit, evaluated at the same load), which is what sees the period-to-period noise. A PS with a
single period of history has no second period yet, and that period's fit can be off by its whole
shared jitter (a PS whose blocks all drew one 2x hiccup looks like a straggler): its period is split
in two, each worker's samples in the order they were taken, and the halves stand for two periods.
A steady difference between PSs, a straggler or blocks queued behind each other, is the same in both
halves; one iteration's hiccup is not. With noiseless samples every term is 0 and the test is the
point test, so the simulator without timing noise makes the same decisions as before; a real
straggler's effect (many times the noise) passes at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from clustertwin.policies.psld.placement import loads_of
from clustertwin.policies.psld.profiling import PerfModel, Sample, ServerModel, fit_model


def period_sem(periods: Sequence[ServerModel], s: float) -> float:
    """Standard error of the mean over reporting periods of one PS's predicted time at load ``s``,
    each period's prediction from its own fit; 0 with fewer than two periods."""
    if len(periods) < 2:
        return 0.0
    preds = np.asarray([m.mean(s) for m in periods])
    return float(np.std(preds, ddof=1) / np.sqrt(len(preds)))


def halves(samples: Sequence[Sample]) -> list[list[Sample]]:
    """One period's samples as two: each worker's samples, in the order taken, cut in the middle."""
    per_worker: dict[int, list[Sample]] = {}
    for x in samples:
        per_worker.setdefault(x.worker, []).append(x)
    first = [x for group in per_worker.values() for x in group[: len(group) // 2]]
    second = [x for group in per_worker.values() for x in group[len(group) // 2 :]]
    return [first, second] if first else [second]


def period_models(history: Sequence[Sequence[Sample]], server: int) -> list[ServerModel]:
    """One PS's fit per reporting period of its ``history``; a single period counts as its two halves."""
    taken = [p for p in history if p]
    return [fit_model(p)[server] for p in (halves(taken[0]) if len(taken) == 1 else taken)]


def makespan_bound(
    sizes: Sequence[float],
    owners: Sequence[int],
    model: PerfModel,
    periods: Mapping[int, Sequence[ServerModel]],
    z: float,
    side: float,
) -> float:
    """The slowest PS's predicted time under ``owners``, each PS at Pred_mean + side x z x its
    uncertainty (``side`` -1: lower bounds, +1: upper bounds); ``periods`` holds each PS's per-period
    fits (``period_models``)."""
    out = 0.0
    for r, s in loads_of(sizes, owners).items():
        m = model[r]
        out = max(out, m.mean(s) + side * z * max(m.sem(s), period_sem(periods.get(r, ()), s)))
    return out


def clear_gain(
    sizes: Sequence[float],
    current: Sequence[int],
    new: Sequence[int],
    model: PerfModel,
    history: Mapping[int, Sequence[Sequence[Sample]]],
    z: float,
    min_gain: float,
) -> bool:
    """Whether ``new`` is confidently at least ``min_gain`` faster than ``current`` (module docstring);
    ``history`` holds each PS's samples per reporting period."""
    periods = {r: period_models(history[r], r) for r in set(current) | set(new) if r in history}
    before = makespan_bound(sizes, current, model, periods, z, -1.0)
    after = makespan_bound(sizes, new, model, periods, z, +1.0)
    return after <= before * (1.0 - min_gain)
