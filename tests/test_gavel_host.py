"""A host's cores shared by its worker slots (``cluster.host``, ``sim.gavel.host``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from clustertwin.scenarios.load import load_scenario
from clustertwin.sim.gavel.host import HostModel, host_model
from clustertwin.sim.gavel.setup import build
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
REAL_CPU = ROOT / "scenarios/gavel-real-cpu.yaml"


@given(
    cores=st.integers(1, 16),
    efficiency=st.floats(0.3, 1.0),
    demand=st.lists(st.sampled_from([0.25, 0.5, 1.0, 2.0]), min_size=2, max_size=2),
    jobs=st.lists(st.tuples(st.integers(0, 1), st.integers(1, 4)), min_size=0, max_size=12),
    extra=st.tuples(st.integers(0, 1), st.integers(1, 4)),
)
def test_speed_is_a_share_that_only_falls_as_jobs_join(cores, efficiency, demand, jobs, extra) -> None:
    host = HostModel(np.array([True, True]), np.array(demand), float(cores), efficiency)
    types = np.array([t for t, _ in jobs], dtype=np.int64)
    gpus = np.array([g for _, g in jobs], dtype=float)
    speed = host.speed(types, gpus)
    assert 0 < speed <= 1
    wanted = float(np.sum(gpus * np.array(demand)[types])) if jobs else 0.0
    if efficiency == 1.0 and wanted <= cores:
        assert speed == 1.0
    more = host.speed(np.append(types, extra[0]), np.append(gpus, extra[1]))
    assert more <= speed + 1e-12
    # Processor sharing: with every core busy, the host's delivered cores are what it has (times the
    # interference), never more.
    if wanted > cores:
        assert wanted * speed <= cores + 1e-9


def test_jobs_off_the_host_and_a_host_with_room_run_at_full_speed() -> None:
    host = HostModel(np.array([True, False]), np.array([1.0, 1.0]), 2.0)
    assert host.speed(np.array([1, 1, 1, 1]), np.ones(4)) == 1.0
    assert host.speed(np.array([0, 0]), np.ones(2)) == 1.0
    assert host.speed(np.array([0, 0, 0, 0]), np.ones(4)) == 0.5


def test_a_slowed_type_keeps_fewer_cores_busy() -> None:
    """A cpu_slow process sleeps half its time (slowdown 2): it asks for half a core."""
    scenario = load_scenario(REAL_CPU)
    made = build(scenario)
    host = host_model(scenario, made.layout, made.layout.worker_types)
    assert host is not None
    by_type = dict(zip(made.layout.worker_types, host.demand.tolist(), strict=True))
    assert by_type == {"cpu": 1.0, "cpu_slow": 0.5}


def test_sharing_the_host_lengthens_the_simulated_run_and_room_leaves_it_alone() -> None:
    """The CPU scenario's 4 slots ask for 3 cores of a 2-core host: its jobs take longer than with every
    slot on a core of its own; given 4 cores the host changes nothing, bit for bit."""
    tables = {}
    for name, overrides in {
        "shared": [],
        "alone": ["cluster.host=null"],
        "roomy": ["cluster.host={cores: 4, types: [cpu, cpu_slow]}"],
    }.items():
        tables[name] = build(load_scenario(REAL_CPU, overrides)).run()
    jct = {n: float((t["jobs"]["completion_s"] - t["jobs"]["arrival_s"]).mean()) for n, t in tables.items()}
    assert jct["shared"] > jct["alone"]
    for table in ("jobs", "rounds"):
        assert tables["roomy"][table].equals(tables["alone"][table])


def test_profile_host_prints_the_efficiency_of_all_cores_busy(monkeypatch, capsys) -> None:
    """The efficiency is the copies' mean steady rate over the lone process's: here the copies (the
    third lease on) train at 8 steps/s where one alone (after its warm-up) trains at 10."""
    import itertools
    import threading
    from types import SimpleNamespace

    from clustertwin.runtime.gavel import host_profile

    from clustertwin.cli import main

    calls, lock = itertools.count(), threading.Lock()
    monkeypatch.setattr(host_profile.os, "sched_getaffinity", lambda _pid: {0, 1})

    def fake_lease(*_args):
        with lock:
            rate = 10.0 if next(calls) < 2 else 8.0
        return SimpleNamespace(
            report={"window_steps": int(rate * 3), "window_seconds": 3.0, "throughput": rate}
        )

    monkeypatch.setattr(host_profile, "run_job_lease", fake_lease)
    assert main(["profile", str(REAL_CPU), "--host", "--seconds", "2"]) == 0
    out = capsys.readouterr().out
    assert "efficiency 0.800" in out
    assert "host: {cores: 2, types: [cpu, cpu_slow], efficiency: 0.800}" in out
