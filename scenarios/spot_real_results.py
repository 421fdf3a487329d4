"""Column contract of a real spot run's tables (``kind: spot`` with ``--backend real``): what the runtime
measures (``runtime.spot.run_real``, :data:`RUN_TABLES`) and the simulator's prediction of the same
schedule that the analysis adds (``analysis/spot_prediction.py``, :data:`SPOT_REAL_TABLES`).

Times are real seconds from the job's start (every process ready). A *clock* is one global SGD step;
"clocks done" counts the clocks of the run's final lineage (what survived roll-backs and restarts).

* ``iterations`` — one row per clock completed by every partition, in each (phase, generation):
  ``end_s`` when its last partition applied it, ``kept`` whether it is in the final lineage (False:
  rolled back or lost to a restart), ``workers`` the live workers that computed it, ``gap_s`` the time
  since the previous kept clock (NaN when not kept).
* ``progress`` — clocks done over time: a row per completion, plus one per roll-back/restart (the
  count drops to the state it restarted from).
* ``evictions`` — one row per eviction event: schedule (``warned_s``, ``terminate_s``), what the
  controller did (``noticed_s`` poll, ``planned``: the recovery plan's kind, ``recovery``: what
  happened — end_of_life_flush | stateless | effective_failure | checkpoint_rollback), the clock front
  at the kill and the clock restarted from (``rollback_to``, -1: none), and the measurements:
  ``lost_clocks``, ``iter_s`` (median iteration before), ``blip_s`` (the longest iteration gap around
  the event minus the normal one), ``recover_s`` (kill → the front is regained; 0 if it never dropped),
  ``restart_s`` (checkpoint: kill → the new processes are ready), and the simulator's prediction
  (``pred_*``, added by the prediction).
* ``checkpoints`` — each requested checkpoint: clock, request and completion times (NaN: abandoned).
* ``epochs`` — every configuration the controller published (stage, workers, partition servers).
* ``prediction`` — the simulator's predicted clocks-done curve for the same schedule (added by the
  prediction).
"""

from __future__ import annotations

import pandas as pd
from clustertwin.scenarios.results import RunResult, check_contract, contract_frame
from clustertwin.scenarios.spot_results import SPOT_TABLES

RUN_TABLES: dict[str, dict[str, str]] = {
    "iterations": {
        "phase": "int64",
        "gen": "int64",
        "clock": "int64",
        "end_s": "float64",
        "kept": "bool",
        "workers": "int64",
        "gap_s": "float64",
    },
    "progress": {
        "time_s": "float64",
        "clocks_done": "int64",
        "phase": "int64",
        "gen": "int64",
        "event": "str",
    },
    "evictions": {
        "event": "int64",
        "processes": "str",
        "warned_s": "float64",
        "noticed_s": "float64",
        "terminate_s": "float64",
        "killed_s": "float64",
        "warning_s": "float64",
        "stage_before": "int64",
        "workers_before": "int64",
        "active_ps": "str",
        "planned": "str",
        "recovery": "str",
        "front_clock": "int64",
        "rollback_to": "int64",
        "lost_clocks": "int64",
        "iter_s": "float64",
        "blip_s": "float64",
        "recover_s": "float64",
        "restart_s": "float64",
    },
    "checkpoints": {"phase": "int64", "clock": "int64", "requested_s": "float64", "done_s": "float64"},
    "epochs": {
        "phase": "int64",
        "epoch": "int64",
        "time_s": "float64",
        "stage": "int64",
        "workers": "int64",
        "servers": "str",
        "stop": "bool",
    },
}

PREDICTED_EVICTION_COLUMNS = {
    "pred_recovery": "str",
    "pred_stall_s": "float64",
    "pred_lost_clocks": "float64",
    "pred_recover_s": "float64",
}

SPOT_REAL_TABLES: dict[str, dict[str, str]] = {
    **RUN_TABLES,
    "evictions": {**RUN_TABLES["evictions"], **PREDICTED_EVICTION_COLUMNS},
    "prediction": {
        "time_s": "float64",
        "clock": "float64",
        "clocks_per_s": "float64",
        "stage": "int64",
        "event": "str",
    },
}


def to_frame(name: str, rows: list[dict]) -> pd.DataFrame:
    """Rows of table ``name`` with exactly the contract's columns and dtypes (the prediction's included)."""
    return contract_frame(SPOT_REAL_TABLES[name], rows)


def run_frame(name: str, rows: list[dict]) -> pd.DataFrame:
    """Rows of the runtime's table ``name`` (:data:`RUN_TABLES`), before the prediction is added."""
    return contract_frame(RUN_TABLES[name], rows)


def check_spot_real_tables(result: RunResult) -> None:
    """Check a real spot run's tables, its prediction's included, against :data:`SPOT_REAL_TABLES`."""
    check_contract(result, SPOT_REAL_TABLES, "real spot")


def spot_real_metrics(result: RunResult) -> dict[str, float]:
    """Flat numbers for summary.json: progress, losses and blips, real vs the simulator's prediction."""
    ev = result.tables["evictions"]
    info = result.info
    out = {
        "final_clock": float(info["final_clock"]),
        "predicted_final_clock": float(info["predicted_final_clock"]),
        "clocks_per_s_initial": float(info["clocks_per_s_initial"]),
        "final_loss": float(info["final_loss"]),
        "max_abs_diff_vs_reference": float(info["max_abs_diff_vs_reference"]),
        "evictions": float(len(ev)),
        "lost_clocks": float(ev["lost_clocks"].sum()),
        "predicted_lost_clocks": float(ev["pred_lost_clocks"].sum()),
        "recover_s": float(ev["recover_s"].sum()),
        "predicted_recover_s": float(ev["pred_recover_s"].sum()),
        "max_blip_s": float(ev["blip_s"].max()) if len(ev) else 0.0,
        "migrations": float(info.get("migrations", 0)),
    }
    return out


# A market-driven real run (``real.market: true``): the simulator's tables, in market seconds and work
# units, and the runtime's measurements in real seconds (``recoveries``: the fixed-schedule ``evictions``
# contract, one row per warned and killed allocation, releases included).
MARKET_REAL_TABLES: dict[str, dict[str, str]] = {
    **SPOT_TABLES,
    "iterations": RUN_TABLES["iterations"],
    "recoveries": {**RUN_TABLES["evictions"], "reason": "str"},  # evicted | released
    "checkpoints": RUN_TABLES["checkpoints"],
    "epochs": RUN_TABLES["epochs"],
}


def check_market_real_tables(result: RunResult) -> None:
    """Check a market-driven real run's tables against :data:`MARKET_REAL_TABLES`."""
    check_contract(result, MARKET_REAL_TABLES, "market-driven real spot")


def market_real_metrics(result: RunResult) -> dict[str, float]:
    """What a market-driven real run adds to the simulation's metrics: the runtime's own figures."""
    rec = result.tables["recoveries"]
    info = result.info
    return {
        "final_clock": float(info["final_clock"]),
        "final_loss": float(info["final_loss"]),
        "max_abs_diff_vs_reference": float(info["max_abs_diff_vs_reference"]),
        "lost_clocks": float(rec["lost_clocks"].sum()),
        "migrations": float(info.get("migrations", 0)),
        "acquisitions": float(len(result.tables["acquisitions"])),
        "max_stage": float(result.tables["progress"]["stage"].max()),
    }
