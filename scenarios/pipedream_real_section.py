"""The ``real:`` section of ``kind: pipedream`` scenarios: what ``--backend real`` trains and how, and
the ``layers`` table (the profile a real run measured) that a simulation can plan from.

The simulator ignores this section. A real run profiles ``model`` on its device, plans it with the
scenario's planner on the scenario's cluster, and runs the plan's schedule on one process per device
(gloo on CPU, NCCL on ``cuda:rank``); see ``clustertwin/pipedream_real.py``.
"""

from __future__ import annotations

import re
from typing import Literal

from clustertwin.scenarios.gavel_schema import _Strict
from pydantic import NonNegativeInt, PositiveFloat, PositiveInt, field_validator

BUILTIN_REAL_MODELS = ("gpt", "vgg", "resnet", "gnmt")
_ENTRY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")

# The measured profile, one row per layer of the chain, for one microbatch on the run's device:
# ``layer`` (int) position; ``description`` (str) the module's class; ``forward_s``, ``backward_s``;
# ``output_bytes`` (what a stage boundary after it sends); ``parameter_bytes``; ``held_bytes`` (what a
# forward leaves allocated until its backward: output and autograd's saved tensors); ``update_s`` (one
# SGD step of its weights, as the runtime applies it); ``accumulate_s`` (adding one backward's gradient
# into the accumulator, as the runtime does it; run folders written before it was measured lack it and
# are read with ``update_s`` in its place).
PIPEDREAM_LAYERS_TABLE: dict[str, str] = {
    "layer": "int64",
    "description": "str",
    "forward_s": "float64",
    "backward_s": "float64",
    "output_bytes": "float64",
    "parameter_bytes": "float64",
    "held_bytes": "float64",
    "update_s": "float64",
    "accumulate_s": "float64",
}

# Runs of layers timed whole on the run's device, as a stage runs them (one autograd graph, the loss in
# the last): one row per distinct stage of the run's plans; ``forward_s``, ``backward_s`` per microbatch.
PIPEDREAM_CHUNKS_TABLE: dict[str, str] = {
    "first_layer": "int64",
    "last_layer": "int64",
    "forward_s": "float64",
    "backward_s": "float64",
}

# Each plan's chunks timed by the ranks that hold them, inside the run (all devices busy): one row per
# (plan, device, stage); ``forward_s``, ``backward_s`` alone, and ``*_traffic_s`` while NCCL copies
# messages to and from the device's ring neighbours (NaN where the plan sends nothing between devices).
PIPEDREAM_STAGE_TIMES_TABLE: dict[str, str] = {
    "plan": "str",
    "device": "int64",
    "stage": "int64",
    "forward_s": "float64",
    "backward_s": "float64",
    "forward_traffic_s": "float64",
    "backward_traffic_s": "float64",
}


class PipeDreamReal(_Strict):
    """How ``--backend real`` runs a pipedream scenario (the simulator ignores this section).

    ``model``: a built-in (``gpt``, ``vgg``, ``resnet``, ``gnmt``; sizes in ``options``) or the user's
    ``module:function`` returning an ``nn.Sequential`` or a list of layers (then ``input_shape`` per
    sample, and ``vocab`` for int64 token inputs). One process per device of ``cluster``; the minibatch
    count of the timed run is ``num_batches``, after ``warmup_batches`` untimed ones.
    """

    model: str = "vgg"
    options: dict[str, int | float | bool | list[int]] = {}
    input_shape: list[PositiveInt] | None = None  # a user's model: per-sample input shape
    vocab: NonNegativeInt = 0  # a user's model: > 0 for int64 token inputs below it
    device: Literal["cpu", "cuda"] = "cpu"
    lr: PositiveFloat = 0.01  # plain SGD (no momentum: no optimizer state)
    warmup_batches: NonNegativeInt = 1
    profile_iterations: PositiveInt = 3
    ddp_baseline: bool = False  # also run data parallelism (one stage on every device) on the same samples
    limit_s: PositiveFloat = 600.0  # the launch is stopped past this

    @field_validator("model")
    @classmethod
    def _model_name(cls, value: str) -> str:
        if value not in BUILTIN_REAL_MODELS and not _ENTRY.match(value):
            raise ValueError(
                f"model must be one of {', '.join(BUILTIN_REAL_MODELS)} or module:function, got {value!r}"
            )
        return value
