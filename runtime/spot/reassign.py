"""Stragglers and FlexRR's RapidReassignment inside AgileML's real workers ([Harlap] ch. 3, §6.2.1).

A clock's global batch is split over the epoch's workers as usual; worker ``i`` owns items [lo, hi) of
it. With a ``stragglers`` section each worker processes its items in chunks of one message-check
interval (§3.3.2), sleeping after each chunk what its straggler profile says the chunk takes (the
FlexRR kind's ``SpeedProfile`` objects, one per process, paced like a machine of ``step_s`` per
reference share), and, in mode ``bsp_rr``, runs ``policies.flexrr.worker.RRWorker`` over a store
mailbox: a straggler's peers take items off the end of its range and commit their updates themselves.
Each worker pushes the sum of the ranges it committed; since an update is linear in the items, the
servers' sum is the clock's update whoever computed which range, so the model still equals the serial
replay of its clocks. The clock is BSP: a worker pushes once every worker of the clock has completed it
(own items and every range reassigned away), helping others meanwhile.

The machine's state lives for one epoch (one worker set); a new epoch or a roll-back starts afresh.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from clustertwin.policies.flexrr import RRConfig, RRWorker, helper_groups
from clustertwin.policies.flexrr.groups import helpee_groups
from clustertwin.policies.flexrr.messages import Commit, IterationDone, Wasted
from clustertwin.policies.flexrr.straggler_models import StragglerParams, straggler_model
from clustertwin.runtime.flexrr.mailbox import StoreMailbox
from clustertwin.runtime.spot.model import share_bounds, update

POLL_S = 0.002
STRAGGLER_STREAM = 0x5707


class Reassigning:
    """One process's worker side under stragglers (see the module docstring)."""

    def __init__(self, name: str, spec: dict[str, Any]) -> None:
        s = spec["stragglers"]
        self.rr = s["mode"] == "bsp_rr"
        params = StragglerParams(
            delay=s["delay"],
            probability=s["probability"],
            points_per_iteration=s["points_per_iteration"],
            max_duration=s["max_duration"],
            period_s=s["period_s"],
            alpha=s["alpha"],
            heavy_share=s["heavy_share"],
            heavy_machines=s["heavy_machines"],
        )
        number = int(name[1:]) + (0 if name[0] == "r" else 1000)

        def rng(*key: int) -> np.random.Generator:
            return np.random.default_rng(
                np.random.SeedSequence([spec["seed"], STRAGGLER_STREAM, number, *key])
            )

        self.profile = straggler_model(s["model"]).profiles(params, [spec["step_s"]], 1, rng)[0]
        self.odo = 0  # items processed, of any kind: the profile's work clock
        self.key: tuple[int, int] | None = None
        self.machine: RRWorker | None = None
        self.box: StoreMailbox | None = None

    def reset(self) -> None:
        self.key = None

    def clock(self, proc: Any, ep: Any, g: int, c: int, i: int, w: Any) -> np.ndarray:
        """Process clock ``c`` as worker ``i`` of epoch ``ep`` and return this process's update."""
        problem, st = proc.problem, proc.st
        n = len(ep.workers)
        if self.key != (g, ep.eid):
            lo, hi = share_bounds(problem.batch, n, i)
            size = 4 if self.rr and n > 1 else 0
            cfg = RRConfig(helper_group_size=size, message_checks=max(1, min(10, hi - lo)))
            helpers = helper_groups(n, n, size) if size else [()] * n
            helpees = helpee_groups(helpers) if size else [()] * n
            self.machine = RRWorker(i, lo, hi, helpers[i], helpees[i], cfg, 1 << 30)
            self.box = StoreMailbox(st, i, f"rr/{g}/{ep.eid}")
            self.key = (g, ep.eid)
        machine, box = self.machine, self.box
        assert machine is not None and box is not None
        nominal = problem.batch / proc.spec["initial_workers"]
        iteration = machine.iteration  # this clock's
        acc = np.zeros(problem.numel)
        buffers: dict[tuple[int, int, int], Any] = {}
        done = False

        def dispatch(actions: list) -> None:
            nonlocal acc, done
            for a in actions:
                if isinstance(a, Commit):
                    part = buffers.pop((a.owner, a.iteration, a.start), None)
                    if part is not None:
                        acc = acc + part.cpu().numpy()
                    # [start, end) of the clock's global batch: every item is committed once, by someone
                    owner = ep.workers[a.owner]
                    proc.log(ev="commit", c=c, g=g, owner=owner, start=a.start, end=a.end, kind=a.kind)
                    if a.owner != i:  # a range reassigned to this worker
                        proc.log(ev="helped", c=c, g=g, owner=owner, items=a.end - a.start)
                elif isinstance(a, IterationDone):
                    if a.worker == i:
                        done = True
                        st.add(f"rrdone/{g}/{ep.eid}/{a.iteration}", 1)
                elif isinstance(a, Wasted):
                    pass
                else:
                    box.send(a.dst, a, proc.now())

        dispatch(machine.start_iteration(proc.now()))
        check = machine.check_every
        while True:
            for _sent, msg in box.poll():
                dispatch(machine.receive(proc.now(), msg))
            task = machine.task()
            # help asked for the next clock waits for it: its model does not exist yet
            if task is not None and task.iteration == iteration:
                k = min(machine.items_until_stop(), check - self.odo % check)
                t0 = proc.now()
                idx = problem.batch_indices(c)[task.start : task.start + k]
                part = update(problem, proc.x[idx], proc.y[idx], w)
                key = (task.owner, task.iteration, task.origin)
                buffers[key] = buffers[key] + part if key in buffers else part
                spare = self.profile.elapsed(t0, self.odo / nominal, k / nominal) - (proc.now() - t0)
                if spare > 0:
                    time.sleep(spare)
                self.odo += k
                dispatch(machine.advance(proc.now(), k))
                continue
            if done and st.add(f"rrdone/{g}/{ep.eid}/{iteration}", 0) >= n:
                return acc
            proc.service()
            time.sleep(POLL_S)
