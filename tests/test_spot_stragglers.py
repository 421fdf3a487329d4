"""Stragglers among a spot job's workers and FlexRR inside AgileML's workers (simulation): the factor
the FlexRR engine measures, its effect on the spot run, and the claims of
``scenarios/claims/spot/flexrr.yaml``."""

from __future__ import annotations

import pandas as pd
import pytest
from clustertwin.scenarios.load import load_scenario
from clustertwin.scenarios.spot_real_section import REAL_MARKET_SCENARIO, REAL_SPOT_SCENARIO
from clustertwin.scenarios.spot_schema import SpotStragglers
from clustertwin.sim.spot import run
from clustertwin.sim.spot.stragglers import StragglerSlowdown

from clustertwin.errors import InputError

SLOW = {"model": "slow_worker", "delay": 1.0, "iterations": 6, "items_per_worker": 100}


def _factor(mode: str, workers: int, seed: int = 0) -> float:
    return StragglerSlowdown(SpotStragglers(**SLOW, mode=mode), seed).factor(workers)


@pytest.mark.parametrize("workers", [1, 4, 8])
def test_reassignment_never_makes_a_clock_slower_than_waiting_for_the_straggler(workers: int) -> None:
    bsp, rr = _factor("bsp", workers), _factor("flexrr", workers)
    assert bsp >= 1.0 - 1e-9 and rr >= 1.0 - 1e-9
    assert rr <= bsp + 1e-9
    if workers >= 4:  # with peers to hand items to, it helps
        assert rr < bsp
    assert _factor("bsp", 0) == 1.0


def _simulate(stragglers: str | None, seed: int = 4):
    overrides = [f"seed={seed}", "real=null"]
    if stragglers is not None:
        overrides.append(f"stragglers={{model: slow_worker, delay: 1.0, iterations: 6, mode: {stragglers}}}")
    return run(load_scenario(REAL_MARKET_SCENARIO, overrides))


def test_stragglers_slow_the_job_and_flexrr_wins_back_part_of_it() -> None:
    plain, bsp, rr = _simulate(None), _simulate("bsp"), _simulate("flexrr")
    assert plain.info["runtime_s"] < rr.info["runtime_s"] < bsp.info["runtime_s"]
    again = _simulate("flexrr")
    pd.testing.assert_frame_equal(rr.tables["progress"], again.tables["progress"])  # same seed, same log


def test_a_real_run_refuses_what_its_workers_cannot_do_by_name(tmp_path) -> None:
    from clustertwin.runtime.spot.run import check_real

    market = load_scenario(
        REAL_MARKET_SCENARIO, ["stragglers={model: slow_worker, delay: 1.0, mode: flexrr}"]
    )
    with pytest.raises(InputError, match="field stragglers.mode"):  # no SSP in the real AgileML
        check_real(market, cores=64)
    check_real(
        load_scenario(REAL_MARKET_SCENARIO, ["stragglers={model: slow_worker, mode: bsp_rr}"]), cores=64
    )
    schedule = load_scenario(REAL_SPOT_SCENARIO, ["stragglers={model: slow_worker, delay: 1.0}"])
    with pytest.raises(InputError, match="field stragglers"):
        check_real(schedule, cores=64)


def test_an_unknown_workers_mode_names_the_field() -> None:
    with pytest.raises(InputError, match="stragglers.mode"):
        load_scenario(REAL_MARKET_SCENARIO, ["stragglers={model: slow_worker, mode: nope}"])


@pytest.mark.slow
def test_the_flexrr_claims_hold_from_one_start(tmp_path) -> None:
    from clustertwin.reproduce_proteus import flexrr_claims

    rows = flexrr_claims(1, tmp_path)
    assert len(rows) == 6 and all(r.holds for r in rows)


@pytest.mark.slow  # ~45 s of processes on a loaded 2-core host
def test_reassigned_items_are_applied_once_for_real(tmp_path) -> None:
    import json

    from clustertwin.analysis.spot_market_real import run_market_real

    from tests.test_spot_market_real import SMALL_MARKET

    overrides = [
        *SMALL_MARKET,
        "real.job={features: 16, classes: 4, examples: 1024, batch: 256, lr: 0.5, step_s: 0.2}",
        "stragglers={model: slow_worker, delay: 3.0, probability: 0.1, mode: bsp_rr}",
    ]
    result = run_market_real(load_scenario(REAL_MARKET_SCENARIO, overrides), tmp_path)

    def rows(path):
        for line in path.read_text().splitlines():
            try:
                yield json.loads(line)
            except json.JSONDecodeError:  # half a line left by a SIGKILL
                continue

    logs = (tmp_path / "logs").glob("*.jsonl")
    helped = [row for path in logs for row in rows(path) if row["ev"] == "helped"]
    assert helped  # peers took items off the stragglers
    assert result.info["completed"] == 1
    assert result.info["max_abs_diff_vs_reference"] < 1e-9  # every item of every clock applied once
