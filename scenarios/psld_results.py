"""Column contract of the PSLD event tables (simulation now; a real runtime writes the same).

Times are seconds from the start of the run; PSs are numbered 0..servers+standby-1; iterations from 0.
"""

from __future__ import annotations

import pandas as pd
from clustertwin.scenarios.results import RunResult, check_contract

PSLD_TABLES: dict[str, dict[str, str]] = {
    # One row per synchronous iteration (all workers).
    "iterations": {
        "iteration": "int64",
        "start_s": "float64",  # first worker started its forward pass
        "end_s": "float64",  # last worker pulled its last block
        "map_version": "int64",  # assignment in force (0 = initial)
        "servers_loaded": "int64",  # PSs holding at least one block
    },
    # One row per applied reassignment (scale-out and DEL_SERVER included).
    "reassignments": {
        "time_s": "float64",  # all workers blocked (barrier)
        "iteration": "int64",  # k*: first iteration on the new map
        "action": "str",  # reassign | scale_out | remove
        "variation": "float64",  # speed variation that triggered it
        "superior": "str",  # space-separated PS ids
        "moved_blocks": "int64",
        "moved_bytes": "float64",  # parameter bytes whose owner changed
        "added": "int64",  # PS added by scale-out, else -1
        "predicted_before_s": "float64",
        "predicted_after_s": "float64",
        "suspended_s": "float64",  # barrier to resume
    },
    # One row per PS per assignment version.
    "loads": {
        "map_version": "int64",
        "time_s": "float64",
        "server": "int64",
        "bytes": "float64",
        "blocks": "int64",
    },
    # One row per PS per reporting period: the fitted profile the scheduler saw.
    "reports": {
        "report": "int64",
        "time_s": "float64",
        "server": "int64",
        "alpha_s_per_byte": "float64",
        "beta_s": "float64",
        "pred_ref_s": "float64",  # Pred_mean at the reference load model_size / #PS
        "superior": "bool",
        "variation": "float64",
    },
    # One row per straggler step change applied, and per DEL_SERVER.
    "changes": {
        "time_s": "float64",
        "server": "int64",
        "what": "str",  # bandwidth | cpu | remove
        "value": "float64",  # Gbit/s | cores | 1 removed, 0 ignored (not an active PS, or the last one)
    },
}


def check_psld_tables(result: RunResult) -> None:
    """Check a PSLD run's tables against :data:`PSLD_TABLES`."""
    check_contract(result, PSLD_TABLES, "PSLD")


def frame(rows: list[tuple], name: str) -> pd.DataFrame:
    """Rows (in contract column order) as a DataFrame with the contract's dtypes."""
    columns = PSLD_TABLES[name]
    df = pd.DataFrame.from_records(rows, columns=list(columns))
    return df.astype({c: ("object" if d == "str" else d) for c, d in columns.items()})
