"""Core pinning (``real.pin_cores``): the order cores are handed out in, the assignment to worker slots, and
that the run's agents and the profile put their processes on the same cores."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest
from clustertwin.runtime import cores
from clustertwin.runtime.gavel import agent
from clustertwin.scenarios.load import load_scenario

from clustertwin.errors import InputError

SCENARIOS = Path(__file__).parents[1] / "scenarios"
PRINT_AFFINITY = "import os, sys; open(sys.argv[1], 'w').write(repr(sorted(os.sched_getaffinity(0))))"
needs_affinity = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no os.sched_setaffinity")


def _fake_host(monkeypatch: pytest.MonkeyPatch, cpus: int) -> None:
    """Allowed CPUs 0..cpus-1, of unknown topology: each its own core, handed out in number order."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: set(range(cpus)))
    monkeypatch.setattr(cores, "read_topology", lambda _: {})


# ------------------------------------------------------------------------------------------ order
def test_physical_cores_come_before_their_smt_siblings() -> None:
    # 4 cores x 2 siblings, numbered as Linux usually does on x86 (cpu n and n+4 share a core) ...
    topology = {cpu: (0, cpu % 4) for cpu in range(8)}
    assert cores.core_order(range(8), topology) == [0, 1, 2, 3, 4, 5, 6, 7]
    # ... or with siblings adjacent (cpu 2c and 2c+1 share core c).
    topology = {cpu: (0, cpu // 2) for cpu in range(8)}
    assert cores.core_order(range(8), topology) == [0, 2, 4, 6, 1, 3, 5, 7]
    # Only the allowed CPUs count: core 0 has one allowed sibling left, core 1 none.
    assert cores.core_order({0, 4, 5, 7}, topology) == [0, 4, 7, 5]


def test_two_packages_are_interleaved() -> None:
    # Package p holds cores 0 and 1 (core ids repeat across packages); cpu n+4 is cpu n's sibling.
    topology = {cpu: ((cpu % 4) // 2, cpu % 2) for cpu in range(8)}
    assert cores.core_order(range(8), topology) == [0, 2, 1, 3, 4, 6, 5, 7]


def test_unknown_topology_makes_each_cpu_its_own_core(tmp_path: Path) -> None:
    for cpu, (package, core) in {0: (0, 0), 1: (0, 0)}.items():
        folder = tmp_path / f"cpu{cpu}" / "topology"
        folder.mkdir(parents=True)
        (folder / "physical_package_id").write_text(f"{package}\n")
        (folder / "core_id").write_text(f"{core}\n")
    topology = cores.read_topology(range(3), tmp_path)
    assert topology == {0: (0, 0), 1: (0, 0)}  # cpu 2 has no topology folder
    assert cores.core_order(range(3), topology) == [0, 2, 1]  # 0 and 1 are siblings; 2 a core of its own
    assert cores.core_order(range(3), {}) == [0, 1, 2]


# ------------------------------------------------------------------------------------------ assignment
WORKERS = [("gpu", "cuda", 1), ("cpu", "cpu", 4), ("cpu_slow", "cpu", 4)]


@pytest.mark.parametrize("threads", [1, 2])
def test_each_cpu_slot_gets_its_threads_and_each_gpu_slot_one_core(threads: int) -> None:
    order = list(range(20, 0, -1))  # handed out in this order, whatever the numbers
    assigned = cores.assign_cores(order, WORKERS, threads)
    assert [len(assigned[name]) for name, _, _ in WORKERS] == [1, 4, 4]
    assert [len(slot) for slot in assigned["gpu"]] == [1]
    assert {len(slot) for name in ("cpu", "cpu_slow") for slot in assigned[name]} == {threads}
    handed = [cpu for name, _, _ in WORKERS for slot in assigned[name] for cpu in slot]
    assert handed == order[: 1 + 8 * threads]  # in order, none twice
    assert cores.assign_cores(order, WORKERS, threads) == assigned  # deterministic


def test_too_few_cpus_is_an_error_naming_the_field_and_the_counts() -> None:
    with pytest.raises(
        ValueError, match=r"real\.pin_cores: 8 CPU worker slots x 2 thread.* 1 GPU.* 17 cores"
    ):
        cores.assign_cores(list(range(16)), WORKERS, 2)


def test_slot_cores_of_a_scenario_and_its_input_error(monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = load_scenario(SCENARIOS / "gavel-real-gpu.yaml")
    _fake_host(monkeypatch, 16)
    assigned = cores.slot_cores(scenario)
    assert assigned == {"gpu": [(0,)], "cpu": [(1,), (2,), (3,), (4,)], "cpu_slow": [(5,), (6,), (7,), (8,)]}
    _fake_host(monkeypatch, 8)  # e.g. half of a 16-CPU host (taskset), for 9 slots
    with pytest.raises(InputError, match=r"yaml: real\.pin_cores: .*need 9 cores.* only 8 CPUs"):
        cores.slot_cores(scenario)


def test_an_agents_cores_option_round_trips() -> None:
    slots = [(0, 8), (1, 9), (2,)]
    assert cores.format_slots(slots) == "0+8,1+9,2"
    assert cores.parse_slots("0+8,1+9,2") == [frozenset(s) for s in slots]


# ------------------------------------------------------------------------------------------ scenarios
def test_pin_cores_is_off_by_default_and_on_for_the_gpu_experiment() -> None:
    cpu = load_scenario(SCENARIOS / "gavel-real-cpu.yaml")  # CI: 2 cores, more slots than cores
    gpu = load_scenario(SCENARIOS / "gavel-real-gpu.yaml")
    assert cpu.real is not None and gpu.real is not None
    assert cpu.real.pin_cores is False and gpu.real.pin_cores is True


def test_the_run_passes_each_agent_its_slots_cores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from clustertwin.runtime.gavel.fleet import Fleet
    from clustertwin.runtime.gavel.run import RealGavel

    def agent_cores(scenario) -> dict[str, str | None]:
        fleet = Fleet(scenario, RealGavel(scenario, tmp_path).layout, None, b"")  # type: ignore[arg-type]
        return {a.name: a.cores for a in fleet.agents}

    _fake_host(monkeypatch, 4)
    pinned = load_scenario(SCENARIOS / "gavel-real-cpu.yaml", ["real.pin_cores=true"])
    assert agent_cores(pinned) == {"cpu-0": "0,1", "cpu_slow-0": "2,3"}  # cpu and cpu_slow: 2 slots each
    unpinned = load_scenario(SCENARIOS / "gavel-real-cpu.yaml")
    assert set(agent_cores(unpinned).values()) == {None}


# ------------------------------------------------------------------------------------------ processes
@needs_affinity
@pytest.mark.parametrize("slots", [[1], [0, 1]])
def test_an_agent_starts_a_job_on_its_slots_cores_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slots: list[int]
) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    first, last = allowed[0], allowed[-1]  # a slot each (the same core on a 1-CPU machine)
    out = tmp_path / "affinity"
    monkeypatch.setattr(agent, "job_command", lambda *_: [sys.executable, "-c", PRINT_AFFINITY, str(out)])
    opts = argparse.Namespace(cores=cores.parse_slots(f"{first},{last}"), secret=b"s", address="127.0.0.1")
    control = argparse.Namespace(address="127.0.0.1:1", get=lambda key: {"0": {"command": ["true"]}})
    settings = {"name": "cpu-0", "device": "cpu", "slowdown": 1.0, "threads": 1}
    worker = agent.Worker(settings, opts, control)  # type: ignore[arg-type]
    job = {
        "job_id": 0, "slots": slots, "log": str(tmp_path / "log"), "checkpoint": str(tmp_path / "c.pt"),
        "key": "job/0/0", "total_steps": 1, "max_steps": 1, "max_seconds": 1.0, "seed": 0,
    }  # fmt: skip
    assert worker._start(job, 0.0).wait(timeout=60) == 0
    assert out.read_text() == repr(sorted({(first, last)[s] for s in slots}))


@needs_affinity
def test_without_cores_a_job_inherits_the_agents_affinity(tmp_path: Path) -> None:
    out = tmp_path / "affinity"
    command = [sys.executable, "-c", PRINT_AFFINITY, str(out)]
    subprocess.run(command, preexec_fn=agent.job_preexec(None), check=True, timeout=60)
    assert out.read_text() == repr(sorted(os.sched_getaffinity(0)))


# ------------------------------------------------------------------------------------------ profile
def test_the_profile_measures_on_the_cores_the_run_gives_each_slot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The measured job on its worker type's first slot(s), each background job on its own slot's cores:
    those of :func:`runtime.cores.slot_cores`, which the run's agents get too."""
    pytest.importorskip("torch")
    from clustertwin.runtime.gavel import profile

    _fake_host(monkeypatch, 4)
    scenario = load_scenario(SCENARIOS / "gavel-real-cpu.yaml", ["real.pin_cores=true"])
    assert cores.slot_cores(scenario) == {"cpu": [(0,), (1,)], "cpu_slow": [(2,), (3,)]}
    measured: list[tuple[str, int, frozenset[int]]] = []
    background: dict[tuple[str, int], list[tuple[str, tuple[int, ...]]]] = {}

    def fake_measure(job_type, scale_factor, worker_type, worker, **kwargs) -> profile.ProfileRow:
        measured.append((worker_type, scale_factor, kwargs["cores"]))
        background[(worker_type, scale_factor)] = list(running)
        return profile.ProfileRow(job_type, scale_factor, worker_type, 1.0, 0.1, 0.1, 1.0, 1.0, 1.0)

    running: list[tuple[str, tuple[int, ...]]] = []

    def fake_start(scenario, worker_type, job_type, workdir, cores) -> profile.Background:
        workdir.mkdir(parents=True)
        (workdir / "ready").write_text("")
        running.append((worker_type, cores))
        process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        return profile.Background(worker_type, job_type, process, workdir / "ready", workdir / "log")

    monkeypatch.setattr(profile, "measure", fake_measure)
    monkeypatch.setattr(profile, "_start_background", fake_start)

    def stop(started: list[profile.Background]) -> None:
        for bg in started:
            bg.process.kill()
            bg.process.wait()
        running.clear()

    monkeypatch.setattr(profile, "_stop", stop)
    profile.profile_scenario(scenario, steps=2, under_load=True)
    assert {(w, sf): set(c) for w, sf, c in measured} == {
        ("cpu", 1): {0},
        ("cpu_slow", 1): {2},
        ("cpu", 2): {0, 1},
        ("cpu_slow", 2): {2, 3},
    }
    assert background == {
        ("cpu", 1): [("cpu", (1,)), ("cpu_slow", (2,)), ("cpu_slow", (3,))],
        ("cpu_slow", 1): [("cpu", (0,)), ("cpu", (1,)), ("cpu_slow", (3,))],
        ("cpu", 2): [("cpu_slow", (2,)), ("cpu_slow", (3,))],
        ("cpu_slow", 2): [("cpu", (0,)), ("cpu", (1,))],
    }


def _advance(workdir: Path, steps: int) -> tuple[int, int]:
    """A fake lease's steps: from where the last lease in ``workdir`` ended, ``steps`` on."""
    mark = workdir / "end"
    start = int(mark.read_text()) if mark.is_file() else 0
    mark.write_text(str(start + steps))
    return start, start + steps


def _fake_run(start: int, end: int):
    from clustertwin.runtime.gavel import profile

    report = {"start_step": start, "end_step": end, "seconds": 1.0, "load_s": 0.1, "save_s": 0.1,
              "window_steps": 0, "window_seconds": 0.0}  # fmt: skip
    return profile.LeaseRun(report, 2.0)


# ------------------------------------------------------------------------------------------ rotation
def test_repeated_measured_leases_take_turns_over_the_slot_groups_and_wrap_around() -> None:
    from clustertwin.runtime.gavel import profile

    assert [profile.lease_slots(4, 1, r) for r in range(6)] == [range(i, i + 1) for i in (0, 1, 2, 3, 0, 1)]
    assert [profile.lease_slots(4, 2, r) for r in range(3)] == [range(0, 2), range(2, 4), range(0, 2)]
    # Three slots and a job of two: one group of two slots (the third slot is never a group's).
    assert [profile.lease_slots(3, 2, r) for r in range(2)] == [range(0, 2), range(0, 2)]
    assert profile.lease_slots(3, 3, 0) == range(0, 3)
    assert [profile.lease_slots(5, 2, r) for r in range(3)] == [range(0, 2), range(2, 4), range(0, 2)]
    assert profile.lease_slots(1, 1, 7) == range(0, 1)


@needs_affinity
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="no /proc/<pid>/task")
def test_pin_process_moves_every_thread_of_a_running_process() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    script = (
        "import threading, time; threading.Thread(target=time.sleep, args=(60,), daemon=True).start();"
        " print('ready', flush=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        task = Path(f"/proc/{child.pid}/task")
        tids = [int(tid) for tid in os.listdir(task)]
        assert len(tids) >= 2  # the main thread and the sleeping one
        for target in ({allowed[-1]}, set(allowed)):
            cores.pin_process(child.pid, target)
            assert {tid: os.sched_getaffinity(tid) for tid in tids} == {tid: target for tid in tids}
    finally:
        child.kill()
        child.wait()
    with pytest.raises(ProcessLookupError):
        cores.pin_process(child.pid, set(allowed))  # reaped: gone


def test_repeated_leases_rotate_and_the_background_swaps_cores_with_the_measured_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """repeats=3 on a type of 2 single-core slots: the measured leases run on slot 0, 1, 0's cores; the
    background job of slot 1 moves to slot 0's core for lease 1 and back after. The warm-up stays on slot
    0; a 2-rank pair (one group) never moves."""
    pytest.importorskip("torch")
    from clustertwin.runtime.gavel import profile

    _fake_host(monkeypatch, 4)
    scenario = load_scenario(SCENARIOS / "gavel-real-cpu.yaml", ["real.pin_cores=true"])
    events: list[tuple] = []
    backgrounds: dict[int, tuple[str, tuple[int, ...]]] = {}  # pid -> (worker type, its slot's cores)

    def fake_start(scenario, worker_type, job_type, workdir, cores) -> profile.Background:
        workdir.mkdir(parents=True)
        (workdir / "ready").write_text("")
        process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        backgrounds[process.pid] = (worker_type, cores)
        return profile.Background(worker_type, job_type, process, workdir / "ready", workdir / "log")

    def fake_pin(pid: int, cores: frozenset[int]) -> None:
        events.append(("pin", *backgrounds[pid], set(cores)))

    def fake_lease(
        job_type,
        sf,
        worker,
        threads,
        workdir,
        max_steps,
        total,
        seed,
        max_seconds=3600.0,
        cores=None,
        program=None,
    ):
        start, end = _advance(workdir, max_steps)
        events.append(("lease", workdir.name, sf, max_steps, set(cores)))
        return _fake_run(start, end)

    monkeypatch.setattr(profile, "_start_background", fake_start)
    monkeypatch.setattr(profile, "pin_process", fake_pin)
    monkeypatch.setattr(profile, "run_job_lease", fake_lease)
    profile.profile_scenario(scenario, steps=4, warmup_steps=2, under_load=True, repeats=3)

    # Group the events by pair: a lease's workdir is named by the pair's index in the plan.
    todo, _ = profile.plan(scenario)
    by_pair: dict[int, list[tuple]] = {}
    index = -1
    for event in events:
        if event[0] == "lease":
            index = int(event[1])
            event = (event[0], *event[2:])
        by_pair.setdefault(index, []).append(event)
    assert sorted(by_pair) == list(range(len(todo)))
    warmup, lease = ("lease", 1, 2), ("lease", 1, 4)
    rotated = {
        "cpu": [
            (*warmup, {0}),
            (*lease, {0}),
            ("pin", "cpu", (1,), {0}),  # slot 1's background onto slot 0's core for lease 1 ...
            (*lease, {1}),
            ("pin", "cpu", (1,), {1}),  # ... and back
            (*lease, {0}),
        ],
        "cpu_slow": [
            (*warmup, {2}),
            (*lease, {2}),
            ("pin", "cpu_slow", (3,), {2}),
            (*lease, {3}),
            ("pin", "cpu_slow", (3,), {3}),
            (*lease, {2}),
        ],
    }
    both = {"cpu": {0, 1}, "cpu_slow": {2, 3}}  # a 2-rank job: one group of two slots, nothing moves
    for index, (_, sf, worker_type) in enumerate(todo):
        if sf == 1:
            assert by_pair[index] == rotated[worker_type]
        else:
            assert (
                by_pair[index]
                == [("lease", 2, 2, both[worker_type])] + [("lease", 2, 4, both[worker_type])] * 3
            )


# ------------------------------------------------------------------------------------------ GPU beside CPU
class _FakeProcess:
    """A background job's process: alive until killed."""

    pids = iter(range(10**6, 2 * 10**6))

    def __init__(self) -> None:
        self.pid, self.returncode = next(self.pids), None

    def poll(self) -> int | None:
        return self.returncode

    def kill(self) -> None:
        self.returncode = -9

    def wait(self) -> int | None:
        return self.returncode


def _profile_gpu_scenario(
    monkeypatch: pytest.MonkeyPatch, pinned: bool, fail: str | None = None
) -> tuple[list[tuple], list, object]:
    """Profile scenarios/gavel-real-gpu.yaml under load with faked job and background processes (a GPU
    lease sleeps 0.1 s, a CPU lease 5 ms; ``fail``: the second GPU or CPU pair's measured lease raises).
    Returns the events in the order they happened: ("ready"/"stop", group) for a background, ("start"/
    "end", device, pair, cores) for a lease; the plan; and the rows, or the exception raised."""
    pytest.importorskip("torch")
    import threading
    import time

    from clustertwin.runtime.gavel import profile

    _fake_host(monkeypatch, 16)
    monkeypatch.setattr(profile, "_check_cuda", lambda _: None)
    scenario = profile.load_for_profiling(SCENARIOS / "gavel-real-gpu.yaml", [f"real.pin_cores={pinned}"])
    events: list[tuple] = []
    lock = threading.Lock()
    started: list[profile.Background] = []

    def record(*event) -> None:
        with lock:
            events.append(event)

    def fake_start(scenario, worker_type, job_type, workdir, cores) -> profile.Background:
        workdir.mkdir(parents=True)
        (workdir / "ready").write_text("")
        started.append(profile.Background(worker_type, job_type, _FakeProcess(), workdir / "ready", workdir))
        return started[-1]

    real_wait_ready, real_stop = profile._wait_ready, profile._stop

    def wait_ready(backgrounds) -> None:
        real_wait_ready(backgrounds)
        record("ready", backgrounds[0].process.pid)

    def stop(backgrounds) -> None:
        real_stop(backgrounds)
        if backgrounds:
            record("stop", backgrounds[0].process.pid)

    def fake_lease(
        job_type,
        sf,
        worker,
        threads,
        workdir,
        max_steps,
        total,
        seed,
        max_seconds=3600.0,
        cores=None,
        program=None,
    ):
        start, end = _advance(workdir, max_steps)
        record("start", worker.device, workdir.name, set(cores or ()))
        time.sleep(0.1 if worker.device == "cuda" else 0.005)
        record("end", worker.device, workdir.name, set(cores or ()))
        second = {"cuda": todo[3], "cpu": todo[4]}.get(fail)  # the second pair of the failing device
        if start > 0 and second is not None and workdir.name == str(todo.index(second)):
            raise profile.ProfileError(f"{job_type} failed")
        return _fake_run(start, end)

    monkeypatch.setattr(profile, "_start_background", fake_start)
    monkeypatch.setattr(profile, "_wait_ready", wait_ready)
    monkeypatch.setattr(profile, "_stop", stop)
    monkeypatch.setattr(profile, "pin_process", lambda pid, cores: None)
    monkeypatch.setattr(profile, "run_job_lease", fake_lease)
    todo, _ = profile.plan(scenario)
    assert [w for _, _, w in todo[:6]] == ["gpu", "cpu", "cpu_slow"] * 2  # todo[3], todo[4]: second pairs
    try:
        result = profile.profile_scenario(scenario, steps=4, warmup_steps=2, under_load=True)
    except profile.ProfileError as err:
        result = err
    assert started and all(bg.process.returncode is not None for bg in started)  # every background stopped
    return events, todo, result


def test_pinned_gpu_pairs_are_measured_beside_the_cpu_pairs_under_their_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events, todo, rows = _profile_gpu_scenario(monkeypatch, pinned=True)
    assert [(r.job_type, r.scale_factor, r.worker_type) for r in rows] == todo  # every pair, in order
    assert {r.mode for r in rows} == {"under-load"}
    # Two backgrounds (the cpu and the cpu_slow group's); none for the gpu group.
    assert [e[0] for e in events if e[0] in ("ready", "stop")] == ["ready", "stop"] * 2
    # The discarded GPU lease comes first, alone; every later GPU lease starts and ends while a CPU
    # group's background is up, which no GPU lease sees stop.
    warm = [("start", "cuda", "warm-gpu", {0}), ("end", "cuda", "warm-gpu", {0})]
    assert events[:4] == warm * 2  # its warm-up and measured lease
    up, gpu_open, overlapped, gpu_leases = False, 0, False, 0
    for event in events[4:]:
        if event[0] in ("ready", "stop"):
            assert not (event[0] == "stop" and gpu_open), "a background stopped under a GPU lease"
            up = event[0] == "ready"
        elif event[1] == "cuda":
            assert up and event[3] == {0}, event  # loaded; on the gpu slot's core
            gpu_open += 1 if event[0] == "start" else -1
            gpu_leases += event[0] == "start"
        else:
            assert 0 not in event[3], event  # a CPU lease never on the GPU job's core
            overlapped |= event[0] == "start" and gpu_open > 0
    assert gpu_leases == 4 * 2 and overlapped  # 4 GPU pairs of 2 leases, beside CPU leases


def test_unpinned_every_pair_is_measured_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    events, todo, rows = _profile_gpu_scenario(monkeypatch, pinned=False)
    assert [(r.job_type, r.scale_factor, r.worker_type) for r in rows] == todo
    assert [e[0] for e in events if e[0] in ("ready", "stop")] == ["ready", "stop"] * 3  # gpu's own too
    leases = [e for e in events if e[0] in ("start", "end")]
    assert [e[0] for e in leases] == ["start", "end"] * (len(leases) // 2)  # one at a time


@pytest.mark.parametrize("side", ["cuda", "cpu"])
def test_a_failure_on_either_side_ends_the_profile_with_every_background_stopped(
    monkeypatch: pytest.MonkeyPatch, side: str
) -> None:
    events, _, error = _profile_gpu_scenario(monkeypatch, pinned=True, fail=side)
    from clustertwin.runtime.gavel import profile

    assert isinstance(error, profile.ProfileError)  # raised out of profile_scenario (backgrounds: above)
    ready = sum(e[0] == "ready" for e in events)
    assert ready == sum(e[0] == "stop" for e in events) >= 1
    # A failed CPU pair stops the GPU pairs not yet started: at most the one in flight finishes.
    gpu_pairs = {e[2] for e in events if e[0] == "start" and e[1] == "cuda" and e[2] != "warm-gpu"}
    assert len(gpu_pairs) < 4
