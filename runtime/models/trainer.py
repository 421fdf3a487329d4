"""A model's gradient as a flat vector: what a parameter-server worker computes each step.

The parameter server sees one flat vector of the model's parameters, in ``module.parameters()`` order,
each tensor a contiguous range (its blocks are cut from those ranges). ``Trainer.gradient`` loads a flat
vector into the network, runs the worker's minibatch forward and backward under the softmax
cross-entropy, and returns the flat gradient and the minibatch loss. Everything is a pure function of
(model name, data set, seed, worker, step, flat parameters), and the network is built under a fixed
seed, so every process of a run (and a serial replay of it) starts from the same parameters and
computes the same gradient bit for bit on one host.
"""

from __future__ import annotations

import torch
from clustertwin.runtime.models.data import minibatch
from clustertwin.runtime.models.registry import build
from torch.nn.utils import parameters_to_vector, vector_to_parameters

EXAMPLES = 1024  # examples in a run's synthetic data set (minibatches wrap around it)


class Trainer:
    """One worker's copy of the network and the run's data set."""

    def __init__(self, model: str, data: str | None, seed: int, batch: int, workers: int) -> None:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            net, dataset = build(model, data)
        self.net = net.float().train()
        self.params = list(self.net.parameters())
        # kept apart: ``gradient`` points the network's parameters at the vector it is given
        self.init = parameters_to_vector(self.params).detach().clone()
        x, self.y = dataset(seed, EXAMPLES)
        self.x = x.float() if x.is_floating_point() else x
        self.batch = batch
        self.workers = workers

    def initial(self) -> torch.Tensor:
        """The network's initial parameters as one flat float32 vector."""
        return self.init.clone()

    def tensors(self) -> list[tuple[str, int]]:
        """(name, elements) of every parameter tensor, in the flat vector's order."""
        return [(name, p.numel()) for name, p in self.net.named_parameters()]

    def gradient(self, flat: torch.Tensor, worker: int, step: int) -> tuple[torch.Tensor, float]:
        """The flat gradient of worker ``worker``'s minibatch loss at ``step`` and that loss."""
        with torch.no_grad():
            vector_to_parameters(flat, self.params)
        for p in self.params:
            p.grad = None
        xb, yb = minibatch(self.x, self.y, worker, self.workers, step, self.batch)
        loss = torch.nn.functional.cross_entropy(self.net(xb), yb)
        loss.backward()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        return torch.cat([g.reshape(-1) for g in grads]).contiguous(), float(loss.detach())
