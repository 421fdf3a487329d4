"""From the launcher's record and the processes' logs to the run's tables (``scenarios/spot_real_results``).

A clock is complete in a (phase, generation) when every partition logged applying it; its time is the
last of those. The final lineage — what the run's final model is made of — is each segment's clocks
below the clock the next segment started from (a roll-back's target, a restart's checkpoint), and every
clock of the last segment. Measurements per eviction are read off that lineage (see the contract).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict

import numpy as np
import pandas as pd
from clustertwin.runtime.spot.launch import JobRecord
from clustertwin.scenarios.spot_real_results import run_frame

WINDOW_S = 3.0  # how long before/after an eviction the normal iteration time is measured


def read_logs(rec: JobRecord) -> list[dict]:
    rows = []
    for path in sorted(rec.log_dir.glob("*.jsonl")):
        phase = int(path.name.split("-", 1)[0])
        for line in path.read_text().splitlines():
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:  # a SIGKILL mid-write can leave half a line: ignore it
                    continue
                row["phase"] = phase
                rows.append(row)
    return rows


def iterations(rec: JobRecord, logs: list[dict]) -> pd.DataFrame:
    applied: dict[tuple[int, int, int], list[float]] = defaultdict(list)
    workers: dict[tuple[int, int, int], int] = {}
    for r in logs:
        key = (r["phase"], r.get("g", 0), r.get("c", -1))
        if r["ev"] == "apply":
            applied[key].append(r["t"])
        elif r["ev"] == "step":
            workers[key] = r["n"]
    # segment starts: (phase, gen) -> the clock it began at
    starts = {(p["phase"], 0): p["start_clock"] for p in rec.phases}
    gen = defaultdict(int)
    for e in rec.evictions:
        if e["recovery"] == "effective_failure":
            phase = _phase_at(rec, e["killed_s"])
            gen[phase] += 1
            starts[(phase, gen[phase])] = e["rollback_to"]
    order = sorted(starts, key=lambda s: (s[0], s[1]))
    limit = {seg: starts[order[i + 1]] for i, seg in enumerate(order[:-1])}
    rows = []
    for (phase, g, c), times in applied.items():
        if len(times) < rec.n_partitions:
            continue
        kept = c < limit.get((phase, g), rec.final_clock)
        rows.append(
            {
                "phase": phase,
                "gen": g,
                "clock": c,
                "end_s": max(times),
                "kept": kept,
                "workers": workers.get((phase, g, c), -1),
                "gap_s": math.nan,
            }
        )
    frame = (
        run_frame("iterations", rows).sort_values(["end_s", "clock"], kind="stable").reset_index(drop=True)
    )
    kept = frame[frame["kept"]].sort_values("clock")
    frame.loc[kept.index, "gap_s"] = kept["end_s"].diff().to_numpy()
    return frame


def _phase_at(rec: JobRecord, t: float) -> int:
    phase = 0
    for p in rec.phases:
        if p["ready_s"] <= t + 1e-9:
            phase = p["phase"]
    return phase


def progress(it: pd.DataFrame, rec: JobRecord) -> pd.DataFrame:
    rows = [
        {"time_s": r.end_s, "clocks_done": r.clock + 1, "phase": r.phase, "gen": r.gen, "event": "clock"}
        for r in it.itertuples()
    ]
    for e in rec.evictions:
        if e["rollback_to"] >= 0:
            rows.append(
                {
                    "time_s": e["killed_s"],
                    "clocks_done": e["rollback_to"],
                    "phase": _phase_at(rec, e["killed_s"]),
                    "gen": -1,
                    "event": e["recovery"],
                }
            )
    return run_frame("progress", rows).sort_values("time_s", kind="stable").reset_index(drop=True)


def clock_rate(it: pd.DataFrame, t_lo: float, t_hi: float) -> float:
    """Kept clocks per second completed in [t_lo, t_hi]."""
    k = it[it["kept"] & (it["end_s"] >= t_lo) & (it["end_s"] <= t_hi)].sort_values("end_s")
    if len(k) < 2:
        return math.nan
    return (len(k) - 1) / float(k["end_s"].iloc[-1] - k["end_s"].iloc[0])


def evictions(rec: JobRecord, it: pd.DataFrame, horizon: float) -> pd.DataFrame:
    kept = it[it["kept"]].sort_values("clock")
    end_of = dict(zip(kept["clock"], kept["end_s"], strict=True))
    rows = []
    evs = sorted(rec.evictions, key=lambda e: e["killed_s"])
    for i, e in enumerate(evs):
        nxt = evs[i + 1]["warned_s"] if i + 1 < len(evs) else horizon
        # the normal iteration time: gaps between consecutive completions of any lineage (clocks done
        # just before a failure are later rolled back, but they still show how fast the job ran)
        done = it.sort_values("end_s")
        window = done[(done["end_s"] >= e["warned_s"] - WINDOW_S) & (done["end_s"] < e["warned_s"])]["end_s"]
        before = window.diff().dropna()
        iter_before = float(np.median(before)) if len(before) else math.nan
        lo_after, hi_after = e["killed_s"] + WINDOW_S / 3, min(e["killed_s"] + WINDOW_S, nxt)
        after = kept[(kept["end_s"] >= lo_after) & (kept["end_s"] < hi_after)]["gap_s"]
        iter_after = float(np.nanmedian(after)) if after.notna().any() else iter_before
        around = kept[
            (kept["end_s"] >= e["warned_s"]) & (kept["end_s"] <= min(e["killed_s"] + WINDOW_S, nxt))
        ]["gap_s"]
        pair = [x for x in (iter_before, iter_after) if not math.isnan(x)]
        normal = max(pair) if pair else math.nan
        blip = float(around.max() - normal) if around.notna().any() else math.nan
        front = int(e["front_clock"])
        regain = end_of.get(front - 1, math.nan)
        recover = max(0.0, regain - e["killed_s"]) if front > 0 else 0.0
        lost = front - e["rollback_to"] if e["rollback_to"] >= 0 else 0
        rows.append(
            {
                **{
                    k: e[k]
                    for k in (
                        "event",
                        "processes",
                        "warned_s",
                        "noticed_s",
                        "terminate_s",
                        "killed_s",
                        "warning_s",
                        "stage_before",
                        "workers_before",
                        "active_ps",
                        "planned",
                        "recovery",
                        "front_clock",
                        "rollback_to",
                    )
                },
                "lost_clocks": lost,
                "iter_s": iter_before,
                "blip_s": max(blip, 0.0) if not math.isnan(blip) else blip,
                "recover_s": recover,
                "restart_s": e["restarted_s"] - e["killed_s"] if "restarted_s" in e else math.nan,
            }
        )
    return run_frame("evictions", rows)
