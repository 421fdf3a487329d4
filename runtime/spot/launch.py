"""The launcher: hosts the c10d store, runs the elasticity controller and the eviction driver, and spawns
the training processes (one per reliable/transient "machine") — [Proteus] §1.3, §1.6, §6.3.

The launcher's loop ticks every ``real.agileml.poll_s`` (the EC's warning poll, 5 s in the paper,
compressed): a warning sent at ``warn_s`` is noticed at the next tick, as AgileML's controller would.
Then the fault-tolerance scheme (``policies.spot.FAULT_TOLERANCE``) says what happens:

* **AgileML** (partitioned): ``policies.agileml.plan_recovery`` decides whether the end-of-life flush
  fits in the warning (poll delay and the doomed ActivePSs' unpushed bytes at ``flush_bandwidth_mbps``
  included). If so, a new epoch without the doomed processes is published at once (partitions
  re-planned by ``plan_evictions``, stage re-chosen by ratio); the doomed processes finish their current
  clock, flush, and retire, and the workers go on. At the kill (SIGKILL) the launcher checks that every
  doomed process retired; if one did not (no or too short a warning), it is an *effective failure*: a
  new generation starts at the last consistent BackupPS clock (min over partitions) and the survivors
  redo the work since then (online roll-back, §1.6).
* **Checkpoint** (checkpoints; the Standard+Checkpoint baseline): every ``real.checkpoint.interval_s``
  the launcher asks the servers to write their partitions at a future clock (atomic files; a manifest
  once all are in). On an eviction it SIGKILLs the doomed processes and stops the whole job, then starts
  the survivors afresh (new processes) from the last complete checkpoint, read back from disk.

The processes are not started with ``runtime.launch``, whose rule is that any dead rank fails the
launch: here the launcher SIGKILLs transient processes on purpose, the set of processes changes from
epoch to epoch, and a restart must be cheap (a forkserver that has imported torch, ``_context``). The
processes form no process group; they talk through the launcher's store (``runtime.launch.host_store``),
as the ranks of a launch rendezvous on it.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from clustertwin.policies.agileml import plan_recovery
from clustertwin.runtime.launch import host_store
from clustertwin.runtime.spot.controller import Controller, Epoch
from clustertwin.runtime.spot.driver import EvictionEvent, schedule
from clustertwin.runtime.spot.model import MLR, partition_bounds
from clustertwin.runtime.spot.process import STORE_TIMEOUT_S

from clustertwin.atomic import write_text
from clustertwin.errors import RunFailure

READY_TIMEOUT_S = 120.0


@dataclass
class JobRecord:
    """What the launcher saw; the tables are built from it and the processes' logs (``tables.py``)."""

    evictions: list[dict] = field(default_factory=list)
    checkpoints: list[dict] = field(default_factory=list)
    phases: list[dict] = field(default_factory=list)
    epochs: list[dict] = field(default_factory=list)
    final_clock: int = 0
    final_params: np.ndarray | None = None
    n_partitions: int = 0
    log_dir: Path = Path()
    migrations: int = 0
    stop_s: float = 0.0


class Launcher:
    """One real run of a spot scenario's ``real:`` section (see the module docstring)."""

    def __init__(self, scenario, out_dir: Path) -> None:
        real = scenario.real
        self.sc = real
        self.scheme = scenario.fault_tolerance_scheme(
            reliable_count=real.processes.reliable,
            poll_s=real.agileml.poll_s,
            checkpoint_interval_s=real.checkpoint.interval_s,
        )
        self.schedule = schedule(scenario)
        self.out = Path(out_dir)
        self.log_dir = self.out / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.ckpt_dir = self.out / "checkpoints"
        j = real.job
        self.mlr = MLR(j.features, j.classes, j.examples, j.batch, j.lr, scenario.seed)
        self.ctrl = Controller(real.reliable_names, real.transient_names, self.scheme)
        self.n = self.ctrl.n_partitions
        self.bounds = partition_bounds(self.mlr.numel, self.n)
        self.base = host_store(STORE_TIMEOUT_S)
        self.port = self.base.port
        self.rec = JobRecord(n_partitions=self.n, log_dir=self.log_dir)
        self.phase = -1
        self.st: Any = None
        self.procs: dict[str, Any] = {}
        self.killed: set[str] = set()
        self.g = 0
        self.epoch: Epoch | None = None
        self.t0 = 0.0
        self.initial_workers = len(real.reliable_names) + len(real.transient_names)
        self.poll_s = real.agileml.poll_s
        self.seed = scenario.seed
        self.stragglers = None if scenario.stragglers is None else scenario.stragglers.model_dump()
        self.ckpt_every_s = real.checkpoint.interval_s
        self.spec: dict[str, Any] = {}

    # ---- helpers -------------------------------------------------------------------------------
    def now(self) -> float:
        return time.time() - self.t0

    def _publish(self, ep: Epoch) -> None:
        self.st.set(f"epoch/{ep.eid}", pickle.dumps(ep))
        self.st.set("epoch/latest", str(ep.eid))
        self.epoch = ep
        self.rec.epochs.append(
            {
                "phase": self.phase,
                "epoch": ep.eid,
                "time_s": self.now() if self.t0 else 0.0,
                "stage": ep.stage,
                "workers": len(ep.workers),
                "servers": " ".join(ep.server),
                "stop": ep.stop,
            }
        )

    def _prog(self, agg) -> int:
        keys = [f"prog/{self.g}/{p}" for p in range(self.n)]
        if not self.st.check(keys):
            return self.phase_start
        return int(agg(int(v) for v in self.st.multi_get(keys)))

    # ---- phases --------------------------------------------------------------------------------
    def _start_phase(self, start_clock: int, params: np.ndarray) -> None:
        import torch.distributed as dist
        from clustertwin.runtime.spot.process import process_main

        self.phase += 1
        self.phase_start = start_clock
        self.g = 0
        self.st = dist.PrefixStore(f"ph{self.phase}", self.base)
        self.st.add("gen", 0)
        ep = self.ctrl.first_epoch() if self.phase == 0 else self.ctrl.epoch()
        self._publish(ep)
        for p, (lo, hi) in enumerate(self.bounds):
            self.st.set(f"param/0/{p}/{start_clock}", params[lo:hi].tobytes())
        spec = {
            "phase": self.phase,
            "mlr": self.mlr.__dict__,
            "n_partitions": self.n,
            "device": "cpu",
            "start_clock": start_clock,
            "first_epoch": ep.eid,
            "backup_every": self.sc.agileml.backup_every,
            "step_s": self.sc.job.step_s,
            "initial_workers": self.initial_workers,
            "log_dir": str(self.log_dir),
            "ckpt_dir": str(self.ckpt_dir) if self.scheme.checkpoints else None,
            "stragglers": self.stragglers,
            "seed": self.seed,
        }
        self.spec = spec
        ctx = _context()
        spawned = self.now() if self.t0 else 0.0
        self.procs = {}
        names = self.ctrl.live
        for i, name in enumerate(sorted(names)):
            s = dict(spec, device=_device(self.sc.device, i))
            proc = ctx.Process(target=process_main, args=(name, self.port, s), daemon=True)
            proc.start()
            self.procs[name] = proc
        limit = time.monotonic() + READY_TIMEOUT_S
        while self.st.add("ready", 0) < len(names):
            self._check_deaths()
            if time.monotonic() > limit:
                raise RuntimeError("the training processes did not start in time")
            time.sleep(0.01)
        if self.phase == 0 and not self.t0:
            self.t0 = time.time()
            self.base.set("t0", repr(self.t0))
            self.base.set("go", "1")
        self.rec.phases.append(
            {
                "phase": self.phase,
                "spawned_s": spawned,
                "ready_s": self.now(),
                "start_clock": start_clock,
                "processes": len(names),
            }
        )

    def _check_deaths(self) -> None:
        for name, proc in self.procs.items():
            if name not in self.killed and proc.exitcode not in (None, 0):
                raise RunFailure(f"training process {name} died unexpectedly (exit code {proc.exitcode})")

    def _kill(self, names) -> None:
        for name in names:
            proc = self.procs.get(name)
            if proc is not None and proc.is_alive():
                os.kill(proc.pid, signal.SIGKILL)
            self.killed.add(name)
        for name in names:
            if name in self.procs:
                self.procs[name].join(timeout=10)

    # ---- the run -------------------------------------------------------------------------------
    def run(self) -> JobRecord:
        sc = self.sc
        events = self.schedule
        pending_warn = sorted(events, key=lambda e: (e.warn_s, e.index))
        pending_kill = list(events)
        flushing: dict[int, dict] = {}
        tick = self.poll_s
        try:
            self._start_phase(0, np.zeros(self.mlr.numel))
            next_ckpt = self.ckpt_every_s
            ckpt_target: int | None = None
            while self.now() < sc.duration_s:
                t = self.now()
                while pending_warn and pending_warn[0].warn_s <= t:
                    ev = pending_warn.pop(0)
                    flushing[ev.index] = self._on_warning(ev, t)
                while pending_kill and pending_kill[0].kill_s <= t:
                    ev = pending_kill.pop(0)
                    row = flushing.pop(ev.index, None) or self._on_warning(ev, t)
                    self._on_kill(ev, row)
                    if self.scheme.checkpoints:
                        ckpt_target = None  # the new processes never saw that request
                if self.scheme.checkpoints:
                    ckpt_target, next_ckpt = self._checkpointing(ckpt_target, next_ckpt)
                self._check_deaths()
                time.sleep(max(0.0, tick - (self.now() - t)))
            self._stop()
        finally:
            for proc in self.procs.values():
                if proc.is_alive():
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.join(timeout=10)
        self.rec.migrations = self.ctrl.migrations
        return self.rec

    def _on_warning(self, ev: EvictionEvent, t: float) -> dict:
        """The EC noticed a warning (this tick): plan the flush, or leave it to the roll-back."""
        sc = self.sc
        doomed = [p for p in ev.processes if p not in self.killed]
        row = {
            "event": ev.index,
            "processes": " ".join(ev.processes),
            "warned_s": ev.warn_s,
            "noticed_s": t,
            "terminate_s": ev.kill_s,
            "warning_s": ev.warning_s,
            "stage_before": self.epoch.stage if self.epoch else 0,
            "workers_before": len(self.epoch.workers) if self.epoch else 0,
            "active_ps": " ".join(p for p in doomed if self.epoch and p in self.epoch.server),
            "planned": "checkpoint_rollback",
            "epoch_s": float("nan"),
        }
        if self.scheme.partitioned:
            assert self.epoch is not None
            hosted = [sum(1 for s in self.epoch.server if s == p) for p in doomed]
            part_bytes = 8.0 * max(hi - lo for lo, hi in self.bounds)
            plan = plan_recovery(
                warning_s=ev.warning_s,
                poll_s=self.poll_s,
                unpushed_bytes=max(hosted, default=0) * part_bytes,
                flush_bandwidth_bps=sc.agileml.flush_bandwidth_mbps * 1e6,
                since_consistent_s=0.0,  # the real run measures what it loses
            )
            row["planned"] = plan.kind
            if plan.kind == "end_of_life_flush":
                self._publish(self.ctrl.evict(doomed))
                row["epoch_s"] = self.now()
                row["evicted_in_ctrl"] = True
        return row

    def _on_kill(self, ev: EvictionEvent, row: dict) -> None:
        doomed = [p for p in ev.processes if p not in self.killed]
        front_before = self._prog(min)
        self._kill(doomed)
        row["killed_s"] = self.now()
        row["front_clock"] = front_before
        if self.scheme.checkpoints:
            self._restart(doomed, row)
        else:
            retired = all(self.st.check([f"retired/{p}"]) for p in doomed)
            if retired:
                flushed = self.scheme.has_active_ps(row["stage_before"])
                row["recovery"] = "end_of_life_flush" if flushed else "stateless"
                row["rollback_to"] = -1
            else:
                self._rollback(doomed, row)
        row.pop("evicted_in_ctrl", None)
        self.rec.evictions.append(row)

    def _rollback(self, doomed: list[str], row: dict) -> None:
        """Effective failure (§1.6): a new generation from the last consistent BackupPS state."""
        ep = self.ctrl.epoch() if row.get("evicted_in_ctrl") else self.ctrl.evict(doomed)
        g = self.g
        target = min(self._backup_clock(g, p) for p in range(self.n))
        front = self._prog(min)
        self._publish(ep)
        self.st.set(f"genstart/{g + 1}", pickle.dumps((target, ep.eid)))
        self.st.set(f"bind/{g + 1}/{target}", str(ep.eid))
        self.g = g + 1
        self.st.add("gen", 1)
        row["recovery"] = "effective_failure"
        row["rollback_to"] = target
        row["front_clock"] = front
        row["epoch_s"] = self.now()

    def _backup_clock(self, g: int, p: int) -> int:
        """The clock partition p's BackupPS state is consistent at in generation g. A BackupPS that has not
        yet taken up g (a second failure right after a roll-back, on a loaded host) still holds g's start."""
        key = f"bclock/{g}/{p}"
        if g > 0 and not self.st.check([key]):
            return int(pickle.loads(self.st.get(f"genstart/{g}"))[0])
        return int(self.st.get(key))

    def _checkpointing(self, target: int | None, next_at: float) -> tuple[int | None, float]:
        st = self.st
        if target is not None:
            if st.add(f"ckpt/{target}/n", 0) >= self.n:
                manifest = self.ckpt_dir / "latest.json"
                # Atomic: a restart never sees a half-written checkpoint.
                write_text(manifest, json.dumps({"clock": target, "phase": self.phase}))
                self.rec.checkpoints[-1]["done_s"] = self.now()
                target = None
            elif self._prog(min) > target + 2:  # a server was past the clock when asked: ask again
                self.rec.checkpoints[-1]["done_s"] = float("nan")
                target = None
        if target is None and self.now() >= next_at:
            target = self._prog(max) + 2
            st.set("ckpt/at", str(target))
            self.rec.checkpoints.append(
                {"phase": self.phase, "clock": target, "requested_s": self.now(), "done_s": float("nan")}
            )
            # on the simulator's schedule: every interval from the start (not from the last restart)
            while next_at <= self.now():
                next_at += self.ckpt_every_s
        return target, next_at

    def _restart(self, doomed: list[str], row: dict) -> None:
        """Stop the job, and start the survivors from the last complete checkpoint (read from disk)."""
        others = [p for p in self.procs if p not in self.killed]
        self._kill(others)
        row["stopped_s"] = self.now()
        manifest = self.ckpt_dir / "latest.json"
        clock = 0
        params = np.zeros(self.mlr.numel)
        if manifest.exists():
            clock = json.loads(manifest.read_text())["clock"]
            for p, (lo, hi) in enumerate(self.bounds):
                params[lo:hi] = np.load(self.ckpt_dir / f"c{clock}" / f"p{p}.npy")
        self.ctrl.evict(doomed)
        self.killed -= set(others)
        self._start_phase(clock, params)
        row["recovery"] = "checkpoint_rollback"
        row["rollback_to"] = clock
        row["restarted_s"] = self.now()

    def _stop(self) -> None:
        ep = self.ctrl.stop_epoch()
        self._publish(ep)
        self.base.set(f"stopping{self.phase}", "1")
        live = [p for p in self.procs if p not in self.killed]
        for name in live:
            self.procs[name].join(timeout=60)
        self._check_deaths()
        stopped = [int(self.st.get(f"stopped/{p}")) for p in live if self.st.check([f"stopped/{p}"])]
        if not stopped or len(set(stopped)) != 1:
            raise RuntimeError(f"the processes stopped at different clocks: {stopped}")
        clock = stopped[0]
        raw = self.st.multi_get([f"param/{self.g}/{p}/{clock}" for p in range(self.n)])
        self.rec.final_clock = clock
        self.rec.final_params = np.concatenate([np.frombuffer(r, dtype=np.float64) for r in raw])
        self.rec.stop_s = self.now()


_CTX: Any = None


def _context():
    """A forkserver that has imported torch once: a (re)started process is a fork of it, not a fresh
    interpreter, so starting 8 processes costs milliseconds instead of 8 torch imports (seconds each on
    a loaded 2-core host). The checkpoint baseline's restart time therefore excludes interpreter start.
    """
    global _CTX
    if _CTX is None:
        import torch.multiprocessing as mp

        _CTX = mp.get_context("forkserver")
        _CTX.set_forkserver_preload(
            [
                "torch",
                "torch.distributed",
                "clustertwin.runtime.spot.process",
                "clustertwin.runtime.spot.model",
            ]
        )
    return _CTX


def _device(device: str, index: int) -> str:
    if device == "cpu":
        return "cpu"
    import torch

    return f"cuda:{index % max(torch.cuda.device_count(), 1)}"


def run_job(scenario, out_dir: Path) -> JobRecord:
    """Run the scenario's job for real; return the launcher's record (logs are under ``out_dir/logs``)."""
    return Launcher(scenario, out_dir).run()
