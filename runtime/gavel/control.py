"""The control plane between the round scheduler and its worker agents: JSON values in a TCPStore.

torch.distributed's TCPStore is a small key-value server that every rank of a job already knows how to
reach; the scheduler hosts one and the agents are its clients. Keys (``r`` the round, ``a`` an agent):

- ``ready/a``: the agent is up (written again by a restarted agent);
- ``start/a``: the first round a (re)started agent should take part in;
- ``plan/r/a``: the jobs agent a runs in round r (possibly none), or ``{"stop": true}``;
- ``done/r/a``: what became of them (exit status, elapsed time, the job's own report).

Polling ``check`` rather than a blocking ``wait`` keeps a missing agent a quiet, timed event.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import torch.distributed as dist

POLL_S = 0.05


class ControlPlane:
    def __init__(self, host: str, port: int, *, serve: bool, timeout_s: float = 3600.0) -> None:
        self.store = dist.TCPStore(
            host, port, is_master=serve, wait_for_workers=False, timeout=timedelta(seconds=timeout_s)
        )
        self.host = host

    @property
    def port(self) -> int:
        return int(self.store.port)

    def put(self, key: str, value: Any) -> None:
        self.store.set(key, json.dumps(value))

    def has(self, key: str) -> bool:
        return bool(self.store.check([key]))

    def get(self, key: str) -> Any:
        return json.loads(self.store.get(key))

    def wait_for(self, keys: list[str], deadline: float) -> dict[str, Any]:
        """The values of ``keys`` that appear before ``deadline`` (a ``time.monotonic`` instant)."""
        found: dict[str, Any] = {}
        while True:
            for key in keys:
                if key not in found and self.has(key):
                    found[key] = self.get(key)
            if len(found) == len(keys) or time.monotonic() >= deadline:
                return found
            time.sleep(POLL_S)
