"""A worker-to-worker mailbox for FlexRR's control messages over a torch.distributed store.

FlexRR sends its messages with non-blocking MPI and polls for them at message checks (§3.3.2). Here a
message to worker ``dst`` is appended to ``dst``'s queue in the job's key-value store (the c10d
``TCPStore`` that also rendezvoused the gloo process group): an atomic counter gives it a slot, then the
pickled message is written under that slot. ``poll()`` never blocks on an empty mailbox; a slot whose
counter was taken but whose value is not written yet is waited for (the writer is mid-``set``).

Each message travels with its send time (the sender's clock, which all workers of a job share), so the
receiver can log it like the simulator does (``messages`` table) and a profiling run can measure the
mailbox's delivery latency (the simulator's ``latency_s``).
"""

from __future__ import annotations

import pickle
from typing import Any

import torch.distributed as dist


class StoreMailbox:
    def __init__(self, store: dist.Store, rank: int, prefix: str = "flexrr/mbox") -> None:
        self.store = store
        self.rank = rank
        self.prefix = prefix
        self._read = 0  # messages consumed from our queue

    def send(self, dst: int, msg: Any, sent_s: float = float("nan")) -> None:
        slot = self.store.add(f"{self.prefix}/{dst}/n", 1) - 1
        self.store.set(f"{self.prefix}/{dst}/{slot}", pickle.dumps((sent_s, msg)))

    def poll(self) -> list[tuple[float, Any]]:
        """Every ``(sent_s, message)`` that arrived since the last poll, in arrival order."""
        available = self.store.add(f"{self.prefix}/{self.rank}/n", 0)
        out = []
        while self._read < available:
            key = f"{self.prefix}/{self.rank}/{self._read}"
            out.append(pickle.loads(self.store.get(key)))  # get() waits if the sender is mid-set
            self.store.delete_key(key)
            self._read += 1
        return out
