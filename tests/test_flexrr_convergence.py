"""Statistical efficiency in the FlexRR simulator: the staleness model of iterations to a target loss
(``policies/flexrr/convergence.py``) and the time-to-target metrics a what-if reports beside time per
iteration."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from clustertwin.analysis.flexrr_metrics import flexrr_metrics
from clustertwin.policies.flexrr.convergence import ConvergenceModel, fit
from clustertwin.scenarios.load import load_scenario
from clustertwin.sim.flexrr import run
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["cluster.machines=2", "cluster.workers_per_machine=2", "iterations=5", "items_per_worker=100",
         "rr.message_checks=10", "iteration_s=1.0", "stragglers.model=power_law",
         "stragglers.alpha=3"]  # fmt: skip


@given(st.floats(1, 500), st.floats(0, 0.5), st.integers(0, 5), st.integers(0, 5))
def test_more_staleness_never_needs_fewer_iterations(n0, c, s1, s2):
    m = ConvergenceModel(n0, c)
    lo, hi = sorted((s1, s2))
    assert m.iterations_to_target(lo) <= m.iterations_to_target(hi)
    assert m.iterations_to_target(0) == math.ceil(round(n0, 9))


@given(st.integers(10, 500), st.floats(0, 0.3))
def test_fit_recovers_the_slope_from_exact_counts(n0, c):
    measured = {s: n0 * (1 + c * s) for s in (0, 1, 2, 3)}
    model = fit(measured)
    assert model.iterations == n0 and model.per_staleness == pytest.approx(c, abs=1e-12)


def test_fit_needs_bsp():
    with pytest.raises(ValueError, match="slack 0"):
        fit({1: 10.0})


def test_time_to_target_is_time_per_iteration_times_the_models_iterations():
    base = ROOT / "scenarios" / "flexrr-default.yaml"
    conv = ["convergence.iterations=100", "convergence.per_staleness=0.02"]
    bsp = flexrr_metrics(run(load_scenario(base, [*SMALL, *conv, "mode=bsp"])))
    ssp = flexrr_metrics(run(load_scenario(base, [*SMALL, *conv, "mode=ssp"])))
    assert (bsp["iterations_to_target"], ssp["iterations_to_target"]) == (100, 102)
    for m in (bsp, ssp):
        assert m["time_to_target_s"] == pytest.approx(m["time_per_iteration_s"] * m["iterations_to_target"])
    none = flexrr_metrics(run(load_scenario(base, [*SMALL, "mode=bsp"])))
    assert math.isnan(none["time_to_target_s"]) and math.isnan(none["iterations_to_target"])
