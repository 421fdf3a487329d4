"""AgileML's real runtime (``runtime/spot``; [Proteus] §1.6, §6.3): real processes, real SIGKILLs.

One small AgileML run (1 reliable + 3 transient processes, stage 2) has both eviction paths: an
ActivePS killed with no warning (an effective failure: roll back to the BackupPSs' last consistent
clock) and then another ActivePS evicted with a warning (end-of-life flush and migration). Half of
the workers are gone by the end, and the final model must equal the serial replay of exactly the
clocks the run reports — an update lost, or applied twice, would show. The checkpoint/restart run must
restart from its last complete checkpoint and lose exactly the clocks since then.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from clustertwin.analysis.spot_prediction import run_real
from clustertwin.scenarios.load import load_scenario
from clustertwin.scenarios.spot_real_results import check_spot_real_tables, spot_real_metrics
from clustertwin.scenarios.spot_real_section import REAL_SPOT_SCENARIO

from clustertwin.errors import InputError

SMALL = [
    "real.processes={reliable: 1, transient: 3}",
    "real.job={features: 32, classes: 4, examples: 1024, batch: 128, lr: 0.5, step_s: 0.03}",
    "real.agileml.backup_every=4",
]


def _real_scenario(overrides: list[str]):
    return load_scenario(REAL_SPOT_SCENARIO, overrides)


def _agileml(tmp: Path):
    scenario = _real_scenario(
        [
            *SMALL,
            "real.duration_s=6",
            "real.evictions=[{at_s: 2.5, processes: [t0], warning_s: 0},"
            " {at_s: 4.5, processes: [t1], warning_s: 1.0}]",
        ],
    )
    return run_real(scenario, workdir=tmp)


@pytest.fixture(scope="module")
def agileml_run(tmp_path_factory):
    return _agileml(tmp_path_factory.mktemp("agileml"))


def test_agileml_keeps_training_and_loses_no_acknowledged_update(agileml_run) -> None:
    result = agileml_run
    check_spot_real_tables(result)
    info = result.info
    ev = result.tables["evictions"].set_index("event")
    # stage 2 at 1R:3T; both evicted processes hosted ActivePSs
    assert list(ev["stage_before"]) == [2, 2]
    assert ev.loc[0, "recovery"] == "effective_failure" and ev.loc[0, "planned"] == "effective_failure"
    assert ev.loc[1, "recovery"] == "end_of_life_flush"
    # half of the workers are gone, and the job kept training after each eviction
    it = result.tables["iterations"]
    kept = it[it["kept"]].sort_values("clock")
    assert kept["workers"].iloc[-1] == 2
    for t_kill in ev["killed_s"]:
        assert (kept["end_s"] > t_kill + 0.5).sum() >= 5
    # the final lineage is every clock once, and the model is the serial replay of that many clocks
    assert list(kept["clock"]) == list(range(info["final_clock"]))
    assert info["max_abs_diff_vs_reference"] < 1e-9
    assert info["final_loss"] < info["initial_loss"]


def test_rollback_goes_back_only_to_the_last_backup_push(agileml_run) -> None:
    ev = agileml_run.tables["evictions"].set_index("event")
    failure = ev.loc[0]
    # the consistent state is a BackupPS push point (every 4 clocks), at most one push behind the front
    assert failure["rollback_to"] % 4 == 0
    assert 0 <= failure["lost_clocks"] == failure["front_clock"] - failure["rollback_to"] <= 8
    it = agileml_run.tables["iterations"]
    redone = it[(it["clock"] >= failure["rollback_to"]) & (it["clock"] < failure["front_clock"])]
    # the clocks past the roll-back target were done twice: once lost (generation 0), once kept (1)
    assert set(redone.loc[~redone["kept"], "gen"]) <= {0}
    assert set(redone.loc[redone["kept"], "gen"]) == ({1} if failure["lost_clocks"] else set())
    # everything from the roll-back target on was computed by the new generation
    assert set(it.loc[it["kept"] & (it["clock"] >= failure["rollback_to"]), "gen"]) == {1}
    # the flushed eviction lost nothing: progress never went back around it
    flush = ev.loc[1]
    assert flush["rollback_to"] == -1 and flush["lost_clocks"] == 0 and flush["recover_s"] == 0.0
    prog = agileml_run.tables["progress"]
    after = prog[(prog["time_s"] > failure["killed_s"] + 1e-6) & (prog["event"] == "clock")]
    assert after["clocks_done"].is_monotonic_increasing
    # the simulator's prediction is present for both
    assert list(ev["pred_recovery"]) == ["effective_failure", "end_of_life_flush"]
    metrics = spot_real_metrics(agileml_run)
    assert metrics["lost_clocks"] == failure["lost_clocks"]


def test_checkpoint_restart_loses_exactly_the_progress_since_its_checkpoint(tmp_path: Path) -> None:
    scenario = _real_scenario(
        [
            *SMALL,
            "fault_tolerance=checkpoint",
            # Long enough after the kill (5 s) to redo the lost clocks even on a loaded 2-core machine: at
            # 6 s a CI run ended before the front clock was regained, and recover_s had nothing to measure.
            "real.duration_s=9",
            "real.checkpoint.interval_s=1.5",
            "real.evictions=[{at_s: 4.0, processes: [t0, t1], warning_s: 1.0}]",
        ],
    )
    result = run_real(scenario, workdir=tmp_path)
    check_spot_real_tables(result)
    ev = result.tables["evictions"].iloc[0]
    ck = result.tables["checkpoints"]
    done = ck[(ck["done_s"] < ev["killed_s"]) & ck["done_s"].notna()]
    assert len(done) >= 1
    last = int(done.sort_values("done_s")["clock"].iloc[-1])
    assert ev["recovery"] == "checkpoint_rollback"
    assert ev["rollback_to"] == last
    assert ev["lost_clocks"] == ev["front_clock"] - last > 0
    assert ev["restart_s"] > 0 and ev["recover_s"] > ev["restart_s"]
    assert (tmp_path / "checkpoints" / "latest.json").exists()
    assert result.info["phases"] == 2
    kept = result.tables["iterations"]
    kept = kept[kept["kept"]].sort_values("clock")
    assert list(kept["clock"]) == list(range(result.info["final_clock"]))
    assert result.info["max_abs_diff_vs_reference"] < 1e-9  # restarted from exactly the saved state
    assert np.isfinite(ev["pred_recover_s"]) and ev["pred_lost_clocks"] > 0


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["real.evictions=[{at_s: 3, processes: [t9]}]"], "evictions[0].processes"),
        (["real.evictions=[{at_s: 3, processes: [r0]}]"], "evictions[0].processes"),
        (
            ["real.duration_s=10", "real.evictions=[{at_s: 3, processes: [t0], warning_s: 5}]"],
            "evictions[0].warning_s",
        ),
        (["real.duration_s=10", "real.evictions=[{at_s: 12, processes: [t0]}]"], "evictions[0].at_s"),
        (
            ["real.evictions=[{at_s: 3, processes: [t0]}, {at_s: 5, processes: [t0]}]"],
            "evictions[1].processes",
        ),
        (["real.evictions=[]", "real.trace={bids: [1.0]}"], "trace.bids"),
        (["real.processes.reliable=0"], "real.processes.reliable"),
    ],
)
def test_bad_input_names_the_field(overrides: list[str], field: str) -> None:
    with pytest.raises(InputError) as err:
        _real_scenario(overrides)
    assert field in str(err.value)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["policy=bidbrain"], "field policy"),
        (["market.zones=[us-east-1a]", "billing.model=per_second"], "field billing.model"),
        (["agileml.reliable_count=4"], "field agileml.reliable_count"),
        (["real=null"], "field real"),
    ],
)
def test_a_real_run_refuses_what_it_cannot_honour_by_name(overrides: list[str], field: str) -> None:
    from clustertwin.runtime.spot.run import check_real

    scenario = _real_scenario(overrides)
    with pytest.raises(InputError, match=field):
        check_real(scenario, cores=64)
    check_real(_real_scenario(["fault_tolerance=checkpoint", "agileml.stage3_above=7"]), cores=64)


def test_a_simulation_refuses_the_real_section() -> None:
    from clustertwin.api import simulate

    with pytest.raises(InputError, match="field real"):
        simulate(_real_scenario([]))


def test_trace_replay_evicts_when_the_price_passes_the_bid() -> None:
    from clustertwin.runtime.spot.driver import schedule

    bids = "[1.06, 1.1, 1.3, 1.3, 1.3, 1.3]"
    scenario = _real_scenario(
        [
            "real.evictions=[]",
            f"real.trace={{bids: {bids}, real_s_per_trace_h: 1.0, start: '2020-02-20T00:00:00'}}",
        ],
    )
    events = schedule(scenario)
    assert events and all(e.warning_s == 2.0 for e in events)
    assert "t0" in events[0].processes and all(
        0 < e.warn_s < e.kill_s < scenario.real.duration_s for e in events
    )
    with pytest.raises(InputError, match=r"real.trace.bids\[0\]"):
        schedule(_real_scenario(["real.evictions=[]", "real.trace={bids: [0.01, 2, 2, 2, 2, 2]}"]))
