"""The column contract of PipeDream-level event tables (simulation now; the real runtime writes the
same ``ops`` columns). Times are seconds from the start of the run.

``ops``: one row per executed op —
  ``device`` (int) the device that ran it; ``worker`` (int) index of its op list in the schedule;
  ``stage`` (int) the model chunk (pipeline stage; with interleaving a device holds several);
  ``replica`` (int) which replica of the stage; ``kind`` (str) ``F`` forward, ``B`` backward,
  ``W`` blocking weight update (a flush), ``send_act``/``send_grad`` a transfer leaving ``device``,
  ``allreduce`` a stage's gradient all-reduce; ``microbatch`` (int, -1: none); ``version`` (int) the
  weight version an F/B used or a W/all-reduce created (-1 for transfers); ``start_s``, ``end_s``;
  ``bytes`` (float) moved by a transfer or all-reduce (0 for compute).
``devices``: one row per device — ``device``, ``stages`` (str, e.g. ``"0"`` or ``"1,5"``),
  ``busy_s`` (compute seconds), ``peak_memory_bytes``, ``peak_stashes`` (most microbatches stashed at
  once), ``peak_versions`` (most weight versions alive at once), ``memory_capacity_bytes``.
``stages``: one row per stage — ``stage``, ``first_layer``, ``last_layer`` (profile positions after
  coarsening), ``replicas``, ``forward_s``, ``backward_s`` (per microbatch on a speed-1 device),
  ``parameter_bytes``.
"""

from __future__ import annotations

from clustertwin.scenarios.results import RunResult, check_contract

PIPEDREAM_TABLES: dict[str, dict[str, str]] = {
    "ops": {
        "device": "int64",
        "worker": "int64",
        "stage": "int64",
        "replica": "int64",
        "kind": "str",
        "microbatch": "int64",
        "version": "int64",
        "start_s": "float64",
        "end_s": "float64",
        "bytes": "float64",
    },
    "devices": {
        "device": "int64",
        "stages": "str",
        "busy_s": "float64",
        "peak_memory_bytes": "float64",
        "peak_stashes": "int64",
        "peak_versions": "int64",
        "memory_capacity_bytes": "float64",
    },
    "stages": {
        "stage": "int64",
        "first_layer": "int64",
        "last_layer": "int64",
        "replicas": "int64",
        "forward_s": "float64",
        "backward_s": "float64",
        "parameter_bytes": "float64",
    },
}


def check_pipedream_tables(result: RunResult) -> None:
    """Check a PipeDream run's tables against :data:`PIPEDREAM_TABLES`."""
    check_contract(result, PIPEDREAM_TABLES, "PipeDream")
