"""A model's gradient as a flat vector: what a parameter-server worker computes each step.

The parameter server sees one flat vector of the model's parameters, in ``module.parameters()`` order,
each tensor a contiguous range (its blocks are cut from those ranges). ``Trainer.gradient`` loads a flat
vector into the network, runs the worker's minibatch forward and backward under the softmax
cross-entropy, and returns the flat gradient and the minibatch loss. Everything is a pure function of
(model name, data set, seed, worker, step, flat parameters), and the network is built under a fixed
seed, so every process of a run (and a serial replay of it) starts from the same parameters and
computes the same gradient bit for bit on one host.

A GPU worker hands ``gradient`` a vector on its device: the network, its buffers and the data set move
there once. The loss is the cross-entropy written as a sum over one-hot targets, because the CUDA kernel
of ``nll_loss``'s backward accumulates with atomics, which ``torch.use_deterministic_algorithms``
(the bit-identity check of the GPU runs) refuses or which changes the last bits from run to run.
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
        with torch.random.fork_rng(devices=[]):  # built on the CPU: no CUDA generator to fork
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
        self.device = torch.device("cpu")

    def initial(self) -> torch.Tensor:
        """The network's initial parameters as one flat float32 vector."""
        return self.init.clone()

    def tensors(self) -> list[tuple[str, int]]:
        """(name, elements) of every parameter tensor, in the flat vector's order."""
        return [(name, p.numel()) for name, p in self.net.named_parameters()]

    def gradient(self, flat: torch.Tensor, worker: int, step: int) -> tuple[torch.Tensor, float]:
        """The flat gradient of worker ``worker``'s minibatch loss at ``step`` and that loss."""
        if flat.device != self.device:
            self._move(flat.device)
        with torch.no_grad():
            vector_to_parameters(flat, self.params)
        for p in self.params:
            p.grad = None
        xb, yb = minibatch(self.x, self.y, worker, self.workers, step, self.batch)
        loss = cross_entropy(self.net(xb), yb)
        loss.backward()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        return torch.cat([g.reshape(-1) for g in grads]).contiguous(), float(loss.detach())

    def _move(self, device: torch.device) -> None:
        self.net.to(device)  # parameters keep their identity; buffers (batch-norm statistics) move too
        self.x, self.y = self.x.to(device), self.y.to(device)
        self.device = device


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The mean softmax cross-entropy, as a sum of log-probabilities times one-hot targets: only
    element-wise ops and reductions, deterministic on every device (the module docstring says why)."""
    # one-hot by comparison (one_hot scatters, which deterministic CUDA may refuse too)
    target = (labels[:, None] == torch.arange(logits.shape[1], device=labels.device)).to(logits.dtype)
    return -(torch.log_softmax(logits, dim=1) * target).sum(dim=1).mean()
