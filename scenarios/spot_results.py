"""Column contract of the spot run's event tables (``RunResult.tables``). Times are seconds from the job's
start (``info["start_timestamp"]`` gives its wall-clock time in the trace); money is USD.

* ``acquisitions`` — one row per allocation (k instances of one type, one bid, acquired together):
  ``end_reason`` ∈ evicted | released (BidBrain did not renew) | job_done | max_runtime |
  request_failed (price above the bid when the request was due) | cancelled (still pending at the end).
  ``bid`` is inf for on-demand; ``zone`` is ``on-demand`` for on-demand allocations.
* ``evictions`` — one row per provider eviction: warning at ``time_s``, termination at ``terminate_s``;
  ``recovery`` ∈ end_of_life_flush | effective_failure (AgileML stages 2/3) | stateless (stage 1) |
  checkpoint_rollback | none (still booting); ``lost_work`` = work units rolled back.
* ``bills`` — every money movement: ``kind`` ∈ charge (an hour, at its start) | refund (negative: the
  hour of a provider eviction) | settle (per-second billing) | prorate (negative: the unused part of
  the last hour when the job ends). The run's cost is the sum of ``amount_usd``.
* ``progress`` — one row per change of the work rate: ``work_done`` (work units) at ``time_s``, the new
  ``rate`` (work units per hour), live machine counts, AgileML ``stage`` (0: not AgileML), the
  cumulative number of partition ``migrations`` and the event.
* ``usage`` — machine time by billing hour: ``paid`` False for an hour refunded by an eviction (free
  compute, Proteus Fig. 10).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from clustertwin.scenarios.results import RunResult, check_contract, contract_frame

SPOT_TABLES: dict[str, dict[str, str]] = {
    "acquisitions": {
        "alloc_id": "int64",
        "instance_type": "str",
        "zone": "str",
        "count": "int64",
        "bid": "float64",
        "on_demand": "bool",
        "requested_s": "float64",
        "granted_s": "float64",  # NaN: never granted
        "ready_s": "float64",  # NaN: never ready
        "ended_s": "float64",
        "end_reason": "str",
    },
    "evictions": {
        "time_s": "float64",
        "terminate_s": "float64",
        "alloc_id": "int64",
        "instance_type": "str",
        "zone": "str",
        "count": "int64",
        "price": "float64",
        "bid": "float64",
        "recovery": "str",
        "lost_work": "float64",
    },
    "bills": {
        "time_s": "float64",
        "alloc_id": "int64",
        "kind": "str",
        "amount_usd": "float64",
        "hour_start_s": "float64",
        "on_demand": "bool",
    },
    "progress": {
        "time_s": "float64",
        "work_done": "float64",
        "rate": "float64",
        "n_reliable": "int64",
        "n_transient": "int64",
        "stage": "int64",
        "migrations": "int64",  # partition moves so far (AgileML ActivePS re-assignments)
        "event": "str",
    },
    "usage": {
        "alloc_id": "int64",
        "start_s": "float64",
        "end_s": "float64",
        "on_demand": "bool",
        "count": "int64",
        "work_rate": "float64",
        "paid": "bool",
    },
}


def acquisition_row(alloc_id: int, rec: Any) -> dict:
    """One ``acquisitions`` row from an allocation's record (``rec.alloc`` and its times and end reason),
    as both executors keep it."""
    a = rec.alloc
    return {
        "alloc_id": alloc_id,
        "instance_type": a.market[0],
        "zone": a.market[1],
        "count": a.count,
        "bid": a.bid,
        "on_demand": a.on_demand,
        "requested_s": rec.requested_s,
        "granted_s": rec.granted_s,
        "ready_s": rec.ready_s,
        "ended_s": rec.ended_s,
        "end_reason": rec.end_reason,
    }


def to_frame(name: str, rows: list[dict]) -> pd.DataFrame:
    """Rows of table ``name`` with exactly the contract's columns and dtypes."""
    return contract_frame(SPOT_TABLES[name], rows)


def check_spot_tables(result: RunResult) -> None:
    """Check a spot run's tables against :data:`SPOT_TABLES`."""
    check_contract(result, SPOT_TABLES, "spot")
