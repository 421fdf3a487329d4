"""One FlexRR worker process: real MLR training under BSP/SSP with RapidReassignment (seed 000, ch. 3).

The decisions are ``policies.flexrr.worker.RRWorker``'s; this executor processes items in chunks of one
message-check interval (§3.3.2), checks its mailbox between chunks, sleeps to inject the scenario's
straggler profile (the same ``SpeedProfile`` objects the simulator uses: after computing a chunk it
sleeps until ``profile.elapsed`` has passed, like the paper's sleeps between items), and carries out
commits and iteration completions on a store-backed parameter table:

* ``flexrr/upd/{k}/{owner}/{start}``: the update of one committed range of ``owner``'s iteration ``k``;
* ``flexrr/done/{k}/{owner}``: the starts of all of ``owner``'s committed ranges of iteration ``k``,
  written when its iteration is complete (own items and all reassigned ones, §3.3.3);
* ``flexrr/iterdone/{k}``: how many workers completed iteration ``k`` (the SSP gate).
"""

from __future__ import annotations

import json
import os
import pickle
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from policies.flexrr.consistency import gating_iteration
from policies.flexrr.messages import Commit, IterationDone, Wasted
from policies.flexrr.worker import Phase
from runtime.flexrr.mailbox import StoreMailbox
from runtime.flexrr.model import MLRProblem, delta
from scenarios.flexrr_schema import FlexRRScenario

POLL_S = 0.002


def worker_main(rank: int, world: int, scenario_json: str, out_dir: str, port: int) -> None:
    """Entry point of one worker process (spawned by ``runtime.flexrr.launch``)."""
    # the sim's builders give every process the same groups, ranges and straggler realisation
    from scenarios.flexrr_setup import items_per_worker, machines, profiles

    torch.set_num_threads(1)
    scenario = FlexRRScenario.model_validate_json(scenario_json)
    store = dist.TCPStore("127.0.0.1", port, world, rank == 0, timeout=timedelta(seconds=120))
    dist.init_process_group("gloo", store=dist.PrefixStore("pg", store), rank=rank, world_size=world)
    items = items_per_worker(scenario)
    machine = machines(scenario, items)[rank]
    profile = profiles(scenario)[rank]
    problem = MLRProblem(items=sum(items), seed=scenario.seed)
    x, y = problem.data()
    w0 = problem.initial()
    slack = scenario.effective_slack
    nominal = scenario.items_per_worker
    check_every = max(1, round(machine.n / scenario.rr.message_checks))
    mailbox = StoreMailbox(store, rank)
    updates: list[torch.Tensor] = []  # U_0, U_1, ... loaded so far (complete iterations only)
    buffers: dict[tuple[int, int, int], torch.Tensor] = {}
    log_iterations: list[list] = []
    log_commits: list[list] = []
    wasted = 0

    def load_through(k: int) -> None:
        while len(updates) <= k:
            j = len(updates)
            total = torch.zeros_like(w0)
            for owner in range(world):
                for start in pickle.loads(store.get(f"flexrr/done/{j}/{owner}")):
                    total += pickle.loads(store.get(f"flexrr/upd/{j}/{owner}/{start}"))
            updates.append(total)

    def model_for(iteration: int) -> torch.Tensor:
        need = iteration - slack  # W_t = W_0 + sum of U_k, k <= t - slack - 1
        load_through(need - 1)
        return w0 + sum(updates[: max(0, need)], torch.zeros_like(w0))

    dist.barrier()  # §3.3.2: the runtime timers start after a joint barrier
    # one epoch for all processes (rank 0's wall clock; they share a host), so event times are comparable
    if rank == 0:
        store.set("flexrr/t0", repr(time.time()))
    t_start = float(store.get("flexrr/t0").decode())

    def now() -> float:
        return time.time() - t_start

    def dispatch(actions: list) -> None:
        nonlocal wasted
        for a in actions:
            if isinstance(a, Commit):
                buf = buffers.pop((a.owner, a.iteration, a.start))
                store.set(f"flexrr/upd/{a.iteration}/{a.owner}/{a.start}", pickle.dumps(buf))
                log_commits.append([a.owner, a.iteration, a.start, a.end, a.by, a.kind, now()])
            elif isinstance(a, IterationDone):
                starts = sorted([machine.lo] + [o.start for o in machine.out.values()])
                store.set(f"flexrr/done/{a.iteration}/{rank}", pickle.dumps(starts))
                store.add(f"flexrr/iterdone/{a.iteration}", 1)
                log_iterations.append([a.worker, a.iteration, a.started_at, a.own_done_at, a.done_at])
                if a.iteration + 1 == scenario.iterations:
                    store.add("flexrr/finished", 1)
            elif isinstance(a, Wasted):
                wasted += a.items
            else:
                mailbox.send(a.dst, a)

    odo = 0  # items processed by this process, of any kind (the straggler profile's work clock)
    while True:
        for msg in mailbox.poll():
            dispatch(machine.receive(now(), msg))
        task = machine.task()
        if task is not None:
            k = min(machine.items_until_stop(), check_every - odo % check_every)
            t0 = now()
            w = model_for(task.iteration)
            key = (task.owner, task.iteration, task.origin)
            part = delta(problem, x[task.start : task.start + k], y[task.start : task.start + k], w)
            buffers[key] = buffers[key] + part if key in buffers else part
            target = profile.elapsed(t0, odo / nominal, k / nominal)
            spare = target - (now() - t0)
            if spare > 0:
                time.sleep(spare)
            odo += k
            dispatch(machine.advance(now(), k))
            continue
        if machine.ready_for_iteration():
            need = gating_iteration(machine.iteration, slack)
            if need == 0 or store.add(f"flexrr/iterdone/{need - 1}", 0) == world:
                dispatch(machine.start_iteration(now()))
                continue
        if machine.phase is Phase.FINISHED and store.add("flexrr/finished", 0) == world:
            break
        time.sleep(POLL_S)

    final = model_for(scenario.iterations + slack)  # every U_k, k < iterations
    dist.barrier()
    out = {
        "rank": rank,
        "iterations": log_iterations,
        "commits": log_commits,
        "wasted": wasted,
        "final": final.tolist() if rank == 0 else None,
        "makespan_s": now(),
    }
    path = Path(out_dir) / f"rank{rank}.json"
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(out))
    os.replace(tmp, path)
    dist.destroy_process_group()
