"""Measure a PipeDream per-layer profile from a real torch model (CPU or GPU).

For each child of an ``nn.Sequential`` (a "layer"), the forward and backward times per minibatch, the
output activation bytes and the parameter bytes, as PipeDream's profiler records them (seed 001 §2.4.1:
T_l, a_l, w_l). Each layer is timed in isolation on the real input it sees in the model, averaged over
``iterations`` after ``warmup`` runs; backward is timed by back-propagating a ones gradient through that
layer alone. ``to_graph_txt`` writes the profile in PipeDream's ``graph.txt`` format, so the planner and
simulator can be calibrated from a short real profiling run.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from traces.pipedream_profile import Layer, ModelProfile


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def profile_sequential(
    model: nn.Sequential, sample: torch.Tensor, iterations: int = 10, warmup: int = 2, name: str = "model"
) -> ModelProfile:
    """Profile every child of ``model`` on ``sample`` (one minibatch; its first dimension is the batch)."""
    if iterations < 1:
        raise ValueError("iterations must be >= 1")
    device = sample.device
    layers = []
    cuts = []
    x = sample
    for index, layer in enumerate(model):
        inp = x.detach().requires_grad_(x.is_floating_point())
        fwd = bwd = 0.0
        out = None
        for it in range(warmup + iterations):
            _sync(device)
            t0 = time.perf_counter()
            out = layer(inp)
            _sync(device)
            t1 = time.perf_counter()
            if out.requires_grad:
                grads = [p for p in layer.parameters() if p.requires_grad]
                targets = ([inp] if inp.requires_grad else []) + grads
                torch.autograd.grad(out, targets, torch.ones_like(out), allow_unused=True)
            _sync(device)
            t2 = time.perf_counter()
            if it >= warmup:
                fwd += t1 - t0
                bwd += t2 - t1
        assert out is not None
        act = float(out.numel() * out.element_size())
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
        x = out.detach()
    return ModelProfile(name, tuple(layers), tuple(cuts), int(sample.shape[0]))


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
