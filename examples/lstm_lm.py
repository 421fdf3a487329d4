"""An LSTM language model (word embeddings, a stacked LSTM, a softmax over the vocabulary), written against
clustertwin's job API.

    python examples/lstm_lm.py --steps 20
    torchrun --nproc-per-node 2 examples/lstm_lm.py --steps 20

The job type is Gavel's LM (a word-level LSTM language model on Wikitext-2, batch sizes 5 to 80; [Gavel] Table
5.2); the defaults are a two-layer model of 512 units over 10,000 words, 35 tokens of context, batch size 20.
Run alone it trains all its steps (resuming from --checkpoint when one is there); started by a real run's
agent it trains in the leases the scheduler gives, on its worker type's device
(``clustertwin.runtime.job.device``; run alone, a GPU when the machine has one). Tokens are synthetic: a pure
function of (seed, step, rank), so a resumed job sees the batches it would have seen. Each batch is a fresh
sequence (no hidden state carried between batches), so a checkpoint needs nothing but the model and the
optimizer.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from clustertwin.runtime.job import Job, device
from torch import nn
from torch.nn import functional as F


class LSTMLM(nn.Module):
    def __init__(self, vocab: int, dim: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, hidden, layers, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.lstm(self.embed(tokens))
        return self.out(hidden)


def batch(seed: int, step: int, rank: int, size: int, context: int, vocab: int) -> torch.Tensor:
    g = torch.Generator().manual_seed((seed * 1_000_003 + step) * 64 + rank)
    return torch.randint(0, vocab, (size, context + 1), generator=g)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100, help="total training steps")
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--context", type=int, default=35)
    parser.add_argument("--vocab", type=int, default=10_000)
    parser.add_argument("--dim", type=int, default=256, help="embedding size")
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", help="resume from and save to this file when run alone")
    args = parser.parse_args()

    torch.set_flush_denormal(True)  # on CPUs, subnormal momentum would slow the steps as training goes on
    where = device()
    if where.type == "cuda":
        torch.cuda.set_device(where)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("nccl" if where.type == "cuda" else "gloo")
    torch.manual_seed(args.seed)
    model = LSTMLM(args.vocab, args.dim, args.hidden, args.layers).to(where)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    trained = model
    if distributed:
        ids = [where.index] if where.type == "cuda" else None
        trained = nn.parallel.DistributedDataParallel(model, device_ids=ids)

    job = Job(args.steps, {"model": model, "optimizer": optimizer}, checkpoint=args.checkpoint)
    for step in job:
        tokens = batch(args.seed, step, job.rank, args.batch_size, args.context, args.vocab).to(where)
        logits = trained(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)  # as word-level LSTM LMs train
        optimizer.step()
    if job.rank == 0 and job.leases:
        last = job.leases[-1]
        rate = f"{last.throughput:.2f} steps/s"
        print(f"steps {last.start_step}-{last.end_step} at {rate}; loss {loss.item():.3f}")
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
