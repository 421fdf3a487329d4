"""The eviction driver's schedule: when each transient process is warned and when it is killed.

Two sources (``scenarios/spot_real_schema.py``): an explicit list, or a spot-price trace replayed
time-compressed. For a trace, transient process ``t{i}`` holds a bid ``bids[i]`` from ``start``; it is
evicted at the first price change above its bid (the EC2 rule of seed 003 §2.1: a granted bid cannot
change, the instance goes when the price rises above it), ``real_s_per_trace_h`` real seconds per trace
hour, with the trace's warning. Evictions at the same trace instant form one event (one market move
evicts every bid below it at once, like an allocation).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from clustertwin.scenarios.spot_real_schema import SpotRealScenario

from clustertwin.errors import InputError


@dataclass(frozen=True)
class EvictionEvent:
    """Warn ``processes`` at ``warn_s``, SIGKILL them at ``kill_s`` (real seconds from the job's start)."""

    index: int
    warn_s: float
    kill_s: float
    processes: tuple[str, ...]

    @property
    def warning_s(self) -> float:
        return self.kill_s - self.warn_s


def schedule(scenario: SpotRealScenario) -> list[EvictionEvent]:
    """The scenario's evictions, in kill order."""
    if scenario.trace is not None:
        return trace_schedule(scenario)
    events = [
        EvictionEvent(i, ev.at_s - ev.warning_s, ev.at_s, tuple(ev.processes))
        for i, ev in enumerate(scenario.evictions)
    ]
    return sorted(events, key=lambda e: (e.kill_s, e.index))


def trace_schedule(scenario: SpotRealScenario) -> list[EvictionEvent]:
    """Evictions from the replayed price trace (see the module docstring)."""
    from clustertwin.traces.spot_prices import load_bundled_or_path, select

    spec = scenario.trace
    where = f"{scenario.source}: field trace"
    table = select(
        load_bundled_or_path(spec.file), [spec.instance_type], None if spec.zone is None else [spec.zone]
    )
    if table.empty:
        raise InputError(f"{where}.instance_type", f"no prices for {spec.instance_type} zone {spec.zone}")
    zone = spec.zone or sorted(table["zone"].unique())[0]
    rows = table[table["zone"] == zone].sort_values("timestamp", kind="stable")
    start = rows["timestamp"].iloc[0] if spec.start is None else pd.Timestamp(spec.start, tz="UTC")
    if start < rows["timestamp"].iloc[0] or start > rows["timestamp"].iloc[-1]:
        raise InputError(f"{where}.start", f"{start} is outside the trace ({rows['timestamp'].iloc[0]} …)")
    at_start = float(rows.loc[rows["timestamp"] <= start, "price"].iloc[-1])
    for i, bid in enumerate(spec.bids):
        if bid < at_start:
            raise InputError(
                f"{where}.bids[{i}]",
                f"bid {bid} is below the price at start ({at_start}): the request would never be granted",
            )
    later = rows[rows["timestamp"] > start]
    hours = (later["timestamp"] - start).dt.total_seconds().to_numpy() / 3600.0
    prices = later["price"].to_numpy()
    by_time: dict[float, list[str]] = {}
    for i, bid in enumerate(spec.bids):
        above = (prices > bid).nonzero()[0]
        if len(above) == 0:
            continue
        kill = float(hours[above[0]] * spec.real_s_per_trace_h)
        if kill >= scenario.duration_s:
            continue
        if kill < spec.warning_s:
            raise InputError(
                f"{where}.bids",
                f"t{i}'s bid {bid} is exceeded {kill:.2f} s into the run, before its {spec.warning_s} s"
                " warning could be given; start later or lower trace.warning_s",
            )
        by_time.setdefault(kill, []).append(f"t{i}")
    return [
        EvictionEvent(k, t - spec.warning_s, t, tuple(names))
        for k, (t, names) in enumerate(sorted(by_time.items()))
    ]
