"""Measure a PipeDream per-layer profile from a real torch model (CPU or GPU).

For each child of an ``nn.Sequential`` (a "layer"), the forward and backward times per minibatch, the
output activation bytes and the parameter bytes, as PipeDream's profiler records them ([Narayanan] §2.4.1:
T_l, a_l, w_l). Each layer is timed on the real input it sees in the model; backward is timed by
back-propagating a ones gradient through that layer alone (or, for the last layer when a loss is given,
from the loss). ``to_graph_txt`` writes the profile in PipeDream's ``graph.txt`` format, so the planner
and simulator can be calibrated from a short real profiling run.

**Timing** (``time_back_to_back``) measures what a layer costs inside a pipeline, where the host
enqueues kernels ahead of the GPU: after ``warmup`` untimed calls (enqueued without waiting, so the GPU
is already busy), a start event, ``iterations`` calls enqueued back to back, an end event and one wait;
the time per call is (end − start) / ``iterations``. On CUDA the two marks are
``torch.cuda.Event(enable_timing=True)`` recorded on the device's current stream, so launch latency
and the autograd graph walk overlap the GPU's execution of earlier calls, as in the pipeline, instead
of being added to every call, and the host's ``synchronize`` is outside the interval. On CPU, where
nothing is asynchronous, the marks are ``time.perf_counter``. Forwards run with autograd recording
(their outputs are dropped at once); backwards run on fresh graphs built (and synchronised) before the
start event, one per call, each seeded with the same precomputed gradient, so the interval holds
``iterations`` complete backwards and nothing else. That gradient is random (normal, a fixed seed), as
a pipeline's are: a constant gradient makes the backward's matrix products toggle fewer bits, draw less
power and run faster than they do in training.

**Steady state.** A GPU that has been idle runs its first milliseconds of work at clocks that sustained
training does not keep (power and temperature limits). ``profile_layers`` therefore first runs the
whole model's forward and backward back to back for ``heat_s`` seconds (``HEAT_S`` on CUDA, nothing on
CPU), then profiles every layer without idling in between, so each layer is timed at the clocks a
pipeline runs at. A layer so small that the host cannot enqueue it
faster than the GPU runs it is measured at the host's pace; in a pipeline its neighbours' GPU work would
hide that, so ``profile_chunks`` times whole chunks the same way, as a cross-check of the summed layers.

``profile_layers`` also measures what the simulator's memory model needs beyond a_l, because a
transformer block keeps far more for its backward than its output ([Narayanan] §3.3.3 counts "all
activations of a microbatch", not just stage outputs):

- ``held_bytes``: memory a forward leaves allocated until its backward (output plus every tensor
  autograd saved, bf16 weight casts included), as a ``memory_allocated`` delta on CUDA; on CPU the
  distinct storages reached by ``saved_tensors_hooks`` plus the output;
- ``transient_bytes``: the extra peak while the layer's forward or backward runs (workspaces, the
  freshly computed gradients) above what is held (CUDA only; 0 on CPU);
- ``update_s``: one SGD step on the layer's weights as the runtime applies it
  (``torch._foreach_sub_``), timed back to back like the passes;
- ``accumulate_s``: adding one backward's gradients into the accumulator as the runtime does it
  (``torch._foreach_add_`` into the existing buffers), timed the same way.

Memory is measured on one forward and backward between ``synchronize`` calls. The backward timing
holds ``warmup + iterations`` graphs of the layer (or chunk) at once, i.e. that many times its
``held_bytes``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol

import torch
from clustertwin.traces.pipedream_profile import Layer, ModelProfile
from torch import nn

Loss = tuple[Callable[[torch.Tensor, torch.Tensor], torch.Tensor], torch.Tensor]
TIMING = "back-to-back: warmup untimed, then (end - start) / iterations between two marks"
HEAT_S = 2.0  # seconds of whole-model passes before a CUDA profile (see "Steady state")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class TimingEvent(Protocol):
    """The part of ``torch.cuda.Event``'s interface that ``time_back_to_back`` uses."""

    def record(self) -> None: ...

    def synchronize(self) -> None: ...

    def elapsed_time(self, end: TimingEvent) -> float: ...  # milliseconds from self to end


class HostEvent:
    """A host-clock mark (``time.perf_counter``) with ``torch.cuda.Event``'s timing interface, for CPU
    runs, which are synchronous: recording it is reading the clock, waiting for it is a no-op."""

    def __init__(self) -> None:
        self.t = 0.0

    def record(self) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: HostEvent) -> float:
        return (end.t - self.t) * 1000.0


class CudaEvent:
    """``torch.cuda.Event(enable_timing=True)`` recorded on ``device``'s current stream."""

    def __init__(self, device: torch.device) -> None:
        self.stream = torch.cuda.current_stream(device)
        self.event = torch.cuda.Event(enable_timing=True)

    def record(self) -> None:
        self.event.record(self.stream)

    def synchronize(self) -> None:
        self.event.synchronize()

    def elapsed_time(self, end: CudaEvent) -> float:
        return self.event.elapsed_time(end.event)


def event_factory(device: torch.device) -> Callable[[], TimingEvent]:
    """The timing marks for ``device``: CUDA events on its current stream, else the host clock."""
    return partial(CudaEvent, device) if device.type == "cuda" else HostEvent


def time_back_to_back(
    step: Callable[[int], object],
    iterations: int,
    warmup: int = 1,
    event: Callable[[], TimingEvent] = HostEvent,
) -> float:
    """Seconds per call of ``step(i)``, as a pipeline experiences it (see the module docstring):
    ``step(0) .. step(warmup - 1)`` untimed, then a start mark, ``step(warmup) ..
    step(warmup + iterations - 1)`` back to back, an end mark, one wait for the end mark;
    (end − start) / ``iterations``. Nothing waits between calls, so on CUDA the calls' launch costs
    overlap the GPU's execution of the previous ones."""
    if iterations < 1:
        raise ValueError("iterations must be >= 1")
    if warmup < 0:
        raise ValueError("warmup must be >= 0")
    for i in range(warmup):
        step(i)
    start, end = event(), event()
    start.record()
    for i in range(warmup, warmup + iterations):
        step(i)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000.0 / iterations


def gradient_like(out: torch.Tensor) -> torch.Tensor:
    """A backward's seed for ``out``: normal noise from a fixed seed (ones for a scalar, e.g. a loss)."""
    if out.numel() == 1 or not out.is_floating_point():
        return torch.ones_like(out)
    generator = torch.Generator(out.device).manual_seed(0)
    return torch.randn(out.shape, generator=generator, device=out.device, dtype=out.dtype)


def time_passes(
    run: Callable[[], torch.Tensor],
    grads_of: Sequence[torch.Tensor],
    device: torch.device,
    iterations: int,
    warmup: int,
    event: Callable[[], TimingEvent] | None = None,
) -> tuple[float, float]:
    """(forward, backward) seconds of ``run()`` and of back-propagating a gradient (``gradient_like``)
    from its output to ``grads_of``, each timed back to back (``time_back_to_back``). The backward's
    graphs are built and synchronised before its start mark; its time is 0 when the output needs no
    gradient."""
    event = event or event_factory(device)
    forward = time_back_to_back(lambda i: run(), iterations, warmup, event)
    outs: list[torch.Tensor | None] = [run() for _ in range(warmup + iterations)]
    first = outs[0]
    assert first is not None
    if not first.requires_grad or not grads_of:
        return forward, 0.0
    seed = gradient_like(first)
    _sync(device)

    def backward(i: int) -> None:
        out, outs[i] = outs[i], None  # this call's graph is freed as its backward is enqueued
        torch.autograd.grad(out, grads_of, seed, allow_unused=True)

    del first
    return forward, time_back_to_back(backward, iterations, warmup, event)


@dataclass(frozen=True)
class LayerProfile:
    """``profile`` (PipeDream's columns) plus per-layer memory and update costs (see module docstring)."""

    profile: ModelProfile
    held_bytes: tuple[float, ...]
    transient_bytes: tuple[float, ...]
    update_s: tuple[float, ...]
    accumulate_s: tuple[float, ...]

    def to_dict(self) -> dict:
        return {
            "name": self.profile.name,
            "batch_size": self.profile.batch_size,
            "timing": TIMING,
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
                    "accumulate_s": add,
                }
                for lay, held, transient, update, add in zip(
                    self.profile.layers,
                    self.held_bytes,
                    self.transient_bytes,
                    self.update_s,
                    self.accumulate_s,
                    strict=True,
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


def _update_and_accumulate_s(
    layer: nn.Module, device: torch.device, iterations: int, warmup: int
) -> tuple[float, float]:
    """(SGD step, gradient accumulation) seconds on ``layer``'s weights, as the runtime runs them."""
    params = [p.detach() for p in layer.parameters()]
    if not params:
        return 0.0, 0.0
    grads = [torch.zeros_like(p) for p in params]  # subtracting zeros leaves the weights unchanged
    acc = [torch.zeros_like(p) for p in params]
    event = event_factory(device)
    _sync(device)
    update = time_back_to_back(
        lambda i: torch._foreach_sub_(params, grads, alpha=0.1), iterations, warmup, event
    )
    add = time_back_to_back(lambda i: torch._foreach_add_(acc, grads), iterations, warmup, event)
    return update, add


def heat(model: nn.Sequential, sample: torch.Tensor, seconds: float, loss: Loss | None = None) -> None:
    """Run ``model``'s forward and backward back to back for ``seconds`` (see "Steady state")."""
    if seconds <= 0:
        return
    params = [p for p in model.parameters() if p.requires_grad]
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        out = model(sample)
        if loss is not None:
            out = loss[0](out, loss[1])
        torch.autograd.grad(out, params, gradient_like(out), allow_unused=True)
        _sync(sample.device)


def profile_layers(
    model: nn.Sequential,
    sample: torch.Tensor,
    iterations: int = 10,
    warmup: int = 2,
    name: str = "model",
    loss: Loss | None = None,
    heat_s: float | None = None,
) -> LayerProfile:
    """Profile every child of ``model`` on ``sample`` (one minibatch; its first dimension is the batch).
    With ``loss = (fn, target)`` the last layer is timed and measured together with ``fn(out, target)``
    (the pipeline's last stage computes it). ``heat_s`` (default ``HEAT_S`` on CUDA, 0 on CPU): seconds
    of whole-model passes first (see "Steady state")."""
    if iterations < 1:
        raise ValueError("iterations must be >= 1")
    device = sample.device
    if heat_s is None:
        heat_s = HEAT_S if device.type == "cuda" else 0.0
    heat(model, sample, heat_s, loss)
    layers, cuts, held, transient, updates, adds = [], [], [], [], [], []
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

        _sync(device)
        fwd, bwd = time_passes(run, grads_of, device, iterations, warmup)
        layer_held, layer_transient = _memory(layer, inp, run, backward)
        with torch.no_grad():
            y = layer(inp)
        act = float(y.numel() * y.element_size())
        params = float(sum(p.numel() * p.element_size() for p in layer.parameters()))
        layers.append(
            Layer(
                name=f"node{index + 1}",
                description=type(layer).__name__,
                forward_s=fwd,
                backward_s=bwd,
                activation_bytes=act,
                parameter_bytes=params,
            )
        )
        cuts.append(act)
        held.append(layer_held)
        transient.append(layer_transient)
        update, add = _update_and_accumulate_s(layer, device, iterations, warmup)
        updates.append(update)
        adds.append(add)
        x = y
    profile = ModelProfile(name, tuple(layers), tuple(cuts), int(sample.shape[0]))
    return LayerProfile(profile, tuple(held), tuple(transient), tuple(updates), tuple(adds))


def profile_chunks(
    model: nn.Sequential,
    sample: torch.Tensor,
    chunks: Sequence[Sequence[int]],
    iterations: int = 4,
    warmup: int = 1,
    loss: Loss | None = None,
) -> list[dict]:
    """Forward and backward seconds of whole chunks of ``model`` (each a run of consecutive layer
    indices), timed like single layers (``time_passes``) on the inputs the chunks see in the model, as a
    pipeline stage runs them: one autograd graph over the chunk, gradients for its weights and (unless
    it is integer-valued) its input, the loss included in a chunk that ends with the last layer when
    ``loss`` is given. A cross-check of the summed per-layer times; nothing is fitted to it.

    Returns one dict per chunk: ``first_layer``, ``last_layer``, ``forward_s``, ``backward_s``."""
    if iterations < 1:
        raise ValueError("iterations must be >= 1")
    device = sample.device
    count = len(model)
    for chunk in chunks:
        idx = list(chunk)
        if not idx or idx != list(range(idx[0], idx[0] + len(idx))) or idx[0] < 0 or idx[-1] >= count:
            raise ValueError(f"a chunk must be consecutive layer indices within 0..{count - 1}, got {idx}")
    inputs = [sample]  # inputs[i]: what layer i sees
    with torch.no_grad():
        for layer in list(model)[:-1]:
            inputs.append(layer(inputs[-1]))
    out = []
    for chunk in chunks:
        idx = list(chunk)
        x = inputs[idx[0]]
        inp = x.detach().requires_grad_(x.is_floating_point())
        part = [model[i] for i in idx]
        with_loss = loss is not None and idx[-1] == count - 1
        grads_of = ([inp] if inp.requires_grad else []) + [
            p for layer in part for p in layer.parameters() if p.requires_grad
        ]

        def run(part: list = part, inp: torch.Tensor = inp, with_loss: bool = with_loss) -> torch.Tensor:
            y = inp
            for layer in part:
                y = layer(y)
            return loss[0](y, loss[1]) if with_loss else y  # type: ignore[index]

        _sync(device)
        fwd, bwd = time_passes(run, grads_of, device, iterations, warmup)
        out.append({"first_layer": idx[0], "last_layer": idx[-1], "forward_s": fwd, "backward_s": bwd})
    return out


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
