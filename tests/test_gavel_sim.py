"""The Gavel simulator end to end: bad input, determinism, and the invariants every run must keep."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from clustertwin.analysis.gavel_metrics import gavel_metrics
from clustertwin.scenarios.gavel_workload import load_table, trace_jobs
from clustertwin.scenarios.load import load_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clustertwin.api import simulate
from clustertwin.cli import main

TRACE_LINE = (
    "ResNet-18 (batch size 32)\tpython3 main.py\tdir\t--num_steps\t1\t{steps}\t{sf}\t1\t-1\t{arrival}\n"
)


def scenario(
    tmp_path: Path, trace: str | None = None, gpus: str = "{v100: 4, k80: 4}", extra: str = ""
) -> Path:
    workload = f"trace: {trace}" if trace else "generate: {num_jobs: 40, jobs_per_hour: 6.0}"
    text = f"""\
name: small
kind: gavel
seed: 3
cluster:
  gpus: {gpus}
  gpus_per_server: 4
workload:
  {workload}
policy:
  name: las
{extra}"""
    path = tmp_path / "small.yaml"
    path.write_text(text)
    return path


def trace_file(tmp_path: Path, rows: list[str]) -> str:
    path = tmp_path / "jobs.trace"
    path.write_text("".join(rows))
    return str(path)


def run_cli(tmp_path: Path, path: Path, capsys) -> tuple[int, str]:
    out = tmp_path / "out"
    code = main(["run", str(path), "--out", str(out), "--quiet", "--no-plots"])
    return code, capsys.readouterr().err


def test_unknown_job_type_names_trace_line(tmp_path: Path, capsys) -> None:
    rows = [TRACE_LINE.format(steps=100, sf=1, arrival=0), TRACE_LINE.format(steps=100, sf=1, arrival=5)]
    rows[1] = rows[1].replace("ResNet-18 (batch size 32)", "ResNet-1000")
    code, err = run_cli(tmp_path, scenario(tmp_path, trace_file(tmp_path, rows)), capsys)
    assert code == 2
    assert "jobs.trace:2" in err and "ResNet-1000" in err
    assert not (tmp_path / "out").exists()


def test_trace_row_with_wrong_column_count_names_line(tmp_path: Path, capsys) -> None:
    rows = [TRACE_LINE.format(steps=100, sf=1, arrival=0), "ResNet-18 (batch size 32)\tonly\tthree\n"]
    code, err = run_cli(tmp_path, scenario(tmp_path, trace_file(tmp_path, rows)), capsys)
    assert code == 2 and "jobs.trace:2" in err and "column" in err
    assert not (tmp_path / "out").exists()


def test_job_larger_than_the_cluster_names_trace_line(tmp_path: Path, capsys) -> None:
    rows = [TRACE_LINE.format(steps=100, sf=1, arrival=0), TRACE_LINE.format(steps=100, sf=8, arrival=5)]
    code, err = run_cli(tmp_path, scenario(tmp_path, trace_file(tmp_path, rows)), capsys)
    assert code == 2 and "jobs.trace:2" in err and "8 GPUs" in err
    assert not (tmp_path / "out").exists()


def test_unknown_worker_type_names_the_field(tmp_path: Path, capsys) -> None:
    code, err = run_cli(tmp_path, scenario(tmp_path, gpus="{v100: 4, h100: 4}"), capsys)
    assert code == 2 and "cluster.gpus" in err and "h100" in err
    assert not (tmp_path / "out").exists()


def test_unknown_policy_parameter_names_the_field(tmp_path: Path, capsys) -> None:
    path = scenario(tmp_path)
    path.write_text(path.read_text().replace("  name: las\n", "  name: las\n  params: {awareness: true}\n"))
    code, err = run_cli(tmp_path, path, capsys)
    assert code == 2 and "policy" in err and "awareness" in err


def _log_digest(tables: dict[str, pd.DataFrame]) -> str:
    digest = hashlib.sha256()
    for name in sorted(tables):
        digest.update(name.encode())
        digest.update(pd.util.hash_pandas_object(tables[name], index=False).to_numpy().tobytes())
    return digest.hexdigest()


@pytest.mark.parametrize("policy", ["las", "ftf", "fifo", "makespan"])
def test_same_scenario_and_seed_give_an_identical_event_log(tmp_path: Path, policy: str) -> None:
    overrides = [f"policy.name={policy}"]
    first = simulate(load_scenario(scenario(tmp_path), overrides))
    second = simulate(load_scenario(scenario(tmp_path), overrides))
    assert _log_digest(first.tables) == _log_digest(second.tables)
    other_seed = simulate(load_scenario(scenario(tmp_path), [*overrides, "seed=4"]))
    assert _log_digest(first.tables) != _log_digest(other_seed.tables)


def check_invariants(tables: dict[str, pd.DataFrame], gpus: dict[str, int], round_s: float) -> None:
    jobs, rounds = tables["jobs"], tables["rounds"]
    done = jobs[jobs["completion_s"].notna()]
    # Work is conserved: a finished job made exactly its steps, and every step made is in a round.
    assert np.allclose(done["steps_done"], done["total_steps"])
    made = rounds.groupby("job_id")["steps"].sum().reindex(jobs["job_id"], fill_value=0.0).to_numpy()
    assert np.allclose(made, jobs["steps_done"].to_numpy(), rtol=1e-9, atol=1e-6)
    assert (rounds["steps"] >= 0).all()
    # No job runs before it arrives or after it completes.
    merged = rounds.merge(jobs[["job_id", "arrival_s", "completion_s"]], on="job_id")
    assert (merged["start_s"] >= merged["arrival_s"] - 1e-9).all()
    finished = merged[merged["completion_s"].notna()]
    assert (finished["end_s"] <= finished["completion_s"] + 1e-6).all()
    # Capacity is never exceeded: per round and type, GPUs held (a shared pair counted once) ≤ N_j.
    held = rounds[(rounds["shared_with"] < 0) | (rounds["job_id"] < rounds["shared_with"])]
    per_round = held.groupby(["round", "worker_type"])["num_gpus"].sum()
    for (_, worker_type), used in per_round.items():
        assert used <= gpus[worker_type]
    # A job runs at most once per round, and a round lasts at most its length.
    assert not rounds.duplicated(["round", "job_id"]).any()
    assert ((rounds["end_s"] - rounds["start_s"]) <= round_s + 1e-6).all()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    policy=st.sampled_from(["las", "ftf", "fifo", "makespan", "max_sum_throughput", "isolated", "sjf"]),
    aware=st.booleans(),
    gpus=st.tuples(st.integers(1, 3), st.integers(0, 2), st.integers(1, 2)),
    per_server=st.sampled_from([1, 2, 4]),
    jobs_per_hour=st.floats(2.0, 30.0),
    multiple=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_simulation_invariants(
    tmp_path_factory, policy, aware, gpus, per_server, jobs_per_hour, multiple, seed
):
    counts = {t: n * per_server for t, n in zip(("v100", "p100", "k80"), gpus, strict=True)}
    # 20 jobs: a run's cost grows with its rounds, which a queue of 40 jobs on a 2-GPU cluster makes many.
    overrides = [
        "workload.generate.num_jobs=20",
        f"cluster.gpus={counts}",
        f"cluster.gpus_per_server={per_server}",
        f"policy.name={policy}",
        f"workload.generate.jobs_per_hour={jobs_per_hour}",
        f"workload.generate.scale_factors={'multiple' if multiple else 'single'}",
        f"seed={seed}",
    ]
    if policy in {"las", "ftf", "fifo", "makespan", "sjf"}:
        overrides.append(f"policy.params={{aware: {str(aware).lower()}}}")
    path = scenario(tmp_path_factory.mktemp("s"))
    scen = load_scenario(path, overrides)
    jobs, _ = trace_jobs(scen, load_table(scen))
    if max(j.scale_factor for j in jobs) > max(counts.values()):
        # A job larger than every GPU type would never fit: the run must refuse rather than start.
        with pytest.raises(Exception, match="GPUs"):
            simulate(scen)
        return
    result = simulate(scen)
    check_invariants(result.tables, counts, scen.mechanism.round_s)
    metrics = gavel_metrics(result, counts)
    assert metrics["jobs_completed"] == len(result.tables["jobs"])


def test_space_sharing_runs_pairs_within_capacity(tmp_path: Path) -> None:
    overrides = ["policy.params={aware: true, space_sharing: true}", "workload.generate.jobs_per_hour=30"]
    scen = load_scenario(scenario(tmp_path), overrides)
    result = simulate(scen)
    rounds = result.tables["rounds"]
    assert (rounds["shared_with"] >= 0).any(), "space sharing never paired two jobs"
    check_invariants(result.tables, dict(scen.cluster.gpus), scen.mechanism.round_s)


def test_ideal_mechanism_tracks_the_round_mechanism(tmp_path: Path) -> None:
    """§5.7 Fig. 5.15b: with 6-minute rounds Gavel behaves almost like exact time fractions."""
    path = scenario(tmp_path, gpus="{v100: 4, p100: 4, k80: 4}")
    rounds = simulate(load_scenario(path))
    ideal = simulate(load_scenario(path, ["mechanism.ideal=true"]))
    jct = [(r.tables["jobs"]["completion_s"] - r.tables["jobs"]["arrival_s"]).mean() for r in (rounds, ideal)]
    assert ideal.tables["jobs"]["completion_s"].notna().all()
    assert abs(jct[0] - jct[1]) / jct[1] < 0.25


def test_estimated_colocation_beats_guessing(tmp_path: Path) -> None:
    """§5.3.3 / Fig. 5.16: pair estimates from profiled-and-completed references are closer to the truth
    than the pairs of two random references, even for types never seen (no job type its own reference); with
    every type a reference, as Gavel's artifact has it by default, they are closer still."""
    from clustertwin.policies.gavel.scheduler import JobSpec
    from clustertwin.scenarios.gavel_colocation import estimated_colocation, normalised_colocation
    from clustertwin.traces.gavel_throughputs import ThroughputTable

    table = ThroughputTable.bundled("simulation")
    workers = ("v100", "p100", "k80")
    types, truth = normalised_colocation(table, workers)
    k = len(types)
    specs = [
        JobSpec(i, t, 1, 1.0, 0.0, table.isolated_matrix([(t, 1)], workers)[0]) for i, t in enumerate(types)
    ]
    pairs = [(a, b) for a in range(k) for b in range(k) if a != b]

    def columns(partner: int) -> list[int]:
        return [w * k + partner for w in range(len(workers))]

    def mean_error(references: str) -> float:
        oracle = estimated_colocation(table, workers, 0.3, np.random.default_rng(0), references)
        errors = []
        for a, b in pairs:
            pair = oracle(specs[a], specs[b])
            estimate = np.zeros(len(workers)) if pair is None else pair[:, 0] / specs[a].throughputs
            errors.append(np.abs(estimate - truth[a, columns(b)]).mean())
        return float(np.mean(errors))

    # Guessing: each job of the pair takes a random other type as its reference.
    rng = np.random.default_rng(1)
    guesses = []
    for a, b in pairs:
        ra, rb = (rng.choice([r for r in range(k) if r != x]) for x in (a, b))
        guesses.append(np.abs(truth[ra, columns(rb)] - truth[a, columns(b)]).mean())
    never_seen = mean_error("others")
    assert never_seen < np.mean(guesses)
    assert mean_error("all") < never_seen


def test_estimated_colocation_plans_pairs_and_moves_jobs_at_true_speeds(tmp_path: Path) -> None:
    """The policy packs with estimated pair throughputs; the simulator moves jobs at the true ones."""
    overrides = [
        "policy.params={aware: true, space_sharing: true}",
        "workload.generate.jobs_per_hour=30",
        "mechanism.estimate_colocation=0.3",
    ]
    scen = load_scenario(scenario(tmp_path), overrides)
    result = simulate(scen)
    check_invariants(result.tables, dict(scen.cluster.gpus), scen.mechanism.round_s)
    assert (result.tables["rounds"]["shared_with"] >= 0).any()


def test_estimated_pairs_learn_their_rates_from_shared_rounds(tmp_path: Path) -> None:
    """A pair that shared a round plans with its measured rates from then on, as for real (§5.3.3)."""
    from clustertwin.sim.gavel.setup import build

    overrides = [
        "policy.params={aware: true, space_sharing: true}",
        "workload.generate.jobs_per_hour=30",
        "mechanism.estimate_colocation=0.3",
    ]
    sim = build(load_scenario(scenario(tmp_path), overrides))
    learned: set[tuple[int, int]] = set()
    observe = sim.scheduler.observe_pair

    def record(jobs, worker_type, measured, smoothing):
        learned.add(tuple(sorted(jobs)))
        observe(jobs, worker_type, measured, smoothing)

    sim.scheduler.observe_pair = record
    rounds = sim.run()["rounds"]
    shared = rounds[(rounds["shared_with"] >= 0) & (rounds["steps"] > 0)]
    ran = {tuple(sorted(p)) for p in zip(shared["job_id"], shared["shared_with"], strict=True)}
    assert learned and learned <= ran
    assert len(learned) >= len(ran) // 2  # most pairs that trained together (some were evicted or idle)


def test_restart_overhead_is_charged_per_worker_type_and_spared_by_renewal(tmp_path: Path) -> None:
    """Under the restart model a job loses its type's overhead whenever its process starts (its first
    round included), making proportionally fewer steps; a renewed lease loses nothing."""
    rows = [TRACE_LINE.format(steps=10**6, sf=1, arrival=0) for _ in range(3)]
    path = scenario(tmp_path, trace_file(tmp_path, rows), gpus="{v100: 2, k80: 1}")
    path.write_text(path.read_text().replace("gpus_per_server: 4", "gpus_per_server: 1"))
    overhead = ["mechanism.overhead_model=restart", "mechanism.preemption_overhead_s={v100: 36, k80: 0}"]
    rounds = simulate(load_scenario(path, overhead)).tables["rounds"]
    rounds = rounds[rounds["end_s"] - rounds["start_s"] >= 360 - 1e-6]  # whole rounds only
    v100, k80 = rounds[rounds["worker_type"] == "v100"], rounds[rounds["worker_type"] == "k80"]
    full = v100.loc[v100["renewed"], "steps"]
    started = v100.loc[~v100["renewed"], "steps"]
    assert len(full) and len(started) and (v100.loc[v100["round"] == 0, "renewed"] == False).all()  # noqa: E712
    assert np.allclose(full, full.iloc[0]) and np.allclose(started, 0.9 * full.iloc[0])
    assert len(k80) and np.allclose(k80["steps"], k80["steps"].iloc[0])


def test_a_job_arriving_as_a_round_starts_is_planned_in_that_round(tmp_path: Path) -> None:
    """Job 2 arrives at 360 s, when round 1 starts: it runs from 360 s, not a round later. (SimPy fires
    the round's timeout first here, because job 2's was scheduled later, at job 1's arrival.)"""
    rows = [TRACE_LINE.format(steps=10**6, sf=1, arrival=t) for t in (0, 30, 360)]
    path = scenario(tmp_path, trace_file(tmp_path, rows), gpus="{v100: 4}")
    scen = load_scenario(path, ["mechanism.min_reset_interval_s=0"])
    jobs = simulate(scen).tables["jobs"].set_index("job_id")
    assert jobs.loc[2, "first_start_s"] == 360.0
    assert jobs.loc[1, "first_start_s"] == 360.0  # an arrival between boundaries waits for the next


def _table(path: Path, v100: float, k80: float) -> str:
    rows = [f"ResNet-18 (batch size 32),1,{t},{x}\n" for t, x in (("v100", v100), ("k80", k80))]
    path.write_text("job_type,scale_factor,worker_type,throughput\n" + "".join(rows))
    return str(path)


def _planned_run(tmp_path: Path, planned: str | None, monkeypatch: pytest.MonkeyPatch):
    from clustertwin.policies.gavel.scheduler import GavelScheduler

    seen: list[tuple[int, int, float]] = []
    observe = GavelScheduler.observe_throughput

    def spy(self, job_id: int, worker_type: int, measured: float, smoothing: float) -> None:
        seen.append((job_id, worker_type, measured))
        observe(self, job_id, worker_type, measured, smoothing)

    monkeypatch.setattr(GavelScheduler, "observe_throughput", spy)
    rows = [TRACE_LINE.format(steps=3000, sf=1, arrival=60 * i) for i in range(6)]
    path = scenario(tmp_path, trace_file(tmp_path, rows), gpus="{v100: 1, k80: 1}")
    path.write_text(path.read_text().replace("gpus_per_server: 4", "gpus_per_server: 1"))
    sets = [f"throughputs={_table(tmp_path / 'truth.csv', 2.0, 0.5)}", "policy.params={aware: true}"]
    if planned is not None:
        sets.append(f"mechanism.planned_throughputs={planned}")
    return simulate(load_scenario(path, sets)).tables, seen


def test_a_policy_that_plans_from_another_table_learns_the_true_rates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``mechanism.planned_throughputs`` the policy starts from that table and is told each round's
    true steps/s, as the real backend's measurements tell it; jobs move at the true rates."""
    truth, none_seen = _planned_run(tmp_path, None, monkeypatch)
    assert none_seen == []
    # Believing the truth, learning it changes nothing.
    same, _ = _planned_run(tmp_path, str(tmp_path / "truth.csv"), monkeypatch)
    assert _log_digest(same) == _log_digest(truth)
    # Believing k80 the faster type, the policy still sees the true rates and jobs move at them.
    wrong, seen = _planned_run(tmp_path, _table(tmp_path / "wrong.csv", 0.5, 2.0), monkeypatch)
    assert seen and {round(r, 9) for _, j, r in seen} <= {2.0, 0.5}
    rate = {"v100": 2.0, "k80": 0.5}
    whole = wrong["rounds"][wrong["rounds"]["end_s"] - wrong["rounds"]["start_s"] >= 360 - 1e-6]
    assert len(whole)
    for row in whole.itertuples():
        assert row.steps == pytest.approx(rate[row.worker_type] * (row.end_s - row.start_s))
    assert _log_digest(wrong) != _log_digest(truth)


def test_a_planned_table_without_a_jobs_type_names_the_field(tmp_path: Path, capsys) -> None:
    rows = [TRACE_LINE.format(steps=3000, sf=1, arrival=0)]
    path = scenario(tmp_path, trace_file(tmp_path, rows), gpus="{v100: 1, k80: 1}")
    path.write_text(path.read_text().replace("gpus_per_server: 4", "gpus_per_server: 1"))
    other = tmp_path / "other.csv"
    other.write_text("job_type,scale_factor,worker_type,throughput\nLM (batch size 20),1,v100,3.0\n")
    path.write_text(path.read_text() + f"mechanism:\n  planned_throughputs: {other}\n")
    code, err = run_cli(tmp_path, path, capsys)
    assert code != 0 and "mechanism.planned_throughputs" in err and "ResNet-18" in err
