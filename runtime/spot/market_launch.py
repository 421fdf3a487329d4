"""The launcher of a market-driven real run (``real.market: true``): the scenario's acquisition policy,
not a fixed schedule, decides which machines the job has ([Proteus] §1.3, §4).

Every poll tick the launcher advances the emulated cloud (``fleet.Fleet``) to the market time of the
wall clock (``real_s_per_sim_h`` real seconds per market hour) and carries out what it reports:

* an allocation has booted (:class:`fleet.Boot`): one training process per instance. Before the job
  has started, the processes wait until the fault-tolerance scheme can run (AgileML: a reliable machine
  for its state) and start together; afterwards each is spawned as a *joiner*: once it is up, the
  controller adds it (``Controller.join``: ActivePS hosts re-chosen, the stage may rise to 3) and
  publishes the epoch it works in — AgileML's scale-up;
* an allocation is warned (:class:`fleet.Leave`): the eviction path of ``launch.Launcher`` (the recovery
  plan, end-of-life flush or roll-back, or the checkpoint restart), SIGKILL at its end; an allocation the
  policy does not renew leaves the same way, killed at the end of its billing hour.

The job is a fixed amount of work: the reference cluster (``job.reference_count`` machines pacing one
clock per ``real.job.step_s``) would do it in ``job.reference_hours`` market hours, so a clock is
``work / total clocks`` work units. The run ends when every partition has applied that many clocks.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from clustertwin.runtime.spot.controller import Controller, Epoch
from clustertwin.runtime.spot.driver import EvictionEvent
from clustertwin.runtime.spot.fleet import Boot, Fleet, Leave, MarketInputs
from clustertwin.runtime.spot.launch import Launcher, _context, _device
from clustertwin.runtime.spot.model import partition_bounds


@dataclass
class _Pending:
    """A Leave the launcher still has to carry out."""

    leave: Leave
    event: EvictionEvent
    unjoined: list[str] = field(default_factory=list)
    warned: bool = False


class MarketLauncher(Launcher):
    """One market-driven real run; see the module docstring."""

    def __init__(self, scenario, out_dir: Path, inputs: MarketInputs) -> None:
        super().__init__(scenario, out_dir)
        real = scenario.real
        self.f = real.real_s_per_sim_h / 3600.0
        self.fleet = Fleet(inputs)
        self.scheme = self.fleet.ft
        ref = inputs.work_rates[inputs.reference_type]
        self.max_machines = max_machines(inputs)
        self.ctrl = Controller([], [], self.scheme, max_machines=self.max_machines)
        self.n = self.ctrl.n_partitions
        self.bounds = partition_bounds(self.mlr.numel, self.n)
        self.rec.n_partitions = self.n
        self.initial_workers = round(inputs.target_rate / ref)
        self.poll_s = scenario.agileml.poll_s * self.f
        self.ckpt_every_s = scenario.checkpoint.interval_s * self.f
        # One clock of the reference cluster is step_s real seconds of its target rate.
        self.work_per_clock = inputs.target_rate * real.job.step_s / self.f / 3600.0
        self.total_clocks = math.ceil(inputs.total_work / self.work_per_clock - 1e-9)
        self.started = False
        self.resume: tuple[int, np.ndarray] = (0, np.zeros(self.mlr.numel))
        self.joiners: dict[str, tuple[bool, float]] = {}  # spawned, not in the controller yet
        self.arrivals: list[tuple[str, bool, float]] = []  # granted before the job started
        # -> (reliable, when it has booted: real seconds)
        self.leaves: list[_Pending] = []
        self.flushing: dict[int, dict] = {}
        self.events = 0  # Leaves seen: the index of the next eviction event
        self.progress_rows: list[dict] = []
        self.why = "start"
        self.end_reason = ""
        self.end_s = math.nan

    # ---- books ---------------------------------------------------------------------------------
    def clocks(self) -> int:
        return self._prog(min) if self.started else self.resume[0]

    def _publish(self, ep: Epoch) -> None:
        super()._publish(ep)
        self.progress_rows.append(
            {
                "time_s": self.now() / self.f,
                "clocks": self.clocks() if self.st is not None else 0,
                "n_reliable": len(self.ctrl.reliable),
                "n_transient": len(self.ctrl.transient),
                "stage": ep.stage,
                "migrations": self.ctrl.migrations,
                "event": "stop" if ep.stop else self.why,
            }
        )

    # ---- processes -----------------------------------------------------------------------------
    def _spawn_joiner(self, name: str, reliable: bool, ready_t: float) -> None:
        from clustertwin.runtime.spot.process import process_main

        spec = dict(self.spec, join=True, device=_device(self.sc.device, len(self.procs)))
        proc = _context().Process(target=process_main, args=(name, self.port, spec), daemon=True)
        proc.start()
        self.procs[name] = proc
        self.joiners[name] = (reliable, ready_t)

    def _admit(self, t: float) -> None:
        """Joiners that have booted and are up enter the controller together, in one new epoch
        (scale-up)."""
        for name, reliable, ready_t in self.arrivals:
            self._spawn_joiner(name, reliable, ready_t)
        self.arrivals = []
        doomed = {n for p in self.leaves for n in p.unjoined}  # warned while booting: never joins
        up = [
            n
            for n in sorted(self.joiners)
            if n not in doomed and self.joiners[n][1] <= t and self.st.check([f"up/{n}"])
        ]
        if not up:
            return
        for reliable in (True, False):
            names = [n for n in up if self.joiners[n][0] is reliable]
            if names:
                self.ctrl.join(names, reliable)
        for n in up:
            del self.joiners[n]
        self.why = "scale_up"
        self._publish(self.ctrl.epoch())
        for n in up:
            self.st.set(f"joined/{n}", "1")

    def _begin(self, t: float) -> None:
        booted = [a for a in self.arrivals if a[2] <= t]
        for reliable in (True, False):
            names = [name for name, r, _ in booted if r is reliable]
            if names:
                self.ctrl.join(names, reliable)
        self.arrivals = [a for a in self.arrivals if a[2] > t]
        if self.ctrl.can_run():
            self.why = "start" if self.phase < 0 else "restart"
            self._start_phase(*self.resume)
            self.started = True

    # ---- what the cloud reports ----------------------------------------------------------------
    def _on_boot(self, boot: Boot) -> None:
        ready_t = boot.ready_s * self.f
        if not self.started:  # the job starts (or restarts) once the scheme can run: see _begin
            self.arrivals += [(name, boot.on_demand, ready_t) for name in boot.names]
        else:
            for name in boot.names:
                self._spawn_joiner(name, boot.on_demand, ready_t)

    def _on_leave(self, leave: Leave) -> None:
        live = set(self.ctrl.live)
        joined = tuple(n for n in leave.names if n in live)
        unjoined = [n for n in leave.names if n not in live]
        index, self.events = self.events, self.events + 1
        event = EvictionEvent(index, leave.warn_s * self.f, leave.kill_s * self.f, joined)
        pending = _Pending(leave, event, unjoined)
        self.leaves.append(pending)

    def _carry_out(self, t: float) -> None:
        for p in list(self.leaves):
            if not p.warned and t >= p.event.warn_s:
                p.warned = True
                if p.event.processes and self.started:
                    self.why = p.leave.reason
                    self.flushing[p.event.index] = self._on_warning(p.event, t)
            if t >= p.event.kill_s:
                self.leaves.remove(p)
                self._kill_leaving(p, t)

    def _kill_leaving(self, p: _Pending, t: float) -> None:
        # processes not in the job (booting, or already leaving on an earlier notice) go at once
        gone = [n for n in p.unjoined if n in self.procs and n not in self.killed]
        self._kill(gone)
        for n in gone:
            self.joiners.pop(n, None)
        self.arrivals = [a for a in self.arrivals if a[0] not in p.unjoined]
        doomed = [n for n in p.event.processes if n not in self.killed]
        if not doomed:
            return
        if not self.started:  # never trained: nothing to recover
            self.ctrl.remove(doomed)
            return
        self.why = p.leave.reason
        row = self.flushing.pop(p.event.index, None) or self._on_warning(p.event, t)
        row["reason"] = p.leave.reason
        self._on_kill(p.event, row)
        lost = row["front_clock"] - row["rollback_to"] if row["rollback_to"] >= 0 else 0
        if p.leave.reason == "evicted":
            self.fleet.record_recovery(p.leave.alloc_id, row["recovery"], lost * self.work_per_clock)

    def _restart(self, doomed: list[str], row: dict) -> None:
        """The checkpoint baseline: stop every process, joiners included, and start the survivors and
        the joiners afresh from the last complete checkpoint — or, with no machine left, as soon as one
        boots."""
        others = [p for p in self.procs if p not in self.killed]
        self._kill(others)
        row["stopped_s"] = self.now()
        clock, params = self._read_checkpoint()
        self.ctrl.remove(doomed)
        self.arrivals += [(name, r, ready_t) for name, (r, ready_t) in sorted(self.joiners.items())]
        self.joiners.clear()
        self.killed -= set(others)
        self.resume = (clock, params)
        self.started = False
        self._begin(self.now())
        row["recovery"] = "checkpoint_rollback"
        row["rollback_to"] = clock
        row["restarted_s"] = self.now()

    def _read_checkpoint(self) -> tuple[int, np.ndarray]:
        import json

        manifest = self.ckpt_dir / "latest.json"
        params = np.zeros(self.mlr.numel)
        if not manifest.exists():
            return 0, params
        clock = json.loads(manifest.read_text())["clock"]
        for p, (lo, hi) in enumerate(self.bounds):
            params[lo:hi] = np.load(self.ckpt_dir / f"c{clock}" / f"p{p}.npy")
        return clock, params

    # ---- the run -------------------------------------------------------------------------------
    def run(self):
        import os
        import signal

        # The forkserver imports torch once, before the market clock starts (not part of any boot).
        warm = _context().Process(target=_warm_up)
        warm.start()
        warm.join()
        self.t0 = time.time()
        self.base.set("t0", repr(self.t0))
        self.base.set("go", "1")
        ckpt_target: int | None = None
        next_ckpt = self.ckpt_every_s
        inputs = self.fleet.inputs
        try:
            actions: list[Any] = self.fleet.start()
            while True:
                t = self.now()
                actions += self.fleet.advance(t / self.f)
                for a in actions:
                    self._on_boot(a) if isinstance(a, Boot) else self._on_leave(a)
                actions = []
                if self.started:
                    self._admit(t)
                else:
                    self._begin(t)
                phase = self.phase
                self._carry_out(t)
                if self.scheme.checkpoints and self.started:
                    if self.phase != phase:
                        ckpt_target = None  # the new processes never saw that request
                    ckpt_target, next_ckpt = self._checkpointing(ckpt_target, next_ckpt)
                self._check_deaths()
                if self.started and self.clocks() >= self.total_clocks:
                    self.end_reason = "job_done"
                elif t >= self.sc.duration_s or t / self.f >= inputs.max_runtime_s:
                    self.end_reason = "max_runtime"
                if self.end_reason:
                    self.end_s = t / self.f
                    self.fleet.end(self.end_s, self.end_reason)
                    break
                time.sleep(max(0.0, self.poll_s - (self.now() - t)))
            # Machines still joining take no part in the final clock. One warned but still in the job
            # finishes its clock and stops with the others: killed mid-clock, it would leave its peers
            # waiting for its update, and the stop clock would never come.
            self._kill(list(self.joiners) + [n for p in self.leaves for n in p.unjoined])
            self.arrivals = []
            if self.started:
                self._stop()
            else:
                self.rec.final_clock, self.rec.final_params = self.resume[0], self.resume[1]
        finally:
            for proc in self.procs.values():
                if proc.is_alive():
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.join(timeout=10)
        self.rec.migrations = self.ctrl.migrations
        return self.rec


def max_machines(inputs: MarketInputs) -> int:
    """The most instances the job can hold at once: the acquisition cap in the slowest type, plus the
    machines held on demand for the whole run."""
    slowest = min(inputs.work_rates[m[0]] for m in inputs.series)
    ref = inputs.work_rates[inputs.reference_type]
    on_demand = inputs.acquisition.on_demand_count(inputs.target_rate, ref)
    spot = int(inputs.max_rate // slowest) if inputs.acquisition.holds_transient else 0
    reliable = inputs.fault_tolerance.reliable_count if inputs.acquisition.holds_transient else 0
    return spot + on_demand + reliable


def _warm_up() -> None:
    """A process that does nothing: starting it starts the forkserver."""
