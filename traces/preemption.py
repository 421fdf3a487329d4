"""Preemption / availability trace loaders (formats of ``/work/shared/data/preemption/``, README §4).

Each loader returns a pandas table with a documented column contract; malformed input raises
:class:`InputError` naming ``file:line: column``.

* :func:`load_availability_log` — training_on_a_dime's text log (AWS spot / GCP preemptible probing):
  ``[ts] Created instance <id> with N GPU(s) of type T in zone Z`` etc. Columns: ``timestamp`` (UTC),
  ``event`` (created | running | preempted | creation_failed | deleted), ``instance_id`` ("" when none),
  ``gpus`` (-1 when unknown), ``gpu_type``, ``zone``.
* :func:`load_slot_availability` — skypilot-spot-strategy JSON ``{"metadata": {"gap_seconds": g},
  "data": [0|1, ...]}`` where 1 means preempted. Columns: ``start_s``, ``end_s``, ``available`` (bool,
  the negation of the slot's value).
* :func:`load_node_events` — Bamboo's ``offset_ms,add|remove,node`` (no header, CRLF allowed; the data
  README calls the first column ``delta_ms``, but it is the offset from the trace start: it never
  decreases and its last value, 40.9 M ms = 11.4 h, is the trace length). Columns: ``time_s``,
  ``event`` (add | remove), ``node``.
* :func:`load_instance_counts` — a running-instance count series: Bamboo ``gcloud`` rows
  ``YYYY-MM-DD, HH:MM:SS, count`` or ``doc-data`` rows ``t,count`` (t in seconds, or hours with
  ``time_unit="h"``). Columns: ``time_s`` (from the first row), ``count``.

:func:`preemption_times` turns a log into per-instance lifetimes, the input the synthetic generator
fits preemption rates from.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Literal

import pandas as pd
from clustertwin.traces.files import read_json, read_text

from clustertwin.errors import InputError

_TS = r"\[(?P<ts>[^\]]+)\]"
_LOG_LINES = (
    (
        "created",
        re.compile(
            _TS
            + r" Created instance (?P<id>\S+) with (?P<n>\d+) GPU\(s\) of type (?P<t>\S+) in zone (?P<z>\S+)$"
        ),
    ),
    ("running", re.compile(_TS + r" Instance (?P<id>\S+) running in zone (?P<z>\S+)$")),
    ("preempted", re.compile(_TS + r" Instance (?P<id>\S+) not running in zone (?P<z>\S+)$")),
    (
        "creation_failed",
        re.compile(_TS + r" Instance with (?P<n>\d+) GPU\(s\) of type (?P<t>\S+) creation failed"),
    ),
    ("creation_failed", re.compile(_TS + r" Instance (?P<id>\S+) creation failed$")),  # GCP logs
    ("deleted", re.compile(_TS + r" Successfully deleted instance (?P<id>\S+)")),
)


def load_availability_log(path: str | Path) -> pd.DataFrame:
    """Parse a training_on_a_dime availability log (AWS or GCP ``persistent_*.out``)."""
    path = Path(path)
    rows = []
    for lineno, line in enumerate(read_text(path).split("\n"), start=1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        match = next(((ev, m) for ev, pat in _LOG_LINES if (m := pat.match(line))), None)
        if match is None:
            raise InputError(f"{path}:{lineno}", f"unrecognised log line: {line[:80]!r}")
        event, m = match
        groups = m.groupdict()
        try:
            stamp = pd.Timestamp(groups["ts"])
        except ValueError:
            raise InputError(f"{path}:{lineno}: column 1", f"bad timestamp {groups['ts']!r}") from None
        rows.append(
            (
                stamp.tz_convert("UTC") if stamp.tzinfo else stamp.tz_localize("UTC"),
                event,
                groups.get("id") or "",
                int(groups["n"]) if groups.get("n") else -1,
                groups.get("t") or "",
                groups.get("z") or "",
            )
        )
    if not rows:
        raise InputError(str(path), "no log lines")
    frame = pd.DataFrame(rows, columns=["timestamp", "event", "instance_id", "gpus", "gpu_type", "zone"])
    frame["timestamp"] = pd.to_datetime(frame["timestamp"], utc=True)
    return frame


def preemption_times(log: pd.DataFrame) -> pd.DataFrame:
    """Per created instance: ``instance_id, gpu_type, gpus, zone, created, lifetime_s, preempted``.

    ``lifetime_s`` runs to the preemption, or to the last line of the log (censored, ``preempted`` False).
    """
    # GCP logs reuse names (instance1, ...), so walk the log in order and pair each creation with the
    # next preemption of the same name.
    end = log["timestamp"].max()
    open_: dict[str, dict] = {}
    rows = []
    for rec in log.itertuples(index=False):
        if rec.event == "created":
            if rec.instance_id in open_:
                rows.append(_lifetime(open_.pop(rec.instance_id), rec.timestamp, False))
            open_[rec.instance_id] = rec._asdict()
        elif rec.event == "preempted" and rec.instance_id in open_:
            rows.append(_lifetime(open_.pop(rec.instance_id), rec.timestamp, True))
    rows.extend(_lifetime(start, end, False) for start in open_.values())
    columns = ["instance_id", "gpu_type", "gpus", "zone", "created", "lifetime_s", "preempted"]
    return pd.DataFrame(rows, columns=columns).sort_values("created", kind="stable").reset_index(drop=True)


def _lifetime(start: dict, stop: pd.Timestamp, preempted: bool) -> tuple:
    life = (stop - start["timestamp"]).total_seconds()
    return (
        start["instance_id"],
        start["gpu_type"],
        start["gpus"],
        start["zone"],
        start["timestamp"],
        life,
        preempted,
    )


def load_slot_availability(path: str | Path) -> pd.DataFrame:
    """Parse a skypilot-spot-strategy slot trace: one 0/1 per fixed-width slot, **1 = preempted**.

    The source repository writes 1 for a slot in which its instance was preempted and 0 for one in
    which an instance could be created, and its simulator reads ``available = not trace[slot]``; the
    ``available`` column returned here is that negation.
    """
    path = Path(path)
    data = read_json(path)
    try:
        gap = float(data["metadata"]["gap_seconds"])
        slots = data["data"]
    except (KeyError, TypeError):
        raise InputError(str(path), 'expected {"metadata": {"gap_seconds": ...}, "data": [...]}') from None
    if not (math.isfinite(gap) and gap > 0):
        raise InputError(f"{path}: metadata.gap_seconds", f"must be > 0, got {gap}")
    bad = [i for i, v in enumerate(slots) if v not in (0, 1) or isinstance(v, bool)]
    if bad:
        raise InputError(f"{path}: data[{bad[0]}]", f"expected 0 or 1, got {slots[bad[0]]!r}")
    n = len(slots)
    return pd.DataFrame(
        {
            "start_s": [i * gap for i in range(n)],
            "end_s": [(i + 1) * gap for i in range(n)],
            "available": [not v for v in slots],
        }
    )


def load_node_events(path: str | Path) -> pd.DataFrame:
    """Parse a Bamboo node trace: ``offset_ms,add|remove,node`` per line, no header."""
    path = Path(path)
    rows = []
    now_ms = 0.0
    for lineno, line in enumerate(read_text(path).split("\n"), start=1):
        line = line.strip()
        if not line:
            continue
        cells = line.split(",")
        where = f"{path}:{lineno}"
        if len(cells) != 3:
            raise InputError(where, f"expected 3 columns (offset_ms,add|remove,node), found {len(cells)}")
        try:
            at_ms = float(cells[0])
        except ValueError:
            raise InputError(f"{where}: column 1", f"offset_ms is not a number: {cells[0]!r}") from None
        if not math.isfinite(at_ms) or at_ms < now_ms:
            raise InputError(
                f"{where}: column 1",
                f"offset_ms must be finite and >= the previous row's {now_ms:g}, got {cells[0]!r}",
            )
        if cells[1] not in ("add", "remove"):
            raise InputError(f"{where}: column 2", f"expected add or remove, got {cells[1]!r}")
        now_ms = at_ms
        rows.append((at_ms / 1000.0, cells[1], cells[2]))
    if not rows:
        raise InputError(str(path), "no node events")
    return pd.DataFrame(rows, columns=["time_s", "event", "node"])


def load_instance_counts(path: str | Path, time_unit: Literal["s", "h"] = "s") -> pd.DataFrame:
    """Parse a running-instance count series (Bamboo ``gcloud/*.txt`` or ``doc-data/*.csv``)."""
    path = Path(path)
    rows: list[tuple[float, int]] = []
    origin: pd.Timestamp | None = None
    scale = 3600.0 if time_unit == "h" else 1.0
    for lineno, line in enumerate(read_text(path).split("\n"), start=1):
        line = line.strip()
        if not line:
            continue
        cells = [c.strip() for c in line.split(",")]
        where = f"{path}:{lineno}"
        if len(cells) == 3:  # date, time, count
            try:
                stamp = pd.Timestamp(f"{cells[0]}T{cells[1]}", tz="UTC")
            except ValueError:
                raise InputError(f"{where}: column 1", f"bad date/time {cells[0]!r} {cells[1]!r}") from None
            origin = stamp if origin is None else origin
            t = (stamp - origin).total_seconds()
        elif len(cells) == 2:
            try:
                t = float(cells[0]) * scale
            except ValueError:
                raise InputError(f"{where}: column 1", f"time is not a number: {cells[0]!r}") from None
        else:
            raise InputError(
                where, f"expected 2 (t,count) or 3 (date,time,count) columns, found {len(cells)}"
            )
        try:
            count = int(cells[-1])
        except ValueError:
            raise InputError(
                f"{where}: column {len(cells)}", f"count is not an integer: {cells[-1]!r}"
            ) from None
        if count < 0:
            raise InputError(f"{where}: column {len(cells)}", f"count must be >= 0, got {count}")
        rows.append((t, count))
    if not rows:
        raise InputError(str(path), "no rows")
    return pd.DataFrame(rows, columns=["time_s", "count"])
