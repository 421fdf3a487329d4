"""FlexRR's sharded parameter server for real runs ([Harlap], §3.2): shard processes holding slices of the
model's update sums, and the worker-side client, over gloo point-to-point messages.

The data plane is its own gloo group (``data_plane``), separate from the job's control store: each
process binds its sockets to its machine's address (``real.emulated_hosts``: machine m of the scenario
is 127.0.0.<2+m>, so a one-host test still has every shard-worker pair cross distinct endpoints, as
between hosts), and updates travel worker-to-shard, never through the store.

Shard ``j`` of ``S`` owns the flat parameter slice ``[P*j//S, P*(j+1)//S)`` (the byte split of the
simulator's ``sim/flexrr/ps.py``) and keeps, per iteration k, every committed range's slice until the
iteration is complete, then applies ``U_k`` (the ranges summed in (owner, start) order, so every run
sums alike). A worker:

* **pushes** each committed range's update (``Commit``): its slice to every shard, tagged with the
  iteration, the range's owner and start; a second push of one range is an error (exactly-once);
* **declares** its iteration complete (``IterationDone``): the starts of every range of its items, so
  the shard knows which pushes make up the owner's share of ``U_k``;
* **pulls** the model a read needs, ``sum of U_k for k < need``: the shard answers once it has applied
  iteration ``need - 1`` (the SSP read rule, §3.2.2, read exactly).

Messages are a fixed int64 header (op, iteration, owner, start, count, sender) on tag 0, a payload on
tag 1, and a pull's answer on tag ``REPLY_TAG + need`` (answers to one worker may leave out of request
order). A shard never blocks on a worker that waits for it: its only blocking receives are a header from
anyone and the payload a header announced (sent just before it).
"""

from __future__ import annotations

from collections import defaultdict, deque
from datetime import timedelta

import torch
import torch.distributed as dist

PUSH, DONE, PULL, STOP = 1, 2, 3, 4
HEADER_TAG, DATA_TAG, REPLY_TAG = 0, 1, 16
HEADER = 6
TIMEOUT_S = 300.0
IN_FLIGHT = 64  # sends a client keeps in flight before waiting for the oldest


def host_address(machine: int, emulated: bool) -> str:
    """The loopback address machine ``machine`` binds to: its own (emulated hosts) or 127.0.0.1."""
    if not emulated:
        return "127.0.0.1"
    if machine > 250:
        raise ValueError(f"emulated hosts: machine {machine} has no loopback address (at most 251)")
    return f"127.0.0.{2 + machine}"


def data_plane(store: dist.Store, rank: int, world: int, address: str, prefix: str) -> dist.ProcessGroupGloo:
    """A gloo group of every worker and shard whose sockets bind to ``address`` (rendezvous through the
    control store; no tensor crosses it)."""
    options = dist.ProcessGroupGloo._Options()
    options._devices = [dist.ProcessGroupGloo.create_device(hostname=address)]
    options._timeout = timedelta(seconds=TIMEOUT_S)
    return dist.ProcessGroupGloo(dist.PrefixStore(prefix, store), rank, world, options)


def bounds(size: int, shards: int, shard: int) -> tuple[int, int]:
    return size * shard // shards, size * (shard + 1) // shards


def _header(op: int, iteration: int, owner: int, start: int, count: int, sender: int) -> torch.Tensor:
    return torch.tensor([op, iteration, owner, start, count, sender], dtype=torch.int64)


def serve(
    pg: dist.ProcessGroup, shard: int, shards: int, workers: int, size: int, dtype: torch.dtype
) -> list[torch.Tensor]:
    """Run shard ``shard`` (group rank ``workers + shard``) until every worker has stopped; return its
    slice of each iteration's update ``U_k``, in iteration order."""
    lo, hi = bounds(size, shards, shard)
    pending: dict[int, dict[tuple[int, int], torch.Tensor]] = defaultdict(dict)
    done: dict[int, dict[int, list[int]]] = defaultdict(dict)
    updates: list[torch.Tensor] = []
    cum = [torch.zeros(hi - lo, dtype=dtype)]  # cum[k] = U_0 + ... + U_{k-1}
    waiting: list[tuple[int, int]] = []  # (worker, need) of reads not yet answerable
    sends: list[dist.Work] = []
    stopped = 0
    header = torch.zeros(HEADER, dtype=torch.int64)
    while stopped < workers:
        pg.recv_anysource([header], HEADER_TAG).wait()
        op, k, owner, start, count, src = header.tolist()
        if op == PUSH:
            buf = torch.empty(hi - lo, dtype=dtype)
            pg.recv([buf], src, DATA_TAG).wait()
            if (owner, start) in pending[k]:
                raise RuntimeError(
                    f"shard {shard}: range {start} of worker {owner}'s iteration {k} pushed twice"
                )
            pending[k][(owner, start)] = buf
        elif op == DONE:
            starts = torch.empty(count, dtype=torch.int64)
            pg.recv([starts], src, DATA_TAG).wait()
            done[k][owner] = starts.tolist()
        elif op == PULL:
            waiting.append((src, k))
        elif op == STOP:
            stopped += 1
        else:
            raise RuntimeError(f"shard {shard}: unknown op {op} from rank {src}")
        while len(done[len(updates)]) == workers:  # apply every iteration that is complete
            j = len(updates)
            keys = [(o, s) for o in sorted(done[j]) for s in sorted(done[j][o])]
            have = pending[j]
            if any(key not in have for key in keys):
                break  # a helper's push is still on its way
            if len(have) != len(keys):
                extra = sorted(set(have) - set(keys))
                raise RuntimeError(f"shard {shard}: iteration {j} has pushes no worker declared: {extra}")
            total = torch.zeros_like(cum[0])
            for key in keys:
                total += have[key]
            updates.append(total)
            cum.append(cum[-1] + total)
            del pending[j], done[j]
        still = []
        for worker, need in waiting:
            if need < len(cum):
                sends.append(pg.send([cum[need]], worker, REPLY_TAG + need))
            else:
                still.append((worker, need))
        waiting = still
    for s in sends:
        s.wait()
    return updates


class PSClient:
    """A worker's side of the parameter server (group rank ``rank`` < ``workers``)."""

    def __init__(self, pg: dist.ProcessGroup, rank: int, workers: int, shards: int, w0: torch.Tensor) -> None:
        self.pg, self.rank, self.workers, self.shards = pg, rank, workers, shards
        self.w0 = w0
        self.slices = [bounds(w0.numel(), shards, j) for j in range(shards)]
        self._sends: deque[tuple[dist.Work, torch.Tensor]] = deque()
        self.bytes_pushed = 0
        self.bytes_pulled = 0

    def _send(self, tensor: torch.Tensor, shard: int, tag: int) -> None:
        self._sends.append((self.pg.send([tensor], self.workers + shard, tag), tensor))
        while len(self._sends) > IN_FLIGHT:
            self._sends.popleft()[0].wait()

    def push(self, iteration: int, owner: int, start: int, update: torch.Tensor) -> None:
        flat = update.detach().to("cpu", self.w0.dtype)
        for j, (lo, hi) in enumerate(self.slices):
            self._send(_header(PUSH, iteration, owner, start, 0, self.rank), j, HEADER_TAG)
            self._send(flat[lo:hi].clone(), j, DATA_TAG)
            self.bytes_pushed += (hi - lo) * flat.element_size()

    def done(self, iteration: int, starts: list[int]) -> None:
        payload = torch.tensor(starts, dtype=torch.int64)
        for j in range(self.shards):
            self._send(_header(DONE, iteration, self.rank, 0, len(starts), self.rank), j, HEADER_TAG)
            self._send(payload, j, DATA_TAG)

    def pull(self, need: int) -> torch.Tensor:
        """``sum of U_k for k < need`` (blocks until every shard has applied iteration ``need - 1``)."""
        bufs = [torch.empty(hi - lo, dtype=self.w0.dtype) for lo, hi in self.slices]
        works = []
        for j in range(self.shards):
            self._send(_header(PULL, need, self.rank, 0, 0, self.rank), j, HEADER_TAG)
            works.append(self.pg.recv([bufs[j]], self.workers + j, REPLY_TAG + need))
        for w in works:
            w.wait()
        self.bytes_pulled += sum(b.numel() for b in bufs) * self.w0.element_size()
        return torch.cat(bufs)

    def stop(self) -> None:
        for j in range(self.shards):
            self._send(_header(STOP, 0, self.rank, 0, 0, self.rank), j, HEADER_TAG)
        while self._sends:
            self._sends.popleft()[0].wait()
