"""The calibrated timing noise (``runtime.psld.calibrate.timing_noise``), its override, and the seeded
range of the calibrated simulation (``experiments.psld_gpu.seed_spread``). No processes."""

from __future__ import annotations

import numpy as np
import pytest
from clustertwin.runtime.psld.calibrate import Calibration, timing_noise
from clustertwin.scenarios.load import load_scenario
from clustertwin.sim.psld import run

from experiments.psld_gpu import SCENARIO, _rate, current_calibration, seed_spread

SHORT = ["real.device=cpu", "duration_s=3.0", "warmup_s=1.0"]


def _samples(sigma: float, workers: int = 3, blocks: int = 12, iterations: int = 60, seed: int = 0):
    """Samples in each worker's order (iteration-major, block order) on a 3-PS round-robin layout: a
    typical time per (PS, worker, block) spread over two decades, times the simulator's lognormal factor."""
    rng = np.random.default_rng(seed)
    typical = rng.uniform(1e-3, 1e-1, size=(workers, blocks))
    w, r, y = [], [], []
    for worker in range(workers):
        for _ in range(iterations):
            for b in range(blocks):
                w.append(worker)
                r.append(b % 3)
                y.append(typical[worker, b] * np.exp(sigma * rng.standard_normal() - 0.5 * sigma**2))
    return w, r, y, blocks


@pytest.mark.parametrize("sigma", [0.05, 0.2, 0.5])
def test_the_estimator_recovers_a_known_sigma(sigma: float) -> None:
    assert timing_noise(*_samples(sigma)) == pytest.approx(sigma, rel=0.08)


def test_noiseless_samples_have_no_noise() -> None:
    assert timing_noise(*_samples(0.0)) == pytest.approx(0.0, abs=1e-12)
    assert timing_noise([0, 0], [0, 0], [0.0, 0.0], 1) == 0.0  # no positive sample: nothing to measure


def test_interleaved_workers_and_a_first_touch_iteration() -> None:
    """Workers' samples interleaved in the input (each still in its own order), and a slow first
    iteration, which ``skip`` leaves out."""
    w, r, y, blocks = _samples(0.3)
    per = len(w) // 3
    order = np.ravel(np.stack([np.arange(per) + i * per for i in range(3)], axis=1))
    y = np.asarray(y)
    y[[i * per + b for i in range(3) for b in range(blocks)]] *= 50.0  # iteration 0 of every worker
    mixed = [np.asarray(x)[order] for x in (w, r, y)]
    assert timing_noise(*mixed, blocks) == pytest.approx(timing_noise(w, r, y, blocks), rel=1e-12)
    assert timing_noise(w, r, y, blocks) == pytest.approx(0.3, rel=0.08)


def test_the_overrides_carry_the_noise() -> None:
    cal = Calibration(
        compute_s=0.01,
        barrier_s=0.001,
        report_barrier_s=0.002,
        link_gbps=10.0,
        link_gbps_per_ps=(10.0,),
        link_gbps_per_ps_bound=(False,),
        latency_s=1e-4,
        sum_gbytes_per_s=5.0,
        update_gbytes_per_s=None,
        algo_s_per_block_server=1e-5,
        timing_noise=0.37,
    )
    # Measured, recorded and fed to the simulator (calibrate's docstring), in place of the scenario's
    # unmeasured default.
    assert cal.as_dict()["timing_noise"] == 0.37
    assert load_scenario(SCENARIO, SHORT).costs.timing_noise != pytest.approx(0.37)
    scenario = load_scenario(SCENARIO, [*SHORT, *cal.overrides()])
    assert scenario.costs.timing_noise == pytest.approx(0.37)


def test_the_seed_spread_summarises_one_simulation_per_seed() -> None:
    overrides = [*SHORT, "policy=psld", "costs.timing_noise=0.5"]
    spread = seed_spread(SCENARIO, overrides, 3)
    each = [run(load_scenario(SCENARIO, [*overrides, f"seed={k}"])) for k in range(3)]
    assert spread["it_s"] == [_rate(r) for r in each]
    assert spread["reassignments"] == [len(r.tables["reassignments"]) for r in each]
    assert spread["median"] == float(np.median(spread["it_s"]))
    assert (spread["min"], spread["max"]) == (min(spread["it_s"]), max(spread["it_s"]))


def test_noise_leaves_a_run_without_a_scheduler_alone() -> None:
    """mxnet (no scheduler) with its layout pinned runs the same whatever the seed and the noise: the
    noise is on the scheduler's samples only."""
    quiet = run(load_scenario(SCENARIO, [*SHORT, "policy=mxnet", "costs.timing_noise=0"]))
    owners = [0] * int(quiet.info["blocks"])
    noisy = [*SHORT, "policy=mxnet", "costs.timing_noise=0.5"]
    rates = [
        _rate(run(load_scenario(SCENARIO, [*noisy, f"seed={k}"]), initial_owners=owners)) for k in range(3)
    ]
    pinned = run(
        load_scenario(SCENARIO, [*SHORT, "policy=mxnet", "costs.timing_noise=0"]), initial_owners=owners
    )
    assert min(rates) == max(rates) == _rate(pinned)


def test_a_seeded_range_of_no_seeds_is_refused(capsys) -> None:
    from experiments.psld_gpu import main

    with pytest.raises(SystemExit) as exit_:
        main(["resim", "--from", ".", "--seeds", "0"])
    assert exit_.value.code == 2 and "--seeds" in capsys.readouterr().err


def test_a_saved_calibration_under_today_s_rules() -> None:
    """``resim`` recomputes a saved folder's simulations with today's link estimate (a bound below the
    measured rate takes it) and the noise measured on its samples fed; the other overrides stay."""
    saved = {
        "link_gbps_per_ps": [60.0, 12.0, 11.0],
        "link_gbps_per_ps_bound": [False, True, True],
        "overrides": ["cluster.worker_gbps=2.766667e+01", "cluster.server_gbps=2.766667e+01",
                      "costs.message_latency_s=1.2e-02", "costs.timing_noise=0"],
    }  # fmt: skip
    parsed = dict(o.split("=", 1) for o in current_calibration(saved, 0.4))
    assert float(parsed["cluster.server_gbps"]) == pytest.approx(60.0)
    assert float(parsed["cluster.worker_gbps"]) == pytest.approx(60.0)
    assert float(parsed["costs.timing_noise"]) == pytest.approx(0.4)
    assert parsed["costs.message_latency_s"] == "1.2e-02"
    # a folder without samples keeps its noise; one without per-PS rates keeps its link
    old = {"overrides": saved["overrides"]}
    assert current_calibration(old, float("nan")) == saved["overrides"]
