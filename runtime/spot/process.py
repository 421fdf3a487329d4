"""One training process of the elastic PS job: a worker, and the PS roles the epoch gives it.

Transport is the c10d ``TCPStore`` hosted by the launcher, used as a mailbox with known key names, not
a gloo collective: a fixed-world collective hangs when a member is SIGKILLed, while the store outlives
any training process and lets the survivors carry on with a new membership. Every key is namespaced by
the run's *phase* (checkpoint restarts start a new phase) and, where state can be rolled back, by the
*generation* ``g`` (a roll-back starts a new generation, so stale messages are never read):

* ``epoch/{e}``, ``epoch/latest`` — the controller's configurations (``controller.Epoch``);
* ``bind/{g}/{c}`` — which epoch clock ``c`` runs under. The first process to reach ``c`` binds it to the
  latest epoch with an atomic ``compare_set``; everyone then agrees on the membership of every clock, so
  a new epoch takes effect at a clock boundary with no barrier and no lost update ([Proteus] §1.4: the
  old owner serves up to the switch, the new one fetches a copy);
* ``param/{g}/{p}/{c}`` — partition p's values at the start of clock c, published by its server;
* ``upd/{g}/{p}/{c}/{worker}`` — a worker's update of p for clock c;
* ``bpush/{g}/{p}/{n}`` (counter ``bseq/{g}/{p}``) — an ActivePS's coalesced updates [start, end) to its
  BackupPS every ``backup_every`` clocks, and the end-of-life flush (§1.1, §1.6);
* ``bclock/{g}/{p}`` — the clock the BackupPS state of p is consistent at (the roll-back target is the
  minimum over partitions, §1.6 fn. 6); ``prog/{g}/{p}`` — the last clock p's server published;
* ``gen``, ``genstart/{g}`` — a roll-back: the new generation starts at a clock from the BackupPSs.

A BackupPS keeps a short history of its consistent states, so it can hand out the state at the common
roll-back clock even if some partitions' backups are one push ahead. Each process appends its events
to a JSON-lines log flushed line by line, so a SIGKILL loses nothing it had logged.
"""

from __future__ import annotations

import json
import os
import pickle
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from clustertwin.atomic import write_atomically

STORE_TIMEOUT_S = 60.0  # how long a store operation waits (the launcher and its processes alike)
POLL_S = 0.002  # how often a waiting process re-checks the store
HISTORY = 64  # consistent BackupPS states kept per partition


class _Rollback(Exception):
    """The controller started a new generation (an effective failure, §1.6)."""


@dataclass
class _Backup:
    """A BackupPS's copy of one partition: state consistent at ``clock``; pushes not yet contiguous."""

    state: np.ndarray
    clock: int
    history: dict[int, np.ndarray] = field(default_factory=dict)
    pending: dict[int, tuple[int, np.ndarray]] = field(default_factory=dict)
    next_seq: int = 0

    def snapshot(self) -> None:
        self.history[self.clock] = self.state.copy()
        for old in sorted(self.history)[:-HISTORY]:
            del self.history[old]


def _arr(raw: bytes) -> np.ndarray:
    return np.frombuffer(raw, dtype=np.float64).copy()


class TrainingProcess:
    """The event loop of one process; see the module docstring for the protocol."""

    def __init__(self, name: str, port: int, spec: dict[str, Any]) -> None:
        import torch
        import torch.distributed as dist
        from clustertwin.runtime.launch import connect_store
        from clustertwin.runtime.spot.model import MLR, partition_bounds

        torch.set_num_threads(1)
        self.name = name
        self.spec = spec
        base = connect_store(port, timeout_s=STORE_TIMEOUT_S)
        self.base = base
        self.st = dist.PrefixStore(f"ph{spec['phase']}", base)
        self.problem = MLR(**spec["mlr"])
        self.n = spec["n_partitions"]
        self.bounds = partition_bounds(self.problem.numel, self.n)
        self.device = torch.device(spec["device"])
        x, y = self.problem.data()
        self.x, self.y = x.to(self.device), y.to(self.device)
        self.g = 0
        self.c = spec["start_clock"]
        self.serving: dict[int, np.ndarray] = {}
        self.acc: dict[int, tuple[int, np.ndarray]] = {}  # ActivePS: unpushed delta since clock
        self.backups: dict[int, _Backup] = {}
        self.epochs: dict[int, Any] = {}
        self.ckpt_dir = Path(spec["ckpt_dir"]) if spec.get("ckpt_dir") else None
        log_path = Path(spec["log_dir"]) / f"{spec['phase']}-{name}.jsonl"
        self.log_file = log_path.open("a", buffering=1)
        self.t0 = 0.0
        # A machine acquired mid-run (scale-up) joins at the first clock bound to an epoch that has it.
        self.joining = bool(spec.get("join"))
        self.workers = None
        if spec.get("stragglers") is not None:
            from clustertwin.runtime.spot.reassign import Reassigning

            self.workers = Reassigning(name, spec)

    # ---- plumbing -----------------------------------------------------------------------------
    def now(self) -> float:
        return time.time() - self.t0

    def log(self, **row: Any) -> None:
        row.setdefault("t", self.now())
        self.log_file.write(json.dumps(row) + "\n")  # line-buffered: in the kernel before the next op

    def epoch(self, eid: int):
        if eid not in self.epochs:
            self.epochs[eid] = pickle.loads(self.st.get(f"epoch/{eid}"))
        return self.epochs[eid]

    def bind(self, c: int):
        latest = self.st.get("epoch/latest")
        return self.epoch(int(self.st.compare_set(f"bind/{self.g}/{c}", "", latest)))

    def service(self) -> None:
        """While waiting: notice a roll-back, and fold in pushes to the partitions this process backs up."""
        if self.st.add("gen", 0) != self.g:
            raise _Rollback
        for p, b in self.backups.items():
            self._consume(p, b)

    def wait_for(self, keys: list[str]) -> None:
        while not self.st.check(keys):
            self.service()
            time.sleep(POLL_S)

    # ---- BackupPS -----------------------------------------------------------------------------
    def _consume(self, p: int, b: _Backup) -> None:
        available = self.st.add(f"bseq/{self.g}/{p}", 0)
        moved = False
        while b.next_seq < available:
            key = f"bpush/{self.g}/{p}/{b.next_seq}"
            if not self.st.check([key]):
                break  # the pusher took the slot and is mid-set
            start, end, raw, eol = pickle.loads(self.st.get(key))
            self.st.delete_key(key)
            b.next_seq += 1
            if end > b.clock:
                b.pending[start] = (end, _arr(raw))
            if eol:
                self.log(ev="eol_received", p=p, c=end)
        while b.clock in b.pending:  # apply in clock order: the state stays consistent at b.clock
            end, delta = b.pending.pop(b.clock)
            b.state += delta
            b.clock = end
            b.snapshot()
            moved = True
        if moved:
            self.st.set(f"bclock/{self.g}/{p}", str(b.clock))

    def _push(self, p: int, end: int, eol: bool) -> None:
        start, delta = self.acc[p]
        if end > start:
            slot = self.st.add(f"bseq/{self.g}/{p}", 1) - 1
            self.st.set(f"bpush/{self.g}/{p}/{slot}", pickle.dumps((start, end, delta.tobytes(), eol)))
        self.acc[p] = (end, np.zeros_like(delta))

    # ---- the run ------------------------------------------------------------------------------
    def run(self) -> None:
        first = self.epoch(self.spec["first_epoch"])
        lo_c = self.c
        for p in range(self.n):
            if first.backup[p] == self.name:
                lo, hi = self.bounds[p]
                b = _Backup(np.zeros(hi - lo), lo_c)
                b.snapshot()
                self.backups[p] = b
                self.st.set(f"bclock/0/{p}", str(lo_c))
        self.st.add("ready", 1)
        self.st.set(f"up/{self.name}", "1")
        while not self.base.check(["go"]):
            time.sleep(0.01)
        self.t0 = float(self.base.get("t0").decode())
        if self.joining:
            self._await_membership()
        self.log(ev="start", c=self.c)
        while True:
            try:
                if self._clocks():
                    return
            except _Rollback:
                self._rollback()

    def _await_membership(self) -> None:
        """A joiner waits until the controller has published an epoch with it, then starts at the clock
        front of the current generation (it skips, in :meth:`_join_step`, clocks bound without it)."""
        while not self.st.check([f"joined/{self.name}"]):
            time.sleep(POLL_S)
        self.g = int(self.st.add("gen", 0))
        keys = [f"prog/{self.g}/{p}" for p in range(self.n)]
        if self.st.check(keys):
            self.c = min(int(v) for v in self.st.multi_get(keys))
        elif self.g > 0:
            self.c = pickle.loads(self.st.get(f"genstart/{self.g}"))[0]

    def _join_step(self) -> bool:
        """True once clock ``self.c`` is bound to an epoch this joiner belongs to (or the stop epoch);
        False after skipping a clock bound without it, or while the front has not reached ``self.c``.
        A clock is bound only once its parameters exist, so a joiner never binds ahead of the job."""
        g, c = self.g, self.c
        key = f"bind/{g}/{c}"
        if self.st.check([key]):
            ep = self.epoch(int(self.st.get(key)))
        elif self.st.check([f"param/{g}/{p}/{c}" for p in range(self.n)]):
            ep = self.bind(c)
        else:
            self.service()
            time.sleep(POLL_S)
            return False
        if ep.stop or self.name in ep.workers or self.name in ep.server:
            self.joining = False
            self.log(ev="joined", c=c)
            return True
        self.c = c + 1
        return False

    def _rollback(self) -> None:
        g = int(self.st.add("gen", 0))
        start, _eid = pickle.loads(self.st.get(f"genstart/{g}"))
        if self.workers is not None:
            self.workers.reset()
        self.g, self.c = g, start
        self.serving.clear()
        self.acc.clear()
        for p, b in self.backups.items():
            if start not in b.history:
                raise RuntimeError(f"{self.name}: BackupPS of partition {p} has no state at clock {start}")
            b.state, b.clock = b.history[start].copy(), start
            b.history = {k: v for k, v in b.history.items() if k <= start}
            b.pending.clear()
            b.next_seq = 0
            self.st.set(f"bclock/{g}/{p}", str(start))
            self.st.set(f"param/{g}/{p}/{start}", b.state.tobytes())  # the seed of the new owner
        self.log(ev="rollback", g=g, c=start)

    def _clocks(self) -> bool:
        """Run clocks until the stop epoch (True) or retirement (True); raises _Rollback."""
        import torch
        from clustertwin.runtime.spot.model import share_bounds, update

        st, me, K = self.st, self.name, self.spec["backup_every"]
        while True:
            if self.joining and not self._join_step():
                continue
            g, c = self.g, self.c
            self.wait_for([f"param/{g}/{p}/{c}" for p in range(self.n)])
            ep = self.bind(c)
            if ep.stop:
                st.set(f"stopped/{me}", str(c))
                self.log(ev="stopped", c=c)
                return True
            mine = {p for p in range(self.n) if ep.server[p] == me}
            for p in sorted(set(self.serving) - mine):  # migration out: end-of-life flush (§1.6)
                if p in self.acc:
                    self._push(p, c, eol=True)
                    del self.acc[p]
                del self.serving[p]
                self.log(ev="handoff", p=p, c=c, to=ep.server[p])
            for p in sorted(mine - set(self.serving)):  # migration in: fetch the previous owner's copy
                self.serving[p] = _arr(st.get(f"param/{g}/{p}/{c}"))
                if ep.backup[p] not in (None, me):
                    self.acc[p] = (c, np.zeros_like(self.serving[p]))
                self.log(ev="take", p=p, c=c)
            if me not in ep.workers and not mine and not self.backups:
                self._retire(c)
                return True
            if me in ep.workers:
                t_step = self.now()
                w = np.concatenate(
                    [_arr(v) for v in st.multi_get([f"param/{g}/{p}/{c}" for p in range(self.n)])]
                )
                i = ep.workers.index(me)
                if self.workers is not None:  # stragglers, and RapidReassignment between the workers
                    u = self.workers.clock(self, ep, g, c, i, torch.from_numpy(w).to(self.device))
                else:
                    lo, hi = share_bounds(self.problem.batch, len(ep.workers), i)
                    idx = torch.from_numpy(self.problem.batch_indices(c)[lo:hi]).to(self.device)
                    u = update(self.problem, self.x[idx], self.y[idx], torch.from_numpy(w).to(self.device))
                    u = u.cpu().numpy()
                    # emulate a machine of fixed speed: the step takes step_s per nominal share
                    nominal = self.problem.batch / self.spec["initial_workers"]
                    spare = self.spec["step_s"] * (hi - lo) / nominal - (self.now() - t_step)
                    if spare > 0:
                        time.sleep(spare)
                for p, (a, b) in enumerate(self.bounds):
                    st.set(f"upd/{g}/{p}/{c}/{me}", u[a:b].tobytes())
                self.log(ev="step", c=c, g=g, t0=t_step, n=len(ep.workers))
            ckpt_at = int(st.get("ckpt/at")) if self.ckpt_dir is not None and st.check(["ckpt/at"]) else -1
            for p in sorted(mine):
                keys = [f"upd/{g}/{p}/{c}/{w}" for w in ep.workers]
                self.wait_for(keys)
                delta = np.zeros_like(self.serving[p])
                for raw in st.multi_get(keys):  # fixed worker order: a deterministic sum
                    delta += _arr(raw)
                self.serving[p] += delta
                if p in self.acc:  # ActivePS: coalesce for the BackupPS
                    start, acc = self.acc[p]
                    self.acc[p] = (start, acc + delta)
                    if (c + 1) % K == 0:
                        self._push(p, c + 1, eol=False)
                if ep.backup[p] == me:  # ParamServ (stage 1): the served state is the backup
                    b = self.backups[p]
                    b.state, b.clock = self.serving[p].copy(), c + 1
                    b.pending = {s: v for s, v in b.pending.items() if v[0] > b.clock}
                    b.snapshot()
                    st.set(f"bclock/{g}/{p}", str(b.clock))
                if ckpt_at == c + 1:
                    self._checkpoint(p, c + 1)
                st.set(f"param/{g}/{p}/{c + 1}", self.serving[p].tobytes())
                st.set(f"prog/{g}/{p}", str(c + 1))
                for key in keys:
                    st.delete_key(key)
                if c > 0:
                    st.delete_key(f"param/{g}/{p}/{c - 1}")
                self.log(ev="apply", p=p, c=c, g=g)
            self.c = c + 1

    def _checkpoint(self, p: int, clock: int) -> None:
        """Write partition p at ``clock`` atomically (temp file, then rename)."""
        assert self.ckpt_dir is not None
        folder = self.ckpt_dir / f"c{clock}"
        folder.mkdir(parents=True, exist_ok=True)

        def save(temporary: Path) -> None:
            with temporary.open("wb") as f:
                np.save(f, self.serving[p])
                f.flush()
                os.fsync(f.fileno())

        write_atomically(folder / f"p{p}.npy", save)
        self.st.add(f"ckpt/{clock}/n", 1)

    def _retire(self, c: int) -> None:
        """No role left (evicted after a warning): say so, then idle until killed or the job stops."""
        self.st.set(f"retired/{self.name}", str(c))
        self.log(ev="retired", c=c)
        while not self.base.check([f"stopping{self.spec['phase']}"]):
            time.sleep(0.02)


def process_main(name: str, port: int, spec: dict[str, Any]) -> None:
    """Entry point of a spawned process."""
    proc = TrainingProcess(name, port, spec)
    proc.run()
    proc.log_file.close()
