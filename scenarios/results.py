"""What a run returns, and the column contract of the Gavel event tables.

Both executors (simulation and the real runtime) produce these tables, so one analysis path serves
both and sim-vs-real is a join on ``job_id``. Times are seconds from the start of the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

# Table name -> column -> dtype. "str" means any pandas string dtype (str, or object holding strings).
GAVEL_TABLES: dict[str, dict[str, str]] = {
    "jobs": {
        "job_id": "int64",
        "job_type": "str",
        "scale_factor": "int64",
        "weight": "float64",
        "arrival_s": "float64",
        "first_start_s": "float64",  # NaN: never started
        "completion_s": "float64",  # NaN: unfinished when the run ended
        "total_steps": "float64",
        "steps_done": "float64",
        "slo_deadline_s": "float64",  # inf: no SLO
        "in_window": "bool",  # measured by the steady-state metrics
    },
    # One row per job per round it ran in.
    "rounds": {
        "round": "int64",
        "start_s": "float64",
        "end_s": "float64",
        "job_id": "int64",
        "worker_type": "str",
        "num_gpus": "int64",
        "consolidated": "bool",  # on the fewest servers its GPU count allows
        "renewed": "bool",  # kept last round's GPUs: lease renewed, no checkpoint/restore
        "steps": "float64",
        "shared_with": "int64",  # the other job on the same GPUs (space sharing); -1: alone
    },
    "events": {
        "time_s": "float64",
        "kind": "str",
        "job_id": "int64",  # -1: not about one job
        "detail": "str",
    },
}


@dataclass
class RunResult:
    """Event tables by name, plus scalar facts about the run itself (wall time, rounds solved, ...)."""

    tables: dict[str, pd.DataFrame]
    info: dict[str, float | int | str] = field(default_factory=dict)


def check_tables(result: RunResult) -> None:
    """Check a Gavel run's tables against :data:`GAVEL_TABLES` (see :func:`check_contract`)."""
    check_contract(result, GAVEL_TABLES, "Gavel")


def contract_frame(columns: dict[str, str], rows: list[dict]) -> pd.DataFrame:
    """``rows`` (dicts) as a table with exactly a contract's ``columns`` and dtypes, "str" columns as
    text; an empty table keeps the columns."""
    frame = pd.DataFrame(rows, columns=list(columns))
    for column, dtype in columns.items():
        frame[column] = frame[column].astype(str if dtype == "str" else dtype)
    return frame


def check_contract(result: RunResult, contract: dict[str, dict[str, str]], kind: str) -> None:
    """Raise ``ValueError`` naming every missing table, missing column or column of the wrong dtype."""
    problems = []
    for name, columns in contract.items():
        table = result.tables.get(name)
        if table is None:
            problems.append(f"table {name!r} is missing")
            continue
        for column, dtype in columns.items():
            if column not in table.columns:
                problems.append(f"{name}.{column} is missing")
            elif not _has_dtype(table[column], dtype):
                problems.append(f"{name}.{column} has dtype {table[column].dtype}, expected {dtype}")
    if problems:
        raise ValueError(f"{kind} run result breaks the table contract: " + "; ".join(problems))


def _has_dtype(column: pd.Series, dtype: str) -> bool:
    if dtype == "str":
        return pd.api.types.is_string_dtype(column)
    return column.dtype == dtype
