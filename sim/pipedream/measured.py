"""A real run's measured profile (its ``layers`` table) as the simulator's input: the profile the
planner sees and the per-stage costs the op-level executor runs.

The costs are those of the real runtime (``runtime.pipedream.distributed``): a stage stashes its input
and what its layers' forwards leave allocated until their backwards (``held_bytes``), every backward but
the first of an update adds its gradient into the accumulator (one ``update_s`` of work), and every
``W`` is one SGD step of the stage's weights (``update_s``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from clustertwin.policies.pipedream.partition import StagePlan
from clustertwin.sim.pipedream.model import ChunkCost
from clustertwin.traces.pipedream_profile import Layer, ModelProfile

LAYERS_FILE = "layers.parquet"


def is_run_folder(path: str | Path) -> bool:
    """Whether ``path`` is a real run's folder holding a measured profile."""
    return (Path(path) / LAYERS_FILE).exists()


def read_layers(path: str | Path) -> pd.DataFrame:
    """The ``layers`` table of a run folder."""
    return pd.read_parquet(Path(path) / LAYERS_FILE)


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
    layers: pd.DataFrame, stages: Sequence[StagePlan], batch_microbatches: int
) -> list[ChunkCost]:
    """Per-stage costs of one microbatch for the real runtime (see the module docstring)."""
    rows = layers.sort_values("layer").reset_index(drop=True)
    accumulate = (batch_microbatches - 1) / batch_microbatches
    costs = []
    for i, st in enumerate(stages):
        group = rows.iloc[st.first : st.last + 1]
        update = float(group["update_s"].sum())
        costs.append(
            ChunkCost(
                forward_s=float(group["forward_s"].sum()),
                backward_s=float(group["backward_s"].sum()) + accumulate * update,
                parameter_bytes=float(group["parameter_bytes"].sum()),
                activation_bytes=float(group["held_bytes"].sum()),
                input_bytes=float(rows["output_bytes"].iloc[st.first - 1]) if st.first > 0 else 0.0,
                output_bytes=float(group["output_bytes"].iloc[-1]) if i + 1 < len(stages) else 0.0,
                update_s=update,
            )
        )
    return costs
