"""Elastic PS scaling ([PSLD], §4.2 "scale-out/scale-in" and §5.1).

* Scale-out: when fewer than ``scale_threshold`` x (the initial number of PSs) are superior, i.e. more
  than half of the initial PSs straggle, the scheduler launches *one* more PS per invocation; its
  performance is predicted as the mean of the superior PSs' (the notes' reading of "the average
  performance of the existing PSs", so that the new PS gets load), and Algorithm 3 is rerun.
* Scale-in is implicit: a PS that receives no blocks is essentially removed. A PS announcing DEL_SERVER
  is removed explicitly and its blocks are redistributed by Algorithm 3.
"""

from __future__ import annotations

from collections.abc import Sequence

from clustertwin.policies.psld.profiling import PerfModel, ServerModel


def needs_scale_out(superior: Sequence[int], initial_servers: int, scale_threshold: float) -> bool:
    """Algorithm 1's test |Superior| < ScaleThreshold (as a fraction of the initial PS count)."""
    return len(superior) < scale_threshold * initial_servers


def new_server_model(model: PerfModel, superior: Sequence[int]) -> ServerModel:
    """The predicted performance of a freshly added PS."""
    return ServerModel.average(model[r] for r in superior)


def unloaded(owners: Sequence[int], servers: Sequence[int]) -> tuple[int, ...]:
    """Servers that hold no block: scaled in."""
    held = set(owners)
    return tuple(r for r in servers if r not in held)
