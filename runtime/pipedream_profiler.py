"""Measure a PipeDream per-layer profile from a real torch model (CPU or GPU).

For each child of an ``nn.Sequential`` (a "layer"), the forward and backward times per minibatch, the
output activation bytes and the parameter bytes, as PipeDream's profiler records them (seed 001 §2.4.1:
T_l, a_l, w_l). Each layer is timed in isolation on the real input it sees in the model, averaged over
``iterations`` after ``warmup`` runs; backward is timed by back-propagating a ones gradient through that
layer alone (or, for the last layer when a loss is given, from the loss). ``to_graph_txt`` writes the
profile in PipeDream's ``graph.txt`` format, so the planner and simulator can be calibrated from a short
real profiling run.

``profile_layers`` also measures what the simulator's memory model needs beyond a_l, because a
transformer block keeps far more for its backward than its output (seed 001 §3.3.3 counts "all
activations of a microbatch", not just stage outputs):

- ``held_bytes``: memory a forward leaves allocated until its backward (output plus every tensor
  autograd saved, bf16 weight casts included), as a ``memory_allocated`` delta on CUDA; on CPU the
  distinct storages reached by ``saved_tensors_hooks`` plus the output;
- ``transient_bytes``: the extra peak while the layer's forward or backward runs (workspaces, the
  freshly computed gradients) above what is held (CUDA only; 0 on CPU);
- ``update_s``: one SGD step on the layer's weights (also the cost of accumulating one gradient:
  both read two weight-sized tensors and write one).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from traces.pipedream_profile import Layer, ModelProfile

Loss = tuple[Callable[[torch.Tensor, torch.Tensor], torch.Tensor], torch.Tensor]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(frozen=True)
class LayerProfile:
    """``profile`` (PipeDream's columns) plus per-layer memory and update costs (see module docstring)."""

    profile: ModelProfile
    held_bytes: tuple[float, ...]
    transient_bytes: tuple[float, ...]
    update_s: tuple[float, ...]

    def to_dict(self) -> dict:
        return {
            "name": self.profile.name,
            "batch_size": self.profile.batch_size,
            "layers": [
                {
                    "description": lay.description,
                    "forward_s": lay.forward_s,
                    "backward_s": lay.backward_s,
                    "output_bytes": lay.activation_bytes,
                    "parameter_bytes": lay.parameter_bytes,
                    "held_bytes": held,
                    "transient_bytes": transient,
                    "update_s": update,
                }
                for lay, held, transient, update in zip(
                    self.profile.layers, self.held_bytes, self.transient_bytes, self.update_s, strict=True
                )
            ],
        }


def _storage_ptrs(tensors) -> dict[int, int]:
    out = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            storage = t.untyped_storage()
            out[storage.data_ptr()] = storage.nbytes()
    return out


def _memory(
    layer: nn.Module, inp: torch.Tensor, run: Callable[[], torch.Tensor], backward: Callable
) -> tuple[float, float]:
    """(held, transient) bytes of one forward + backward of ``layer`` (see the module docstring)."""
    device = inp.device
    if device.type == "cuda":
        _sync(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        out = run()
        _sync(device)
        after = torch.cuda.memory_allocated(device)
        forward_peak = torch.cuda.max_memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        grads = backward(out)
        _sync(device)
        backward_peak = torch.cuda.max_memory_allocated(device)
        del grads
        return float(after - before), float(max(forward_peak - after, backward_peak - after, 0))
    saved: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = run()
    exclude = _storage_ptrs([inp, *layer.parameters()])
    kept = {p: n for p, n in _storage_ptrs([*saved, out]).items() if p not in exclude}
    return float(sum(kept.values())), 0.0


def _update_s(layer: nn.Module, device: torch.device, iterations: int, warmup: int) -> float:
    params = [p.detach() for p in layer.parameters()]
    if not params:
        return 0.0
    grads = [torch.zeros_like(p) for p in params]  # subtracting zeros leaves the weights unchanged
    total = 0.0
    for it in range(warmup + iterations):
        _sync(device)
        t0 = time.perf_counter()
        torch._foreach_sub_(params, grads, alpha=0.1)  # as the runtimes' SGD step
        _sync(device)
        if it >= warmup:
            total += time.perf_counter() - t0
    return total / iterations


def profile_layers(
    model: nn.Sequential,
    sample: torch.Tensor,
    iterations: int = 10,
    warmup: int = 2,
    name: str = "model",
    loss: Loss | None = None,
) -> LayerProfile:
    """Profile every child of ``model`` on ``sample`` (one minibatch; its first dimension is the batch).
    With ``loss = (fn, target)`` the last layer is timed and measured together with ``fn(out, target)``
    (the pipeline's last stage computes it)."""
    if iterations < 1:
        raise ValueError("iterations must be >= 1")
    device = sample.device
    layers, cuts, held, transient, updates = [], [], [], [], []
    x = sample
    count = len(model)
    for index, layer in enumerate(model):
        inp = x.detach().requires_grad_(x.is_floating_point())
        with_loss = loss is not None and index == count - 1
        grads_of = ([inp] if inp.requires_grad else []) + [p for p in layer.parameters() if p.requires_grad]

        def run(
            layer: nn.Module = layer, inp: torch.Tensor = inp, with_loss: bool = with_loss
        ) -> torch.Tensor:
            out = layer(inp)
            return loss[0](out, loss[1]) if with_loss else out  # type: ignore[index]

        def backward(out: torch.Tensor, grads_of: list = grads_of) -> tuple:
            if not out.requires_grad:
                return ()
            return torch.autograd.grad(out, grads_of, torch.ones_like(out), allow_unused=True)

        fwd = bwd = 0.0
        for it in range(warmup + iterations):
            _sync(device)
            t0 = time.perf_counter()
            out = run()
            _sync(device)
            t1 = time.perf_counter()
            grads = backward(out)
            _sync(device)
            t2 = time.perf_counter()
            del grads
            if it >= warmup:
                fwd += t1 - t0
                bwd += t2 - t1
        del out
        layer_held, layer_transient = _memory(layer, inp, run, backward)
        with torch.no_grad():
            y = layer(inp)
        act = float(y.numel() * y.element_size())
        params = float(sum(p.numel() * p.element_size() for p in layer.parameters()))
        layers.append(
            Layer(
                name=f"node{index + 1}",
                description=type(layer).__name__,
                forward_s=fwd / iterations,
                backward_s=bwd / iterations,
                activation_bytes=act,
                parameter_bytes=params,
            )
        )
        cuts.append(act)
        held.append(layer_held)
        transient.append(layer_transient)
        updates.append(_update_s(layer, device, iterations, warmup))
        x = y
    profile = ModelProfile(name, tuple(layers), tuple(cuts), int(sample.shape[0]))
    return LayerProfile(profile, tuple(held), tuple(transient), tuple(updates))


def profile_sequential(
    model: nn.Sequential, sample: torch.Tensor, iterations: int = 10, warmup: int = 2, name: str = "model"
) -> ModelProfile:
    """PipeDream's per-layer profile of every child of ``model`` on ``sample`` (``profile_layers``
    without the memory and update extras)."""
    return profile_layers(model, sample, iterations, warmup, name).profile


def to_graph_txt(profile: ModelProfile) -> str:
    """PipeDream's ``graph.txt`` text for a chain profile (times in ms, sizes in bytes)."""
    lines = []
    for layer in profile.layers:
        lines.append(
            f"{layer.name} -- {layer.description} -- forward_compute_time={layer.forward_s * 1000:.3f},"
            f" backward_compute_time={layer.backward_s * 1000:.3f},"
            f" activation_size={layer.activation_bytes:.1f},"
            f" parameter_size={layer.parameter_bytes:.1f}"
        )
    for a, b in zip(profile.layers, profile.layers[1:], strict=False):
        lines.append(f"\t{a.name} -- {b.name}")
    return "\n".join(lines) + "\n"
