"""Column contract of the FlexRR event tables (simulation now; the real runtime writes the same).

Times are seconds from the start of the run; items are global item indices (worker w owns a contiguous
range); iterations are numbered from 0.
"""

from __future__ import annotations

import pandas as pd
from clustertwin.scenarios.results import RunResult, check_contract

FLEXRR_TABLES: dict[str, dict[str, str]] = {
    # One row per worker per iteration.
    "iterations": {
        "worker": "int64",
        "machine": "int64",
        "iteration": "int64",
        "start_s": "float64",  # the SSP gate let it start
        "own_done_s": "float64",  # its unassigned own items were done (cancels sent)
        "end_s": "float64",  # all its items committed, reassigned ones included
        "items": "int64",  # items it owns per iteration
        "items_reassigned": "int64",  # of those, committed by helpers
    },
    # One row per committed range: every item of every (owner, iteration) exactly once.
    "commits": {
        "owner": "int64",
        "iteration": "int64",
        "start_item": "int64",
        "end_item": "int64",
        "by": "int64",
        "kind": "str",  # own | help | reclaimed
        "time_s": "float64",
    },
    # One row per control message (empty when the scenario sets record_messages: false).
    "messages": {
        "kind": "str",  # ProgressReport | DoThis | BegunHelping | HelpCompleted | CancelHelp | CancelAck
        "src": "int64",
        "dst": "int64",
        "sent_s": "float64",
        "arrived_s": "float64",
        "iteration": "int64",  # -1: not carried by this kind
        "start_item": "int64",  # DoThis only, else -1
        "end_item": "int64",
    },
}


def check_flexrr_tables(result: RunResult) -> None:
    """Check a FlexRR run's tables against :data:`FLEXRR_TABLES`."""
    check_contract(result, FLEXRR_TABLES, "FlexRR")


def frame(rows: list[tuple], name: str) -> pd.DataFrame:
    """Rows (in contract column order) as a DataFrame with the contract's dtypes."""
    columns = FLEXRR_TABLES[name]
    df = pd.DataFrame.from_records(rows, columns=list(columns))
    return df.astype({c: ("object" if d == "str" else d) for c, d in columns.items()})
