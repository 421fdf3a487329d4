"""FlexRR simulation: table contract, exactly-once, slack bound, Ideal bound, pairing, determinism."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from clustertwin.analysis.flexrr_metrics import flexrr_metrics
from clustertwin.scenarios.flexrr_results import check_flexrr_tables
from clustertwin.scenarios.flexrr_schema import FlexRRScenario
from clustertwin.scenarios.flexrr_setup import items_per_worker, profiles
from clustertwin.scenarios.load import load_scenario
from clustertwin.sim.flexrr import run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clustertwin.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "scenarios" / "flexrr-default.yaml"
SMALL = ["cluster.machines=4", "cluster.workers_per_machine=4", "iterations=6", "items_per_worker=200"]


def small(*overrides: str) -> FlexRRScenario:
    return load_scenario(DEFAULT, [*SMALL, *overrides])


def assert_exactly_once(result, items_per_worker: dict[int, tuple[int, int]], iterations: int) -> None:
    commits = result.tables["commits"].sort_values(["owner", "iteration", "start_item"])
    for (owner, it), g in commits.groupby(["owner", "iteration"]):
        lo, hi = items_per_worker[owner]
        starts, ends = g["start_item"].to_numpy(), g["end_item"].to_numpy()
        assert starts[0] == lo and ends[-1] == hi
        assert (starts[1:] == ends[:-1]).all(), f"gap/overlap for worker {owner} iteration {it}"
    assert commits.groupby(["owner", "iteration"]).ngroups == len(items_per_worker) * iterations


def assert_slack_bound(result, slack: int) -> None:
    it = result.tables["iterations"]
    done_by = it.groupby("iteration")["end_s"].max()  # all workers completed iteration k at this time
    for row in it.itertuples():
        need = row.iteration - slack - 1
        if need >= 0:
            assert row.start_s >= done_by[need] - 1e-9


def ranges(scenario: FlexRRScenario) -> dict[int, tuple[int, int]]:
    """Each worker's item range, from the scenario (not from the commits under test)."""
    bounds = [0]
    for n in items_per_worker(scenario):
        bounds.append(bounds[-1] + n)
    return {w: (bounds[w], bounds[w + 1]) for w in range(len(bounds) - 1)}


@pytest.mark.parametrize("mode", ["bsp", "ssp", "bsp_rr", "flexrr"])
def test_modes_run_and_keep_invariants(mode):
    s = small(f"mode={mode}", "stragglers.delay=2.0", "stragglers.probability=0.05")
    result = run(s)
    check_flexrr_tables(result)
    assert_exactly_once(result, ranges(s), s.iterations)
    assert_slack_bound(result, s.effective_slack)
    m = flexrr_metrics(result)
    assert m["vs_ideal"] >= 1.0 - 1e-9
    if mode in ("bsp", "ssp"):
        assert m["reassigned_fraction"] == 0.0 and len(result.tables["messages"]) == 0


def test_no_stragglers_every_mode_runs_at_nominal_speed():
    for mode in ("bsp", "flexrr"):
        result = run(small(f"mode={mode}", "stragglers.model=none"))
        assert result.info["makespan_s"] == pytest.approx(6 * 6.0)
        assert result.info["ideal_s"] == pytest.approx(6 * 6.0)


def test_bsp_waits_for_the_slowest_each_iteration():
    # with slack 0 no worker starts iteration k+1 before the last finished k, so the iteration ends line up
    result = run(small("mode=bsp", "stragglers.model=power_law", "stragglers.alpha=3"))
    it = result.tables["iterations"]
    ends = it.groupby("iteration")["end_s"].max()
    starts = it.groupby("iteration")["start_s"].min()
    assert (starts.iloc[1:].to_numpy() >= ends.iloc[:-1].to_numpy() - 1e-9).all()


def test_same_seed_same_event_log_and_modes_share_stragglers():
    a = run(small("mode=flexrr", "stragglers.model=power_law"))
    b = run(small("mode=flexrr", "stragglers.model=power_law"))
    for name in a.tables:
        pd.testing.assert_frame_equal(a.tables[name], b.tables[name])
    c = run(small("mode=bsp", "stragglers.model=power_law"))
    assert c.info["ideal_s"] == a.info["ideal_s"]  # same realisation -> same bound
    pa = profiles(small("mode=flexrr", "stragglers.model=slow_worker", "stragglers.delay=1.0"))
    pb = profiles(small("mode=bsp", "stragglers.model=slow_worker", "stragglers.delay=1.0"))
    for x, y in zip(pa, pb, strict=True):
        assert [x.elapsed(0.0, w, 1.0) for w in range(8)] == [y.elapsed(0.0, w, 1.0) for w in range(8)]
    d = run(small("mode=flexrr", "stragglers.model=power_law", "seed=1"))
    assert d.info["ideal_s"] != a.info["ideal_s"]


def test_flexrr_beats_bsp_under_slow_workers():
    bsp = run(small("mode=bsp", "stragglers.delay=3.0", "stragglers.probability=0.05"))
    flexrr = run(small("mode=flexrr", "stragglers.delay=3.0", "stragglers.probability=0.05"))
    assert flexrr.info["makespan_s"] < bsp.info["makespan_s"]
    assert flexrr_metrics(flexrr)["reassigned_fraction"] > 0


def test_busy_log_accounts_for_every_processed_item():
    """``simulate()``'s busy log (the timelines behind docs/flexrr.md's idle breakdown): per worker the
    stretches of processing do not overlap, each takes the time its straggler profile gives, and their
    items are exactly the committed items plus the wasted ones, kind by kind."""
    from clustertwin.sim.flexrr import simulate

    s = small("mode=flexrr", "stragglers.delay=4.0", "stragglers.probability=0.05")
    result, log = simulate(s)
    busy = pd.DataFrame(log.busy, columns=["worker", "start", "end", "kind", "owner", "iteration", "items"])
    assert set(busy["kind"]) <= {"own", "help", "spec"} and (busy["items"] > 0).all()
    assert (busy["end"] >= busy["start"]).all()
    for _, g in busy.sort_values(["worker", "start"]).groupby("worker"):
        assert (g["start"].to_numpy()[1:] >= g["end"].to_numpy()[:-1] - 1e-9).all()
    commits = result.tables["commits"]
    sizes = commits["end_item"] - commits["start_item"]
    by_kind = busy.groupby("kind")["items"].sum()
    assert by_kind.get("own", 0) == sizes[commits["kind"] == "own"].sum()
    assert by_kind.get("help", 0) == sizes[commits["kind"] == "help"].sum()
    assert by_kind.get("spec", 0) == sizes[commits["kind"] == "reclaimed"].sum() + result.info["wasted_items"]
    assert by_kind.get("help", 0) > 0
    # each worker's busy time is what its profile gives for the work it did (work-paced: idling does not
    # consume a slowdown)
    profs = profiles(s)
    for w, g in busy.groupby("worker"):
        work = g["items"].sum() / s.items_per_worker
        assert (g["end"] - g["start"]).sum() == pytest.approx(profs[w].elapsed(0.0, 0.0, work), rel=1e-9)
    # off with record_messages=false
    assert simulate(small("mode=flexrr", "record_messages=false"))[1].busy == []


def test_helper_group_zero_is_ssp():
    ssp = run(small("mode=ssp", "stragglers.delay=2.0", "stragglers.probability=0.05"))
    zero = run(
        small("mode=flexrr", "rr.helper_group_size=0", "stragglers.delay=2.0", "stragglers.probability=0.05")
    )
    assert zero.info["makespan_s"] == ssp.info["makespan_s"]


def test_scenario_validation_errors():
    with pytest.raises(InputError, match="nonsense"):
        load_scenario(DEFAULT, ["nonsense=1"])
    with pytest.raises(InputError, match="message_checks"):
        load_scenario(DEFAULT, ["items_per_worker=50"])
    with pytest.raises(InputError, match="mode"):
        load_scenario(DEFAULT, ["mode=asp"])


def test_bundled_scenarios_load():
    for path in sorted((ROOT / "scenarios" / "flexrr").glob("*.yaml")) + [DEFAULT]:
        assert load_scenario(path).kind == "flexrr"


def test_trace_driven_and_disrupted_machine_run():
    for model in ("trace", "disrupted_machine", "uneven"):
        s = small(f"stragglers.model={model}", "stragglers.delay=2.0")
        result = run(s)
        assert_exactly_once(result, ranges(s), 6)
        assert result.info["makespan_s"] >= result.info["ideal_s"] - 1e-9


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mode=st.sampled_from(["bsp", "ssp", "bsp_rr", "flexrr"]),
    model=st.sampled_from(["slow_worker", "power_law", "disrupted_machine", "uneven"]),
    delay=st.floats(0.0, 5.0),
    jitter=st.sampled_from([0.0, 0.05, 1.0]),
    latency=st.sampled_from([0.0, 0.001, 0.5]),
    slack=st.integers(0, 3),
    helpers=st.integers(0, 5),
    follow=st.sampled_from([0.05, 0.3]),
    seed=st.integers(0, 1000),
)
def test_sim_invariants_under_random_stragglers_and_latencies(
    mode, model, delay, jitter, latency, slack, helpers, follow, seed
):
    s = load_scenario(
        DEFAULT,
        [
            "cluster.machines=2",
            "cluster.workers_per_machine=3",
            "iterations=4",
            "items_per_worker=100",
            "rr.message_checks=20",
            f"mode={mode}",
            f"slack={slack}",
            f"stragglers.model={model}",
            f"stragglers.delay={delay:.6f}",  # YAML reads 1e-12 as a string
            "stragglers.probability=0.2" if model == "slow_worker" else "stragglers.probability=0.5",
            "stragglers.alpha=3",
            f"latency_s={latency}",
            f"latency_jitter_s={jitter}",
            f"rr.helper_group_size={helpers}",
            f"rr.follow_up_fraction={follow}",
            f"rr.initial_fraction={follow / 2}",
            f"seed={seed}",
        ],
    )
    result = run(s)
    assert_exactly_once(result, ranges(s), s.iterations)
    assert_slack_bound(result, slack)
    assert result.info["makespan_s"] >= result.info["ideal_s"] * (1 - 1e-9)  # Ideal is never beaten
    msgs = result.tables["messages"]
    do = msgs[msgs["kind"] == "DoThis"]
    for (_src, _it), g in do.groupby(["src", "iteration"]):
        spans = sorted(zip(g["start_item"], g["end_item"], strict=True))
        assert all(
            a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:], strict=False)
        )  # never twice
