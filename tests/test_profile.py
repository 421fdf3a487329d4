"""Profiling a scenario on real (CPU) workers: the table the simulator reads, and refusals of bad input."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

pytest.importorskip("torch")

from clustertwin.runtime.gavel import profile  # noqa: E402
from clustertwin.scenarios.gavel_workload import cluster_layout, load_table  # noqa: E402
from clustertwin.scenarios.load import load_scenario  # noqa: E402
from clustertwin.traces.gavel_throughputs import ThroughputTable  # noqa: E402

from clustertwin.cli import main  # noqa: E402
from clustertwin.errors import InputError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESNET, LM = "ResNet-18 (batch size 32)", "LM (batch size 20)"

# The scenario names its throughput table before it exists: profiling is what writes it, at the default
# output path, so the same file then loads for a simulation.
SCENARIO = """\
name: tiny-real
kind: gavel
cluster:
  gpus: {fast: 1, slow: 1}
  gpus_per_server: 1
throughputs: tiny.throughputs.csv
workload:
  trace: tiny.trace
policy:
  name: las
real:
  workers:
    fast: {device: cpu}
    slow: {device: cpu, slowdown: 3.0}
  threads_per_cpu_worker: 1
"""


def _trace_row(job_type: str, steps: int, arrival: float) -> str:
    cells = [job_type, "python3 main.py", "wd", "--num_steps", "0", str(steps), "1", "1", "-1", str(arrival)]
    return "\t".join(cells) + "\n"


def write_scenario(folder: Path, text: str = SCENARIO) -> Path:
    # Three rows, two (type, scale factor) pairs: a repeated job type is profiled once.
    rows = [_trace_row(RESNET, 100, 0), _trace_row(LM, 200, 10), _trace_row(RESNET, 50, 20)]
    (folder / "tiny.trace").write_text("".join(rows))
    path = folder / "tiny.yaml"
    path.write_text(text)
    return path


@pytest.mark.slow  # measures a 3x slowdown end to end; another test beside it on the core skews it
def test_profile_writes_a_table_the_simulator_loads(tmp_path: Path) -> None:
    path = write_scenario(tmp_path)
    scenario = profile.load_for_profiling(path)  # its throughputs file does not exist yet
    calls: list[float] = []
    rows = profile.profile_scenario(scenario, steps=24, warmup_steps=2, progress=lambda f, _: calls.append(f))
    assert calls[-1] == 1.0 and calls == sorted(calls)
    out, overheads = profile.write_profile(rows, profile.default_output(path))
    assert (out.name, overheads.name) == ("tiny.throughputs.csv", "tiny.overheads.csv")

    table = ThroughputTable.from_csv(out)
    pairs = {(r.job_type, r.worker_type) for r in rows}
    assert pairs == {(t, w) for t in (RESNET, LM) for w in ("fast", "slow")} and len(rows) == 4
    for job_type in (RESNET, LM):
        fast, slow = (table.isolated(job_type, 1, w) for w in ("fast", "slow"))
        assert slow > 0 and fast / slow >= 1.8, (job_type, fast, slow)

    with overheads.open() as f:
        measured = list(csv.DictReader(f))
    assert len(measured) == 4
    for row in measured:
        for column in ("load_s", "save_s", "startup_s", "step_s"):
            assert float(row[column]) > 0, (row, column)
        # Start-up is at least a whole interpreter plus `import torch`.
        assert float(row["startup_s"]) > 0.2
    for r in rows:
        assert r.step_s == pytest.approx(1 / r.throughput)
    print("\nprofile:", *(f"{r.job_type}/{r.worker_type}: {r} " for r in rows), sep="\n  ")

    # Now the scenario loads as written, and the simulator's layout takes its worker types from it.
    reloaded = load_scenario(path)
    assert set(cluster_layout(reloaded, load_table(reloaded)).worker_types) == {"fast", "slow"}


def test_a_measured_lease_bounded_by_time_trains_that_long(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The default measured lease: as many steps as fit in the given training time, timed by the job.
    leases: list[tuple[int, float, dict[str, float]]] = []
    real_lease = profile.run_job_lease

    def lease(*args, max_seconds: float = 3600.0, cores=None, program=None) -> profile.LeaseRun:
        run = real_lease(*args, max_seconds=max_seconds, cores=cores, program=program)
        leases.append((args[5], max_seconds, run.report))
        return run

    monkeypatch.setattr(profile, "run_job_lease", lease)
    path = write_scenario(tmp_path)
    (tmp_path / "tiny.trace").write_text(_trace_row(LM, 100, 0))
    scenario = profile.load_for_profiling(
        path, ["real.workers={fast: {device: cpu}}", "cluster.gpus={fast: 1}"]
    )
    (row,) = profile.profile_scenario(scenario, seconds=1.5, warmup_steps=2)
    (warm_steps, _, warm), (_, limit, measured) = leases
    assert warm_steps == 2 and warm["end_step"] == 2 and limit == 1.5
    trained = measured["end_step"] - measured["start_step"]
    assert measured["start_step"] == 2 and trained > 10  # a small LM makes many steps in 1.5 s
    assert 1.5 <= measured["seconds"] < 1.5 + 5 * row.step_s + 0.5  # stops at the first step past 1.5 s
    assert row.throughput == pytest.approx(trained / measured["seconds"], rel=0.5)
    with pytest.raises(InputError, match="--seconds"):
        profile.profile_scenario(scenario, seconds=0.0)


def test_repeated_measured_leases_resume_in_turn_and_give_the_median(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Faked job processes: every lease pays 1 s once, then steps at a per-lease rate; the second lease
    # is disturbed (a third of the rate), as a measured lease sharing its core would be.
    rates = iter([10.0, 50.0, 50.0 / 3, 40.0])  # the warm-up, then three measured leases
    starts: list[int] = []

    def lease(
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
        start = starts[-1] if starts else 0
        rate = next(rates)
        steps = max_steps if max_seconds >= 3600.0 else int(rate * max_seconds)
        end = start + steps
        starts.append(end)
        half = steps // 2
        report = {"start_step": start, "end_step": end, "seconds": 1.0 + steps / rate, "load_s": 0.2,
                  "save_s": 0.1, "window_steps": half, "window_seconds": half / rate}  # fmt: skip
        return profile.LeaseRun(report, report["seconds"] + 2.0)

    monkeypatch.setattr(profile, "run_job_lease", lease)
    worker = profile.RealWorker(device="cpu")
    row = profile.measure(
        LM, 1, "fast", worker, threads=1, steps=10, warmup_steps=3, workdir=tmp_path, seconds=4.0, repeats=3
    )
    # Each measured lease resumed where the last one saved (the faked job checks nothing; _checked does).
    assert starts == [3, 3 + 200, 3 + 200 + 66, 3 + 200 + 66 + 160]
    # The median of the three (50, 16.7 and 40 steps/s over their second halves) is the 40 steps/s lease;
    # the check beside it is that lease's difference from the warm-up (1.3 s for its 3 steps).
    assert row.throughput == pytest.approx(40.0)
    assert row.two_lease_step_s == pytest.approx(profile.steady_step_s(1.3, 3, 1.0 + 160 / 40.0, 160))
    with pytest.raises(InputError, match="--repeats"):
        profile.profile_scenario(profile.load_for_profiling(write_scenario(tmp_path)), repeats=0)


def test_steady_step_time_cancels_the_first_steps_one_time_cost() -> None:
    # Both leases pay 2 s once, then 0.1 s a step.
    assert profile.steady_step_s(2.0 + 3 * 0.1, 3, 2.0 + 30 * 0.1, 30) == pytest.approx(0.1)
    # No usable difference (noise made the long lease faster, or equal lengths): the plain average.
    assert profile.steady_step_s(5.0, 3, 3.0, 30) == pytest.approx(0.1)
    assert profile.steady_step_s(1.0, 5, 1.5, 5) == pytest.approx(0.3)


def test_missing_real_section_is_an_input_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = SCENARIO.split("real:")[0].replace("tiny.throughputs.csv", "simulation")
    path = write_scenario(tmp_path, text)
    with pytest.raises(InputError, match="field real"):
        profile.plan(profile.load_for_profiling(path))
    assert main(["profile", str(path), "--steps", "2"]) == 2
    assert "field real" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.csv"))


def test_cuda_worker_without_cuda_is_an_input_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    text = SCENARIO.replace("fast: {device: cpu}", "fast: {device: cuda, cuda_devices: [0]}")
    with pytest.raises(InputError, match="no CUDA device"):
        profile.plan(profile.load_for_profiling(write_scenario(tmp_path, text)))


def test_unknown_job_type_and_other_errors_fail_before_any_job_runs(tmp_path: Path) -> None:
    path = write_scenario(tmp_path)
    (tmp_path / "tiny.trace").write_text(_trace_row("GPT-5 (batch size 1)", 10, 0))
    with pytest.raises(InputError, match="no runtime workload"):
        profile.plan(profile.load_for_profiling(path))
    # A broken scenario is reported for what is really wrong, not for the missing table.
    with pytest.raises(InputError, match="policy"):
        profile.load_for_profiling(path, ["policy=7"])


def test_jobs_larger_than_a_type_are_skipped(tmp_path: Path) -> None:
    path = write_scenario(tmp_path)
    (tmp_path / "tiny.trace").write_text(_trace_row(LM, 10, 0).replace("\t1\t1\t-1", "\t2\t1\t-1"))
    todo, skipped = profile.plan(profile.load_for_profiling(path, ["cluster.gpus.fast=2"]))
    assert todo == [(LM, 2, "fast")] and skipped == [(LM, 2, "slow")]


def test_cli_profile_writes_both_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """The command wiring, with the measurement faked (the real one is tested above)."""

    def fake_measure(job_type, scale_factor, worker_type, worker, **_) -> profile.ProfileRow:
        rate = 10.0 / worker.slowdown
        if worker_type == "slow" and fail_slow:
            raise profile.ProfileError(f"{job_type} on {worker_type}: the job process exited with status 1")
        return profile.ProfileRow(
            job_type, scale_factor, worker_type, rate, 0.01, 0.02, 1.5, 1 / rate, 1 / rate
        )

    fail_slow = False

    monkeypatch.setattr(profile, "measure", fake_measure)
    path = write_scenario(tmp_path)
    out = tmp_path / "out" / "measured.csv"
    assert main(["profile", str(path), "--out", str(out), "--set", "real.workers.slow.slowdown=2.0"]) == 0
    table = ThroughputTable.from_csv(out)
    assert table.isolated(LM, 1, "slow") == pytest.approx(5.0)
    assert (tmp_path / "out" / "measured.overheads.csv").is_file()
    # Each pair is reported as it is measured ...
    assert f"measured {LM} x1 on slow: 5 steps/s" in capsys.readouterr().err
    # ... so that a profile that fails (or is killed) part-way still shows the pairs it finished.
    fail_slow = True
    assert main(["profile", str(path), "--out", str(tmp_path / "failed.csv")]) == 1
    err = capsys.readouterr().err
    assert f"measured {LM} x1 on fast: 10 steps/s" in err and "on slow: the job process exited" in err
    assert not (tmp_path / "failed.csv").exists()
    assert main(["profile", str(path), "--steps", "0"]) == 2
    assert main(["profile", str(path), "--out", str(tmp_path / "t.json")]) == 2


# ------------------------------------------------------------------------------------------ under load
def test_background_slots_fill_every_other_cpu_slot_with_a_mix() -> None:
    scenario = profile.load_for_profiling(Path(__file__).parents[1] / "scenarios" / "gavel-real-gpu.yaml")
    types = list(dict.fromkeys(t for t, _ in profile.job_keys(scenario)))
    assert len(types) >= 2
    on_gpu = profile.background_slots(scenario, "gpu", 1, types)  # gpu: cuda, no slot of its own
    on_cpu = profile.background_slots(scenario, "cpu", 1, types)
    on_cpu2 = profile.background_slots(scenario, "cpu", 2, types)
    cpu_slots = {w: scenario.cluster.gpus[w] for w in ("cpu", "cpu_slow")}
    assert [(w, i) for w, i, _ in on_gpu] == [("cpu", i) for i in range(cpu_slots["cpu"])] + [
        ("cpu_slow", i) for i in range(cpu_slots["cpu_slow"])
    ]
    assert len(on_cpu) == len(on_gpu) - 1 and len(on_cpu2) == len(on_gpu) - 2
    assert sum(w == "cpu" for w, _, _ in on_cpu) == cpu_slots["cpu"] - 1
    # A mix: every job type runs somewhere, and the measured job takes its type's first slot's place in it.
    assert {t for _, _, t in on_gpu} == set(types)
    assert on_cpu == on_gpu[1:] and on_cpu2 == on_gpu[2:]


def _record_background(monkeypatch: pytest.MonkeyPatch) -> list[profile.Background]:
    started: list[profile.Background] = []
    real_start = profile._start_background

    def start(*args, **kwargs) -> profile.Background:
        started.append(real_start(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(profile, "_start_background", start)
    return started


@pytest.mark.slow
def test_under_load_profile_runs_background_jobs_and_writes_the_csv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = _record_background(monkeypatch)
    alive_during: list[int] = []
    real_lease = profile.run_job_lease

    def lease(*args, **kwargs) -> profile.LeaseRun:
        alive_during.append(sum(bg.process.poll() is None and bg.ready.is_file() for bg in started))
        return real_lease(*args, **kwargs)

    monkeypatch.setattr(profile, "run_job_lease", lease)
    path = write_scenario(tmp_path)
    (tmp_path / "tiny.trace").write_text(_trace_row(LM, 100, 0))  # one job type: two pairs
    out = tmp_path / "loaded.throughputs.csv"
    assert main(["profile", str(path), "--under-load", "--steps", "4", "--out", str(out)]) == 0

    # Per pair (fast, slow), the one other CPU slot trains, with that slot's slowdown, during both leases.
    assert [bg.worker_type for bg in started] == ["slow", "fast"]
    assert all(bg.job_type == LM for bg in started)
    assert [bg.process.args[bg.process.args.index("--slowdown") + 1] for bg in started] == ["3.0", "1.0"]
    assert alive_during == [1, 1, 1, 1]
    assert all(bg.process.returncode is not None for bg in started)  # killed and reaped

    table = ThroughputTable.from_csv(out)
    assert table.isolated(LM, 1, "fast") > 0 and table.isolated(LM, 1, "slow") > 0
    with (tmp_path / "loaded.overheads.csv").open() as f:
        assert [row["mode"] for row in csv.DictReader(f)] == ["under-load", "under-load"]


# ProfileError with two fast slots (a mix of both job types, a fast one among them); Ctrl-C with one (fewer
# processes to start).
@pytest.mark.parametrize(("failure", "fast"), [(profile.ProfileError, 2), (KeyboardInterrupt, 1)])
def test_background_jobs_are_reaped_when_the_measurement_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: type[BaseException], fast: int
) -> None:
    started = _record_background(monkeypatch)
    alive: list[int] = []

    def failing_measure(*_, **__) -> profile.ProfileRow:
        alive.append(sum(bg.process.poll() is None and bg.ready.is_file() for bg in started))
        raise failure("the measured job failed")

    monkeypatch.setattr(profile, "measure", failing_measure)
    path = write_scenario(tmp_path)
    scenario = profile.load_for_profiling(path, [f"cluster.gpus.fast={fast}"])
    with pytest.raises(failure):
        profile.profile_scenario(scenario, steps=2, under_load=True)
    # Measured on fast (the first pair): every other fast slot and the slow one train. Slots are numbered
    # fast 0..fast-1, then slow, and slot k trains job type k mod 2 (RESNET, LM in order of appearance);
    # the measured job takes fast slot 0.
    expected = [("fast", (RESNET, LM)[k % 2]) for k in range(1, fast)] + [("slow", (RESNET, LM)[fast % 2])]
    assert alive == [fast]
    assert [(bg.worker_type, bg.job_type) for bg in started] == expected
    for bg in started:
        assert bg.process.returncode is not None  # reaped, so no longer a process of ours
        with pytest.raises(ProcessLookupError):
            os.kill(bg.process.pid, 0)


def test_under_load_background_starts_once_per_worker_type_and_trains_through_its_pairs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two job types on two worker types: four pairs, two backgrounds (one per measured worker type),
    each alive through both of its pairs; the rows keep the plan's order."""
    started = _record_background(monkeypatch)
    seen: list[tuple[str, str, list[int]]] = []

    def fake_measure(job_type, scale_factor, worker_type, worker, **_) -> profile.ProfileRow:
        alive = [id(bg) for bg in started if bg.process.poll() is None and bg.ready.is_file()]
        seen.append((job_type, worker_type, alive))
        rate = 10.0 / worker.slowdown
        return profile.ProfileRow(
            job_type, scale_factor, worker_type, rate, 0.01, 0.02, 1.5, 1 / rate, 1 / rate
        )

    monkeypatch.setattr(profile, "measure", fake_measure)
    scenario = profile.load_for_profiling(write_scenario(tmp_path))
    rows = profile.profile_scenario(scenario, steps=2, under_load=True)
    assert [(r.job_type, r.worker_type) for r in rows] == [(j, w) for j, _, w in profile.plan(scenario)[0]]
    assert len(rows) == 4
    assert [bg.worker_type for bg in started] == ["slow", "fast"]  # measured on fast, then on slow
    by_type = {w: {tuple(alive) for _, t, alive in seen if t == w} for w in ("fast", "slow")}
    assert by_type == {"fast": {(id(started[0]),)}, "slow": {(id(started[1]),)}}
    assert all(bg.process.returncode is not None for bg in started)  # killed and reaped


def test_own_programs_are_profiled_by_their_commands_without_a_table(tmp_path: Path) -> None:
    """A scenario of users' programs: one program per job type (its first job's), planned on every worker
    type before any throughput table exists; ``real.commands: builtin`` keeps the bundled stand-ins."""
    own = ROOT / "scenarios" / "gavel-own-jobs-cpu.yaml"
    scenario = profile.load_for_profiling(own, [f"throughputs={tmp_path / 'not-yet.csv'}"])
    programs = profile.programs(scenario)
    assert list(programs) == ["resnet_cifar (batch size 16)", "transformer_lm (batch size 16)"]
    resnet = programs["resnet_cifar (batch size 16)"]
    assert (
        resnet["command"][:2] == ["python", "examples/resnet_cifar.py"] and "--seed" not in resnet["command"]
    )
    assert Path(str(resnet["cwd"])) == ROOT
    todo, skipped = profile.plan(scenario)
    assert sorted(todo) == sorted((t, 1, w) for t in programs for w in ("cpu", "cpu_slow")) and not skipped
    assert profile.programs(load_scenario(own, ["real.commands=builtin"])) == {}


def test_a_program_is_told_its_device_and_lease_as_an_agent_tells_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from clustertwin.scenarios.gavel_schema import RealWorker

    monkeypatch.setenv("CLUSTERTWIN_CONTROL", "127.0.0.1:1")  # the profiler's own: never a job's
    program = {"command": ["python", "x.py"], "cwd": ".", "env": {"MINE": "1"}}
    lease = {"CLUSTERTWIN_LEASE_STEPS": "5"}
    gpu = profile.program_env(program, RealWorker(device="cuda", cuda_devices=[3]), 2, [3], lease)
    assert (gpu["CLUSTERTWIN_DEVICE"], gpu["CUDA_VISIBLE_DEVICES"], gpu["MINE"]) == ("cuda", "3", "1")
    assert gpu["CLUSTERTWIN_LEASE_STEPS"] == "5" and "CLUSTERTWIN_CONTROL" not in gpu
    cpu = profile.program_env(program, RealWorker(device="cpu", slowdown=2.0), 2, [], lease)
    assert (cpu["CLUSTERTWIN_DEVICE"], cpu["CUDA_VISIBLE_DEVICES"], cpu["OMP_NUM_THREADS"]) == (
        "cpu",
        "",
        "2",
    )
    assert cpu["CLUSTERTWIN_SLOWDOWN"] == "2.0"
