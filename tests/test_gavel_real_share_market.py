"""Space sharing and a market fleet for real: two jobs on one worker slot in a round, their measured rates
reaching the scheduler's pair estimate; a spot instance that the price trace takes away (warning, then
termination) and gives back, its jobs checkpointed and rescheduled, the fleet billed by the simulator's
code. Tiny CPU jobs, rounds of a few seconds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from clustertwin.sim.gavel.setup import build

from clustertwin.errors import InputError
from tests.test_gavel_real_policies import LM, REC, market_scenario, pair_table, tiny
from tests.test_runtime_gavel import check_steps_conserved


def test_a_market_runs_for_real_only_in_wall_clock_time_and_with_local_agents(tmp_path: Path) -> None:
    from clustertwin.runtime.gavel.run import refuse_unsupported

    refuse_unsupported(market_scenario(tmp_path))  # accepted as it is
    with pytest.raises(InputError, match="field real.time_scale"):
        refuse_unsupported(market_scenario(tmp_path, "real.time_scale=2.0"))
    with pytest.raises(InputError, match="field real.agents"):
        refuse_unsupported(market_scenario(tmp_path, "real.agents=remote"))


def test_the_real_fleet_is_billed_by_the_simulators_code(tmp_path: Path) -> None:
    """Both executors bill the fleet through ``scenarios.gavel_fleet``: the real backend's billing and
    eviction tables, at a given end, are the simulator's for the same scenario."""
    pytest.importorskip("torch")
    from clustertwin.runtime.gavel.run import RealGavel

    scenario = market_scenario(tmp_path)
    real = RealGavel(scenario, tmp_path / "work")
    sim = build(scenario)
    assert real.market is not None and sim.market is not None
    for end in (3.0, 9.5, 40.0):
        real.end_s = end
        mine, theirs = real._tables(), sim.market.tables(end)
        for name in ("billing", "evictions"):
            pd.testing.assert_frame_equal(mine[name], theirs[name])
    assert mine["evictions"]["terminated_s"].tolist() == [7.0]  # warned at 4 s, 3 s of warning


def test_a_verdict_before_the_lease_is_over_ends_it_and_the_job_saves(tmp_path: Path) -> None:
    """The eviction warning's path in the job API: the scheduler posts the stop verdict while the lease
    still has a minute to go; the job ends the lease at once, reports it, saves its checkpoint and says
    so."""
    torch = pytest.importorskip("torch")
    import threading
    import time

    from clustertwin.runtime.gavel.control import ControlClient, ControlServer, job_token, new_secret
    from clustertwin.runtime.job import Job, Session

    secret = new_secret()
    server = ControlServer("127.0.0.1", 0, secret)
    key = "job/0/0"
    client = ControlClient(server.address, job_token(secret, key), job=key)
    session = Session(
        checkpoint=tmp_path / "c.pt", lease_steps=10**6, lease_seconds=60.0, control=(client, key)
    )
    model = torch.nn.Linear(1, 1)
    job = Job(10**6, model, session=session)
    threading.Timer(0.5, server.put, (f"{key}/lease/1", {"stop": True})).start()
    started = time.monotonic()
    try:
        for _ in job:
            time.sleep(0.01)
    finally:
        client.close()
        server.close()
    assert time.monotonic() - started < 10.0
    report = server.get(f"{key}/report/0")
    assert 0 < report["end_step"] < 10**6 and not report["saved"]
    assert server.get(f"{key}/saved") == report["end_step"] == job.step
    assert torch.load(tmp_path / "c.pt", weights_only=True)["step"] == job.step


def _recording(real) -> list[tuple]:
    """Every pair observation the scheduler receives: (jobs, type, measured, believed before, after)."""
    sched = real.scheduler
    seen: list[tuple] = []
    observe = sched.observe_pair

    def recording(jobs, worker_type, measured, smoothing):
        a, b = (sched.jobs[m].spec for m in jobs)
        before = sched._pair_throughputs(a, b)
        observe(jobs, worker_type, measured, smoothing)
        after = sched._pair_throughputs(a, b)
        seen.append((tuple(jobs), worker_type, tuple(measured), smoothing, before, after))

    sched.observe_pair = recording  # type: ignore[method-assign]
    return seen


def test_space_sharing_runs_two_jobs_on_one_slot_and_their_rates_reach_the_pair_estimate(
    tmp_path: Path,
) -> None:
    """One cpu slot, two jobs, a space-sharing LAS: a round places both on the slot (two processes); each
    reports its own rate while they share it, and the pair's throughputs the policy plans with move to
    the measured ones (the simulator's ``observe_pair``)."""
    pytest.importorskip("torch")
    from clustertwin.runtime.gavel.run import RealGavel

    scenario = tiny(
        tmp_path,
        f"throughputs={pair_table(tmp_path / 'pairs.json')}",
        "cluster.gpus={cpu: 1, cpu_slow: 0}",
        "cluster.gpus_per_server=1",
        "policy.params={space_sharing: true}",
    )
    real = RealGavel(scenario, tmp_path / "work")
    seen = _recording(real)
    tables = real.run().tables
    rounds = tables["rounds"]
    check_steps_conserved(tables["jobs"], rounds)
    shared = rounds[rounds["shared_with"] >= 0]
    assert set(shared["job_id"]) == {0, 1} and set(shared["shared_with"]) == {0, 1}
    trained = shared[shared["steps"] > 0].groupby("round")["job_id"].nunique()
    assert (trained == 2).any(), "no round in which both jobs trained side by side"
    # The measured pair reached the scheduler: what it plans with is the blend of what it believed and
    # what the two processes measured side by side.
    assert seen, "no shared round was observed"
    jobs, j, measured, smoothing, before, after = seen[0]
    assert jobs == (0, 1) and real.layout.worker_types[j] == "cpu"
    assert all(rate > 0 for rate in measured)
    expected = smoothing * np.asarray(measured) + (1 - smoothing) * before[j]
    assert after[j] == pytest.approx(expected)
    assert not np.allclose(after[j], before[j])  # the table's made-up pair is not what ran


@pytest.mark.slow  # about 20 s on an idle 2-core machine, most of it process start-up
def test_a_spot_instance_is_warned_terminated_and_back_and_no_step_is_lost_or_counted_twice(
    tmp_path: Path,
) -> None:
    """The cpu instance's price rises above its bid at 3 s (its warning) and it is terminated at 5 s; it
    is back at 9 s. A job on it saves its checkpoint at the warning and goes on elsewhere from there; no
    round starts on the instance while it is away; every step is counted once; the bill is what the
    simulator's billing computes for the same fleet up to the run's end."""
    pytest.importorskip("torch")
    from clustertwin.runtime.gavel.run import RealGavel

    up, warning, back = 3.0, 2.0, 9.0
    scenario = market_scenario(
        tmp_path, f"market.warning_s={warning}", up_s=up, back_s=back, jobs=[(LM, 600), (REC, 1500)]
    )
    real = RealGavel(scenario, tmp_path / "work")
    tables = real.run().tables
    rounds, events = tables["rounds"], tables["events"]
    check_steps_conserved(tables["jobs"], rounds)
    assert (rounds["steps"] >= 0).all()  # a job restarted short of its checkpoint would make "negative" steps
    when = events.groupby("kind")["time_s"].min()
    assert up <= when["warned"] < up + warning <= when["evicted"]
    assert tables["evictions"]["terminated_s"].tolist() == [up + warning]
    on_spot = rounds[rounds["spot"]]
    assert not ((on_spot["start_s"] >= up) & (on_spot["start_s"] < back)).any()
    if "instance_back" in when:  # the run lasted until the trace gave the instance back
        assert when["instance_back"] >= back
    # The jobs on the instance at its warning were told to save; each left it, losing only the steps it
    # had not saved by the termination (taken back from its rounds), and trained on afterwards.
    warned = events[events["kind"] == "preempt"]
    assert len(warned), "no job was on the instance at its warning"
    preempted = tables["preemptions"]
    assert set(preempted["job_id"]) == set(warned["job_id"])
    rolled = events[events["kind"] == "rolled_back"]
    for row in preempted.itertuples():
        taken = rolled.loc[rolled["job_id"] == row.job_id, "detail"].str.split().str[0].astype(float)
        assert row.lost_steps <= taken.sum()
        assert (rounds.loc[rounds["job_id"] == row.job_id, "start_s"] >= up).any()
    # The same bill as the simulator's code gives for this fleet over the run.
    end = float(tables["billing"]["end_s"].max())
    billed = build(scenario).market.tables(end)
    pd.testing.assert_frame_equal(tables["billing"], billed["billing"])
    assert tables["billing"]["cost_usd"].sum() > 0


def test_the_bundled_market_scenario_runs_in_simulation_and_is_accepted_for_real(tmp_path: Path) -> None:
    """``scenarios/gavel-market-real-cpu.yaml``: its spot instance is evicted once in the run and comes
    back (the simulated replay says when); the real backend takes the scenario as it is."""
    pytest.importorskip("torch")
    from clustertwin.runtime.gavel.run import RealGavel
    from clustertwin.scenarios.load import load_scenario

    scenario = load_scenario(Path(__file__).resolve().parents[1] / "scenarios/gavel-market-real-cpu.yaml")
    tables = build(scenario).run()
    assert tables["jobs"]["completion_s"].notna().all()
    evictions = tables["evictions"]
    assert len(evictions) == 1 and evictions["terminated_s"].iloc[0] < tables["jobs"]["completion_s"].max()
    assert (tables["billing"]["worker"] == "cpu/spot/0").sum() == 2  # evicted, then granted again
    real = RealGavel(scenario, tmp_path / "work")
    assert real.market is not None and len(real.market.workers) == 3
    assert all("builtin" in entry for entry in real.catalog.values())
