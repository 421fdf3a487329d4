"""Core pinning (``real.pin_cores``): the order cores are handed out in, the assignment to worker slots, and
that the run's agents and the profile put their processes on the same cores."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import agent, cores
from scenarios.errors import InputError
from scenarios.load import load_scenario

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
    from runtime.gavel import RealGavel

    _fake_host(monkeypatch, 4)
    pinned = load_scenario(SCENARIOS / "gavel-real-cpu.yaml", ["real.pin_cores=true"])
    args = {a.name: a.args for a in RealGavel(pinned, tmp_path).agents}  # cpu and cpu_slow: 2 slots each
    assert {name: a[a.index("--cores") + 1] for name, a in args.items()} == {
        "cpu-0": "0,1",
        "cpu_slow-0": "2,3",
    }
    unpinned = load_scenario(SCENARIOS / "gavel-real-cpu.yaml")
    assert not any("--cores" in a.args for a in RealGavel(unpinned, tmp_path).agents)


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
    opts = argparse.Namespace(
        device="cpu", threads=1, slowdown=1.0, cores=cores.parse_slots(f"{first},{last}")
    )
    control = argparse.Namespace(host="127.0.0.1", port=0)
    worker = agent.Worker(opts, control)
    assert worker._start({"slots": slots, "log": str(tmp_path / "log")}).wait(timeout=60) == 0
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
    from runtime import profile

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
