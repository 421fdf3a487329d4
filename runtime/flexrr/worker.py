"""One FlexRR process of a real run ([Harlap], ch. 3): a worker training the scenario's torch model under
BSP/SSP with RapidReassignment, or a parameter-server shard (``runtime/flexrr/ps.py``).

The decisions are ``policies.flexrr.worker.RRWorker``'s; a worker processes items in chunks of one
message-check interval (§3.3.2), checks its mailbox between chunks, injects the scenario's straggler
profile by sleeping (the same ``SpeedProfile`` objects the simulator uses, like the paper's sleeps
between items, §3.4.1), and carries out commits and iteration completions on the sharded parameter
server: a ``Commit`` pushes the range's update to every shard, an ``IterationDone`` declares the
iteration's ranges (own items and all reassigned ones, §3.3.3), and a read pulls the model the SSP rule
allows. The control plane stays on the job's store (key prefix ``flexrr/<run>/``): the mailbox,
``iterdone/{k}`` (how many workers completed iteration ``k``: the SSP gate, after which the read's pull
is answered at once) and ``finished``.

Straggler pacing (``real.pacing``): ``profile`` makes each chunk last exactly what the profile says
(real compute hidden inside; CPU CI runs), ``compute`` lets the chunk take its real compute and sleeps the
profile's excess over nominal speed on top (GPU runs, where the compute is what is measured).

On ``real.device: cuda`` worker ``w`` trains on ``cuda:<w mod gpus>``; the model, data and update
buffers live there, and a chunk's time is taken after ``torch.cuda.synchronize`` so it is the real
compute. Updates cross the data plane as CPU tensors. The default process group (gloo) only serves
barriers; the data plane is a gloo group of its own, bound to each machine's address.

One process can run several scenarios in a row (``runtime.flexrr.launch.run_real_many``): a GPU
experiment then pays process start, CUDA initialisation and data generation once.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import torch
import torch.distributed as dist
from clustertwin.policies.flexrr.consistency import gating_iteration
from clustertwin.policies.flexrr.groups import machine_of
from clustertwin.policies.flexrr.messages import Commit, IterationDone, Message, Wasted
from clustertwin.policies.flexrr.worker import Phase
from clustertwin.runtime.flexrr.mailbox import StoreMailbox
from clustertwin.runtime.flexrr.model import Problem, Trainer, problem_for
from clustertwin.runtime.flexrr.ps import PSClient, data_plane, host_address, serve
from clustertwin.runtime.launch import join, report
from clustertwin.scenarios.flexrr_schema import FlexRRReal, FlexRRScenario

from clustertwin.atomic import write_bytes, write_text


def pick_device(rt: FlexRRReal, rank: int) -> torch.device:
    """``cpu``, or ``cuda:<rank mod gpus>`` (all workers of a launch run on this host, so the rank is the
    local index)."""
    if rt.device == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("real.device=cuda, but torch sees no CUDA device")
    visible = torch.cuda.device_count()
    gpus = rt.gpus or visible
    if gpus > visible:
        raise RuntimeError(f"real.gpus={gpus}, but only {visible} CUDA devices are visible")
    device = torch.device(f"cuda:{rank % gpus}")
    torch.cuda.set_device(device)
    return device


def shards(scenario: FlexRRScenario) -> int:
    """How many PS shards a real run starts (``ps.shards``; None: one per machine, §3.2)."""
    return scenario.ps.shards or scenario.cluster.machines


def address(scenario: FlexRRScenario, rank: int) -> str:
    """The data-plane address of process ``rank``: worker w on its machine, shard j on machine j mod M."""
    c = scenario.cluster
    machine = machine_of(rank, c.machines) if rank < c.workers else (rank - c.workers) % c.machines
    return host_address(machine, scenario.real.emulated_hosts)


def process_main(rank: int, scenarios_json: list[str], out_dir: str) -> None:
    """Entry point of one process (started by ``runtime.flexrr.launch`` through ``runtime.launch``):
    ranks below the worker count are workers, the others PS shards. Each scenario runs in turn; a
    worker writes ``out_dir/run{i}/rank{rank}.json``, a shard ``shard{j}.pt`` (its slice of every
    iteration's update). Worker 0 ``report``s each scenario's index as it finishes."""
    scenarios = [FlexRRScenario.model_validate_json(j) for j in scenarios_json]
    workers = scenarios[0].cluster.workers
    device = pick_device(scenarios[0].real, rank) if rank < workers else torch.device("cpu")
    # gloo even on CUDA: the default group only serves barriers; one thread per process, one worker per
    # core (§3.2); the launcher's store carries the control plane
    member = join("cpu", "gloo", threads=1)
    world, store = member.world, member.store
    pg = data_plane(store, rank, world, address(scenarios[0], rank), "flexrr/ps")
    trainers: dict[Problem, Trainer] = {}
    for i, scenario in enumerate(scenarios):
        ns, run_dir = f"flexrr/{i}", Path(out_dir) / f"run{i}"
        run_dir.mkdir(parents=True, exist_ok=True)
        if rank >= workers:
            dtype = getattr(torch, scenario.real.dtype)
            size = int(store.get(f"{ns}/size").decode())  # worker 0 announces the model's size
            dist.barrier()
            updates = serve(pg, rank - workers, world - workers, workers, size, dtype)
            buf = io.BytesIO()
            torch.save(updates, buf)
            write_bytes(run_dir / f"shard{rank - workers}.pt", buf.getvalue())
            dist.barrier()
            continue
        out = _run_one(ns, rank, workers, scenario, store, device, trainers, pg, world - workers)
        write_text(run_dir / f"rank{rank}.json", json.dumps(out))
        if rank == 0:
            report(i)  # the launcher's progress: every worker is past this run's closing barrier
    dist.destroy_process_group()


def _message_row(msg: Message, sent_s: float, arrived_s: float) -> list:
    """A ``messages`` row (``scenarios.flexrr_results``), as the simulator writes it."""
    return [
        type(msg).__name__,
        msg.src,
        msg.dst,
        sent_s,
        arrived_s,
        getattr(msg, "iteration", -1),
        getattr(msg, "start", -1),
        getattr(msg, "end", -1),
    ]


def _probe(store: dist.Store, rank: int, world: int, ns: str, rounds: int, poll_s: float) -> list[float]:
    """Mailbox round trips between workers 2j and 2j+1 (all pairs at once, as in training). The waiting
    side polls like an idle worker does (poll, then sleep ``poll_s``), so RTT / 2 is the one-way time from
    a send until an idle receiver has the message: what the simulator's ``latency_s`` stands for."""
    box = StoreMailbox(store, rank, f"{ns}/probe")
    partner = rank ^ 1
    rtts: list[float] = []
    if partner >= world:
        return rtts

    def wait() -> None:
        while not box.poll():
            time.sleep(poll_s)

    for i in range(rounds):
        if rank % 2 == 0:
            t = time.perf_counter()
            box.send(partner, i)
            wait()
            rtts.append(time.perf_counter() - t)
        else:
            wait()
            box.send(partner, i)
    return rtts


def _run_one(
    ns: str,
    rank: int,
    world: int,
    scenario: FlexRRScenario,
    store: dist.Store,
    device: torch.device,
    trainers: dict[Problem, Trainer],
    pg: dist.ProcessGroup,
    n_shards: int,
) -> dict:
    # the sim's builders give every process the same groups, ranges and straggler realisation
    from clustertwin.scenarios.flexrr_setup import items_per_worker, machines, profiles

    rt = scenario.real
    items = items_per_worker(scenario)
    machine = machines(scenario, items)[rank]
    profile = profiles(scenario)[rank]
    problem = problem_for(scenario, sum(items))
    if problem not in trainers:
        trainers.clear()  # one data set at a time on the device
        trainers[problem] = Trainer(problem, device)
    trainer = trainers[problem]
    w0 = trainer.w0
    if rank == 0:
        store.set(f"{ns}/size", str(trainer.size))
    client = PSClient(pg, rank, world, n_shards, w0.cpu())
    slack = scenario.effective_slack
    nominal = scenario.items_per_worker
    check_every = machine.check_every
    mailbox = StoreMailbox(store, rank, f"{ns}/mbox")
    cuda = device.type == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)  # kernels are asynchronous: time the real compute

    # warm-up outside the timed run: cuBLAS handles and kernel selection cost far more on the first call
    trainer.delta_items(w0, machine.lo, min(machine.hi, machine.lo + check_every))
    sync()

    models: dict[int, torch.Tensor] = {}  # W_0 + U_0 + ... + U_{need-1}, by need
    buffers: dict[tuple[int, int, int], torch.Tensor] = {}
    log_iterations: list[list] = []
    log_commits: list[list] = []
    log_messages: list[list] = []
    wasted = 0
    compute_s = 0.0

    def model_for(iteration: int) -> torch.Tensor:
        need = max(0, iteration - slack)  # W_t = W_0 + sum of U_k, k <= t - slack - 1
        if need not in models:
            models[need] = w0 if need == 0 else w0 + client.pull(need).to(device)
            for old in [k for k in models if k < need - slack - 1]:
                del models[old]  # no task reads further back than its own slack
        return models[need]

    rtts = _probe(store, rank, world, ns, rt.probe_round_trips, rt.poll_s) if rt.probe_round_trips else []
    dist.barrier()  # §3.3.2: the runtime timers start after a joint barrier
    # one epoch for all processes (rank 0's wall clock; they share a host), so event times are comparable
    if rank == 0:
        store.set(f"{ns}/t0", repr(time.time()))
    t_start = float(store.get(f"{ns}/t0").decode())

    def now() -> float:
        return time.time() - t_start

    def dispatch(actions: list) -> None:
        nonlocal wasted
        for a in actions:
            if isinstance(a, Commit):
                client.push(a.iteration, a.owner, a.start, buffers.pop((a.owner, a.iteration, a.start)))
                log_commits.append([a.owner, a.iteration, a.start, a.end, a.by, a.kind, now()])
            elif isinstance(a, IterationDone):
                starts = sorted([machine.lo] + [o.start for o in machine.out.values()])
                client.done(a.iteration, starts)
                store.add(f"{ns}/iterdone/{a.iteration}", 1)
                log_iterations.append([a.worker, a.iteration, a.started_at, a.own_done_at, a.done_at])
                if a.iteration + 1 == scenario.iterations:
                    store.add(f"{ns}/finished", 1)
            elif isinstance(a, Wasted):
                wasted += a.items
            else:
                mailbox.send(a.dst, a, now())

    odo = 0  # items processed by this process, of any kind (the straggler profile's work clock)
    owed = 0.0  # compute pacing: injected sleep still owed (a sleep that overshot is paid back)
    while True:
        for sent_s, msg in mailbox.poll():
            t = now()
            log_messages.append(_message_row(msg, sent_s, t))
            dispatch(machine.receive(t, msg))
        task = machine.task()
        if task is not None:
            k = min(machine.items_until_stop(), check_every - odo % check_every)
            t0 = now()
            w = model_for(task.iteration)
            key = (task.owner, task.iteration, task.origin)
            part = trainer.delta_items(w, task.start, task.start + k)
            buffers[key] = buffers[key] + part if key in buffers else part
            sync()
            spent = now() - t0
            compute_s += spent
            target = profile.elapsed(t0, odo / nominal, k / nominal)
            if rt.pacing == "profile":
                if target - spent > 0:
                    time.sleep(target - spent)
            else:
                owed += target - profile.iteration_s * k / nominal  # the slowdown's extra time only
                if owed > 0:
                    s0 = now()
                    time.sleep(owed)
                    owed -= now() - s0
            odo += k
            dispatch(machine.advance(now(), k))
            continue
        if machine.ready_for_iteration():
            need = gating_iteration(machine.iteration, slack)
            if need == 0 or store.add(f"{ns}/iterdone/{need - 1}", 0) == world:
                dispatch(machine.start_iteration(now()))
                continue
        if machine.phase is Phase.FINISHED and store.add(f"{ns}/finished", 0) == world:
            break
        time.sleep(rt.poll_s)

    makespan = now()
    final = model_for(scenario.iterations + slack) if rank == 0 else None  # every U_k, k < iterations
    client.stop()
    dist.barrier()
    return {
        "rank": rank,
        "device": str(device),
        "iterations": log_iterations,
        "commits": log_commits,
        "messages": log_messages,
        "wasted": wasted,
        "final": final.cpu().tolist() if final is not None else None,
        "ps_bytes_pushed": client.bytes_pushed,
        "ps_bytes_pulled": client.bytes_pulled,
        "makespan_s": makespan,
        "compute_s": compute_s,
        "items_processed": odo,
        "probe_rtt_s": rtts,
    }
