"""RapidReassignment inside AgileML's real workers ([Harlap] ch. 3 inside [Proteus]): a short real run of
real processes with stragglers and a warned eviction, in which peers take items off a slowed worker and
every item of every applied clock is committed exactly once (the commit log tiles each clock's batch, and
the final model is the serial replay of its clocks)."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
from clustertwin.runtime.spot.launch import run_job
from clustertwin.runtime.spot.model import MLR, reference
from clustertwin.scenarios.load import load_scenario
from clustertwin.scenarios.spot_real_section import REAL_SPOT_SCENARIO

SHORT = [
    "seed=3",
    "real.processes={reliable: 1, transient: 3}",
    "real.job={features: 16, classes: 4, examples: 512, batch: 96, lr: 0.5, step_s: 0.08}",
    "real.duration_s=4",
    "real.evictions=[{at_s: 2.5, processes: [t2], warning_s: 0.6}]",
    # a worker is slowed 5x for stretches of its own work, often enough that one usually lags its peers
    "stragglers={model: slow_worker, delay: 4.0, probability: 0.05, mode: bsp_rr}",
]


def _rows(path):
    for line in path.read_text().splitlines():
        try:
            yield json.loads(line)
        except json.JSONDecodeError:  # half a line left by a SIGKILL
            continue


def test_peers_take_items_off_a_straggler_and_every_item_is_committed_once(tmp_path) -> None:
    scenario = load_scenario(REAL_SPOT_SCENARIO, SHORT)
    rec = run_job(scenario, tmp_path)
    logs = [row for path in sorted((tmp_path / "logs").glob("*.jsonl")) for row in _rows(path)]
    applied = {(r["g"], r["c"]) for r in logs if r["ev"] == "apply"}
    commits: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for r in logs:
        if r["ev"] == "commit" and (r["g"], r["c"]) in applied:
            commits[(r["g"], r["c"])].append((r["start"], r["end"]))
    assert len(applied) >= 10 and set(commits) == applied
    batch = scenario.real.job.batch
    for key, ranges in commits.items():  # the committed ranges tile [0, batch): no gap, no overlap
        ranges.sort()
        assert ranges[0][0] == 0 and ranges[-1][1] == batch, key
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False)), (key, ranges)
    helped = [r for r in logs if r["ev"] == "helped"]
    assert helped  # some worker's items went to a peer
    # the eviction happened mid-run: clocks ran with four workers, then with three
    assert [e["processes"] for e in rec.evictions] == ["t2"]
    assert {r["n"] for r in logs if r["ev"] == "step"} == {3, 4}
    j = scenario.real.job
    problem = MLR(j.features, j.classes, j.examples, j.batch, j.lr, scenario.seed)
    assert rec.final_params is not None
    np.testing.assert_allclose(rec.final_params, reference(problem, rec.final_clock), rtol=0, atol=1e-9)


def test_the_real_flexrr_scenario_fits_two_cores_and_its_simulation_predicts_the_order() -> None:
    from clustertwin.runtime.spot.run import check_real
    from clustertwin.sim.spot import run

    path = REAL_SPOT_SCENARIO.with_name("spot-flexrr-real-cpu.yaml")
    scenario = load_scenario(path, [])
    assert scenario.stragglers is not None and scenario.real is not None and scenario.real.market
    check_real(scenario, cores=2, processes=9)  # 1 reliable + up to 8 spot processes on 2 cores
    sim = {
        mode: run(load_scenario(path, ["real=null", f"stragglers.mode={mode}"])) for mode in ("bsp", "bsp_rr")
    }
    assert sim["bsp_rr"].info["runtime_s"] < sim["bsp"].info["runtime_s"]
    assert all(len(r.tables["evictions"]) > 0 for r in sim.values())  # stragglers and evictions in one run
