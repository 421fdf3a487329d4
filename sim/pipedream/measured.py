"""A real run's measured profile (its ``layers`` table) as the simulator's input: the profile the
planner sees and the per-stage costs the op-level executor runs.

The costs are those of the real runtime (``runtime.pipedream.distributed``): a stage's forward and
backward are its layers' summed, or the stage's own when the run timed it whole (``chunks``); a stage
stashes its input and what its layers' forwards leave allocated until their backwards (``held_bytes``);
every backward but the first of an update adds its gradient into the accumulator (``accumulate_s``,
measured as the runtime adds; ``update_s`` for run folders that lack it), and every ``W`` is one SGD
step of the stage's weights (``update_s``) after, on a replicated stage, the replicas' all-reduce,
priced by the link table's measured collective (``collective_table``).

A run folder simulated as a scenario's profile (``clustertwin run SCENARIO --set model.profile=RUN_DIR``)
also takes the rest of what the run measured (``RunMeasurements``, chosen by the scenario's
``model.measured``): the probed link and all-reduce bus bandwidth, and per run of layers the stage times
its ranks measured inside the run and the slowdown of that compute while a transfer runs. These are
keyed by the stage's layers, so a plan whose stages are the run's gets back the run's own simulation
and a stage the run did not hold sums its layers (and has no slowdown).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from clustertwin.policies.pipedream.partition import StagePlan
from clustertwin.sim.pipedream.model import ChunkCost, Network
from clustertwin.traces.pipedream_profile import Layer, ModelProfile

LAYERS_FILE = "layers.parquet"
CHUNKS_FILE = "chunks.parquet"
STAGES_FILE = "stages.parquet"
STAGE_TIMES_FILE = "stage_times.parquet"
SUMMARY_FILE = "summary.json"


def is_run_folder(path: str | Path) -> bool:
    """Whether ``path`` is a real run's folder holding a measured profile."""
    return (Path(path) / LAYERS_FILE).exists()


def read_layers(path: str | Path) -> pd.DataFrame:
    """The ``layers`` table of a run folder."""
    return pd.read_parquet(Path(path) / LAYERS_FILE)


def read_chunks(path: str | Path) -> pd.DataFrame | None:
    """The ``chunks`` table of a run folder (its stages timed whole), if it has one."""
    file = Path(path) / CHUNKS_FILE
    return pd.read_parquet(file) if file.exists() else None


def planner_profile(layers: pd.DataFrame, batch_size: int, name: str = "measured") -> ModelProfile:
    """PipeDream's profile of a chain (T_l, a_l = output bytes, w_l) from a ``layers`` table."""
    rows = layers.sort_values("layer")
    out = tuple(
        Layer(
            f"node{int(r.layer) + 1}",
            str(r.description),
            r.forward_s,
            r.backward_s,
            r.output_bytes,
            r.parameter_bytes,
        )
        for r in rows.itertuples(index=False)
    )
    return ModelProfile(name, out, tuple(float(v) for v in rows["output_bytes"]), batch_size)


def measured_costs(
    layers: pd.DataFrame,
    stages: Sequence[StagePlan],
    batch_microbatches: int,
    chunks: pd.DataFrame | None = None,
    in_run: Mapping[int, tuple[float, float]] | None = None,
) -> list[ChunkCost]:
    """Per-stage costs of one microbatch for the real runtime (see the module docstring). A stage in
    ``in_run`` (stage index -> forward and backward seconds timed inside the run, ``stage_compute``) takes
    those; else one that ``chunks`` (a run's ``chunks`` table) timed whole takes its forward and backward
    from there, as the runtime runs it; any other sums its layers'."""
    rows = layers.sort_values("layer").reset_index(drop=True)
    whole = {}
    if chunks is not None:
        whole = {
            (int(r.first_layer), int(r.last_layer)): (float(r.forward_s), float(r.backward_s))
            for r in chunks.itertuples(index=False)
        }
    in_run = in_run or {}
    accumulate = (batch_microbatches - 1) / batch_microbatches
    add_column = "accumulate_s" if "accumulate_s" in rows.columns else "update_s"
    costs = []
    for i, st in enumerate(stages):
        group = rows.iloc[st.first : st.last + 1]
        update = float(group["update_s"].sum())
        add = float(group[add_column].sum())
        forward, backward = in_run.get(
            i,
            whole.get(
                (st.first, st.last), (float(group["forward_s"].sum()), float(group["backward_s"].sum()))
            ),
        )
        costs.append(
            ChunkCost(
                forward_s=forward,
                backward_s=backward + accumulate * add,
                parameter_bytes=float(group["parameter_bytes"].sum()),
                activation_bytes=float(group["held_bytes"].sum()),
                input_bytes=float(rows["output_bytes"].iloc[st.first - 1]) if st.first > 0 else 0.0,
                output_bytes=float(group["output_bytes"].iloc[-1]) if i + 1 < len(stages) else 0.0,
                update_s=update,
            )
        )
    return costs


def collective_table(probes: Iterable[Mapping[str, float]]) -> tuple[tuple[int, float], ...]:
    """``Network.collective`` from gradient-synchronisation probes (``runtime.pipedream.probe.probe_sync``
    rows: ``chunk``, ``members``, ``bytes``, ``seconds``, one per member of each replicated chunk): per
    group size, the bus bandwidth 2(r−1)/r · Σ bytes / Σ seconds over its chunks, each chunk's time the
    slowest member's (a collective ends when its last member does), so that the ring formula gives back
    the measured time at the measured size."""
    slowest: dict[float, tuple[int, float, float]] = {}
    for p in probes:
        members, seconds = int(p["members"]), float(p["seconds"])
        old = slowest.get(p["chunk"])
        if old is None or seconds > old[2]:
            slowest[p["chunk"]] = (members, float(p["bytes"]), seconds)
    sums: dict[int, list[float]] = {}
    for members, nbytes, seconds in slowest.values():
        total = sums.setdefault(members, [0.0, 0.0])
        total[0] += 2 * (members - 1) / members * nbytes
        total[1] += seconds
    return tuple(sorted((r, moved / max(t, 1e-12)) for r, (moved, t) in sums.items() if moved > 0))


def stage_compute(
    times: pd.DataFrame,
) -> tuple[dict[int, tuple[float, float]], list[tuple[float, float]]]:
    """From one plan's rows of a run's ``stage_times`` table: per stage, the forward and backward seconds
    timed inside the run (the mean over the devices that hold it), and per stage (s_F, s_B), the
    slowdown of its forward and backward while a transfer runs (traffic over alone, 0 where nothing was
    sent, never below 0: a transfer does not speed compute up), ``simulate``'s ``transfer_slowdown``."""
    means = times.groupby("stage")[
        ["forward_s", "backward_s", "forward_traffic_s", "backward_traffic_s"]
    ].mean()
    in_run = {int(c): (float(r.forward_s), float(r.backward_s)) for c, r in means.iterrows()}
    slowdown = []
    for c in range(int(means.index.max()) + 1 if len(means) else 0):
        if c not in means.index:
            slowdown.append((0.0, 0.0))
            continue
        r = means.loc[c]
        pair = []
        for kind in ("forward", "backward"):
            ratio = r[f"{kind}_traffic_s"] / r[f"{kind}_s"] - 1.0 if r[f"{kind}_s"] > 0 else 0.0
            pair.append(max(float(ratio), 0.0) if ratio == ratio else 0.0)
        slowdown.append((pair[0], pair[1]))
    return in_run, slowdown


def probed_network(
    latency_s: float, bandwidth_Bps: float, collective: tuple[tuple[int, float], ...]
) -> Network:
    """A real run's network: every transfer over its one probed link, all-reduces at the probed bus
    bandwidth per group size (the run's processes share one host)."""
    return Network(
        intra_bandwidth=bandwidth_Bps,
        intra_latency=latency_s,
        inter_bandwidth=bandwidth_Bps,
        inter_latency=latency_s,
        collective=collective,
    )


Span = tuple[int, int]  # a stage's (first layer, last layer)


@dataclass(frozen=True)
class RunMeasurements:
    """What a real run measured beyond its profile, keyed so that any plan can use it: the probed link,
    the gradient all-reduce's bus bandwidth per group size, and per run of layers (``Span``) the
    forward and backward seconds its ranks timed inside the run and their slowdown (s_F, s_B) while a
    transfer runs (``stage_compute``)."""

    latency_s: float
    bandwidth_Bps: float
    collective: tuple[tuple[int, float], ...]
    in_run: Mapping[Span, tuple[float, float]]
    slowdown: Mapping[Span, tuple[float, float]]

    def network(self) -> Network:
        """Every transfer over the probed link (the run's processes share one host)."""
        return probed_network(self.latency_s, self.bandwidth_Bps, self.collective)

    def stage_in_run(self, stages: Sequence[StagePlan]) -> dict[int, tuple[float, float]]:
        """``measured_costs``'s ``in_run`` for ``stages``: those the run's ranks timed."""
        spans = [(st.first, st.last) for st in stages]
        return {i: self.in_run[span] for i, span in enumerate(spans) if span in self.in_run}

    def stage_slowdown(self, stages: Sequence[StagePlan]) -> list[tuple[float, float]] | None:
        """``simulate``'s ``transfer_slowdown`` for ``stages`` (none where the run measured none)."""
        if not self.slowdown:
            return None
        return [self.slowdown.get((st.first, st.last), (0.0, 0.0)) for st in stages]


def read_run(path: str | Path) -> RunMeasurements:
    """A run folder's measurements (see ``RunMeasurements``). A run of one device probed no link
    (free transfers); the plan's all-reduce measurement of a group size comes before the data-parallel
    baseline's; the plan's stage times before the baseline's for the same layers."""
    folder = Path(path)
    facts = json.loads((folder / SUMMARY_FILE).read_text())["run"]
    collective = {}
    for prefix in ("ddp_sync_busbw_gbs_r", "sync_busbw_gbs_r"):  # the plan's last: it wins
        for key, value in facts.items():
            if key.startswith(prefix):
                collective[int(key.removeprefix(prefix))] = float(value) * 1e9
    in_run: dict[Span, tuple[float, float]] = {}
    slowdown: dict[Span, tuple[float, float]] = {}
    times_file = folder / STAGE_TIMES_FILE
    if times_file.exists():
        times = pd.read_parquet(times_file)
        last_layer = len(read_layers(folder)) - 1
        stages = pd.read_parquet(folder / STAGES_FILE).sort_values("stage")
        spans = {
            "plan": {int(r.stage): (int(r.first_layer), int(r.last_layer)) for r in stages.itertuples()},
            "ddp": {0: (0, last_layer)},
        }
        for plan in ("ddp", "plan"):
            mine = times[times["plan"] == plan]
            if not len(mine):
                continue
            inside, slow = stage_compute(mine)
            for stage, seconds in inside.items():
                in_run[spans[plan][stage]] = seconds
                slowdown[spans[plan][stage]] = slow[stage]
    return RunMeasurements(
        latency_s=float(facts.get("link_latency_us", 0.0)) * 1e-6,
        bandwidth_Bps=float(facts.get("link_bandwidth_gbs", math.inf)) * 1e9,
        collective=tuple(sorted(collective.items())),
        in_run=in_run,
        slowdown=slowdown,
    )
