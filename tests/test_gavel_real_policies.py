"""Every Gavel policy input reaches both executors: prices, a budget and entity weights, built once
(``scenarios.gavel_scheduler``); settings a backend cannot honour are refused by field. The real runs use
tiny CPU jobs (two short jobs, rounds of a few seconds). Space sharing and a market fleet for real:
``test_gavel_real_share_market.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from clustertwin.scenarios.gavel_scheduler import setup
from clustertwin.scenarios.load import load_scenario
from clustertwin.sim.gavel.setup import build

from clustertwin.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
REAL_CPU = ROOT / "scenarios/gavel-real-cpu.yaml"
LM, REC = "LM (batch size 20)", "Recommendation (batch size 512)"


def tiny_trace(path: Path, jobs: list[tuple[str, int]], slo: float = -1) -> Path:
    path.write_text("".join(f"{t}\tcmd\t.\t--steps\t0\t{steps}\t1\t1\t{slo}\t0\n" for t, steps in jobs))
    return path


def tiny(tmp_path: Path, *overrides: str, jobs: list[tuple[str, int]] | None = None, slo: float = -1):
    trace = tiny_trace(tmp_path / "jobs.trace", jobs or [(LM, 60), (REC, 120)], slo)
    base = [f"workload.trace={trace}", "mechanism.round_s=5", "mechanism.preemption_overhead_s=2"]
    base.append("real.commands=builtin")  # the trace's commands are placeholders: run the stand-ins
    return load_scenario(REAL_CPU, [*base, *overrides])


def _field(err: pytest.ExceptionInfo[InputError]) -> str:
    return str(err.value)


# --- refusals: a setting no policy or backend would read is an error naming its field ---------------


@pytest.mark.parametrize(
    "overrides, field",
    [
        (["policy.name=min_cost", "policy.params={}"], "cluster.prices"),
        (
            ["policy.name=makespan_budget", "policy.params={}", "cluster.prices={cpu: 1, cpu_slow: 0.4}"],
            "policy.budget_usd",
        ),
        (["policy.budget_usd=3.0"], "policy.budget_usd"),
        (["policy.name=hierarchical"], "workload.entities"),
        (["workload.entities=[1.0, 2.0]"], "workload.entities"),
        (["mechanism.estimate_colocation=0.5"], "mechanism.estimate_colocation"),
    ],
)
def test_a_policy_input_missing_or_unread_is_refused_by_field(
    tmp_path: Path, overrides: list[str], field: str
) -> None:
    with pytest.raises(InputError, match=f"field {field}"):
        setup(tiny(tmp_path, *overrides))


def test_a_host_naming_an_unknown_worker_type_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cluster.host"):
        tiny(tmp_path, "cluster.host={cores: 2, types: [gpu]}")


def test_settings_the_real_backend_cannot_honour_are_refused_by_field(tmp_path: Path) -> None:
    from clustertwin.runtime.gavel.run import refuse_unsupported

    with pytest.raises(InputError, match="field mechanism.ideal"):
        refuse_unsupported(tiny(tmp_path, "mechanism.ideal=true"))
    with pytest.raises(InputError, match="field real"):
        refuse_unsupported(load_scenario(ROOT / "scenarios/gavel-default.yaml"))


# --- simulation: the budget reaches makespan_budget ------------------------------------------------


def test_makespan_budget_spends_within_a_tight_budget_and_finishes_faster_with_a_loose_one(
    tmp_path: Path,
) -> None:
    """A budget too small for the fast type keeps the work on the cheap one (min_cost's choice); a loose
    one buys the fast type and a shorter makespan."""
    results = {}
    for budget in (0.002, 50.0):
        scenario = tiny(
            tmp_path,
            "policy.name=makespan_budget",
            "policy.params={}",
            "cluster.prices={cpu: 10.0, cpu_slow: 0.5}",
            f"policy.budget_usd={budget}",
            jobs=[(LM, 3000), (REC, 6000)],
        )
        sim = build(scenario)
        tables = sim.run()
        results[budget] = (tables, sim.scheduler.spent_usd)
    tight, loose = results[0.002], results[50.0]
    assert tight[1] < loose[1]
    assert tight[0]["jobs"]["completion_s"].max() > loose[0]["jobs"]["completion_s"].max()
    assert set(loose[0]["rounds"]["worker_type"]) >= {"cpu"}


# --- real runs ------------------------------------------------------------------------------------


def _real(scenario, tmp_path: Path):
    pytest.importorskip("torch")
    from clustertwin.runtime.gavel.run import RealGavel

    real = RealGavel(scenario, tmp_path / "work")
    allocations = []
    reset = real.scheduler.reset

    def recording(now: float):
        allocation = reset(now)
        allocations.append((real.scheduler.last_input, allocation))
        return allocation

    real.scheduler.reset = recording  # type: ignore[method-assign]
    return real, allocations


def test_min_cost_runs_for_real_on_the_cheapest_steps(tmp_path: Path) -> None:
    """Prices reach the real backend's policy: min_cost puts every job on the type whose steps cost least
    (cpu_slow at a tenth of cpu's price, half its speed)."""
    scenario = tiny(
        tmp_path, "policy.name=min_cost", "policy.params={}", "cluster.prices={cpu: 1.0, cpu_slow: 0.1}"
    )
    real, allocations = _real(scenario, tmp_path)
    tables = real.run().tables
    assert allocations and allocations[0][0].prices is not None
    assert set(tables["rounds"]["worker_type"]) == {"cpu_slow"}
    assert tables["jobs"]["completion_s"].notna().all()


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides",
    [
        ["policy.name=min_cost_slo", "cluster.prices={cpu: 1.0, cpu_slow: 0.1}"],
        ["policy.name=makespan_budget", "cluster.prices={cpu: 1.0, cpu_slow: 0.1}", "policy.budget_usd=10.0"],
        ["policy.name=hierarchical", "policy.params={}", "workload.entities=[1.0, 3.0]"],
    ],
)
def test_every_cost_and_hierarchical_policy_runs_for_real(tmp_path: Path, overrides: list[str]) -> None:
    scenario = tiny(tmp_path, "policy.params={}", *overrides, slo=60)
    real, allocations = _real(scenario, tmp_path)
    tables = real.run().tables
    assert tables["jobs"]["completion_s"].notna().all()
    inp, allocation = allocations[0]
    if scenario.policy.name == "hierarchical":
        # Entity 1 weighs 3: with the two jobs in two entities on one fast slot each, the weights reach
        # the policy as given (not all 1).
        assert inp.entity_weights == {0: 1.0, 1: 3.0}
        assert list(inp.entities) == [0, 1]
    if scenario.policy.name == "makespan_budget":
        assert inp.budget == pytest.approx(10.0)
        assert real.scheduler.spent_usd > 0


# --- space sharing: the pair estimate -----------------------------------------------------------------------


def pair_table(path: Path) -> Path:
    """The CPU scenario's table with a measured-looking pair for LM and Recommendation on cpu."""
    rates = {"cpu": {LM: 61.0, REC: 150.0}, "cpu_slow": {LM: 30.5, REC: 75.0}}
    table: dict = {}
    for worker, jobs in rates.items():
        rows = table[worker] = {}
        for job, rate in jobs.items():
            rows[str((job, 1))] = {"null": rate}
        if worker == "cpu":
            rows[str((LM, 1))][str((REC, 1))] = [45.0, 110.0]
            rows[str((REC, 1))][str((LM, 1))] = [110.0, 45.0]
    path.write_text(json.dumps(table))
    return path


def test_a_measured_pair_replaces_the_oracle_in_what_the_policy_plans_with(tmp_path: Path) -> None:
    """The observation path both executors use: a shared round's measured rates blend into the pair's
    throughputs the next allocation plans with."""
    scenario = tiny(
        tmp_path,
        f"throughputs={pair_table(tmp_path / 'pairs.json')}",
        "policy.params={space_sharing: true}",
    )
    made = setup(scenario)
    sched = made.scheduler
    for job in made.jobs:
        sched.add_job(job.spec)
    a, b = made.jobs[0].spec, made.jobs[1].spec
    before = sched._pair_throughputs(a, b)
    sched.observe_pair((0, 1), 0, (20.0, 50.0), 0.5)
    after = sched._pair_throughputs(b, a)  # asked the other way round, it answers in that order
    assert after[0].tolist() == pytest.approx([(50.0 + before[0, 1]) / 2, (20.0 + before[0, 0]) / 2])


# --- a market fleet ---------------------------------------------------------------------------------------


def market_files(tmp_path: Path, up_s: float, back_s: float) -> tuple[Path, Path]:
    """A price trace in which the cpu instance's spot price rises above its bid at ``up_s`` and falls
    back at ``back_s`` (seconds after the start), and an on-demand table for the two instance types."""
    start = pd.Timestamp("2024-01-01T00:00:00Z")
    rows = [(0.0, 0.05), (up_s, 5.0), (back_s, 0.05), (3600.0 * 24, 0.05)]
    trace = tmp_path / "prices.csv"
    trace.write_text(
        "timestamp,region,zone,instance_type,price\n"
        + "".join(
            f"{(start + pd.Timedelta(seconds=t)).isoformat()},us-east-1,us-east-1a,cpu.large,{p}\n"
            for t, p in rows
        )
    )
    table = tmp_path / "on_demand.csv"
    table.write_text("instance_type,vcpus,gpus,price\ncpu.large,2,2,1.0\ncpu.slow,2,2,0.3\n")
    return trace, table


def market_scenario(
    tmp_path: Path, *overrides: str, up_s: float = 4.0, back_s: float = 14.0, jobs: list | None = None
):
    trace, table = market_files(tmp_path, up_s, back_s)
    market = (
        f"market={{trace: {trace}, on_demand_prices: {table}, start: '2024-01-01T00:00:00Z',"
        " warning_s: 3.0, request_delay_s: 0.0, boot_s: 0.0,"
        " types: {cpu: {instance_type: cpu.large, zone: us-east-1a, spot: 1},"
        " cpu_slow: {instance_type: cpu.slow, zone: us-east-1a, on_demand: 1}}}"
    )
    return tiny(tmp_path, market, "policy.params={aware: true}", *overrides, jobs=jobs)
