"""The GPU experiment's physics check: a calibrated simulation with a real run's final map pinned
(``sim.psld.run``'s ``initial_owners``, ``experiments.psld_gpu.final_map`` and ``resim``), and the
calibration's lower-bound link rates."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from clustertwin.policies.psld.baselines import round_robin_owners
from clustertwin.runtime.psld.calibrate import Line, link_is_bound
from clustertwin.scenarios.load import load_scenario
from clustertwin.sim.psld import run

from experiments.psld_gpu import FROZEN, ROOT, SCENARIO, _rate, final_map, resim

SHORT = ["real.device=cpu", "duration_s=3.0", "warmup_s=1.0"]


def test_pinning_the_policy_s_own_map_changes_nothing() -> None:
    scenario = load_scenario(SCENARIO, [*SHORT, "policy=psld", *FROZEN])
    plain = run(scenario)
    owners = round_robin_owners(int(plain.info["blocks"]), list(range(scenario.cluster.servers)))
    pinned = run(scenario, initial_owners=owners)
    assert plain.tables["iterations"].equals(pinned.tables["iterations"])


def test_a_pinned_map_holds_for_the_whole_run() -> None:
    scenario = load_scenario(SCENARIO, [*SHORT, "policy=psld", *FROZEN])
    blocks = int(run(scenario).info["blocks"])
    owners = [0] * blocks  # the whole model on PS 0, an unthrottled one
    pinned = run(scenario, initial_owners=owners)
    assert len(pinned.tables["reassignments"]) == 0
    loads = pinned.tables["loads"].set_index("server")["bytes"]
    assert loads[0] == pinned.info["model_bytes"] and loads[1] == loads[2] == 0
    with pytest.raises(ValueError, match="initial_owners"):
        run(scenario, initial_owners=owners[:-1])
    with pytest.raises(ValueError, match="initial_owners"):
        run(scenario, initial_owners=[scenario.cluster.servers] * blocks)


def test_final_map_is_the_last_iteration_s() -> None:
    servers = [0, 1, 1, 0, 0, 0] * 2  # 3 blocks, 2 iterations per worker, two workers
    frame = pd.DataFrame({"run": "real_psld", "worker": [0] * 6 + [1] * 6, "server": servers})
    assert final_map(frame, "psld", 3) == [0, 0, 0]
    with pytest.raises(ValueError):
        final_map(frame, "psld", 4)


def test_resim_reads_the_map_from_a_saved_folder(tmp_path: Path) -> None:
    """A saved folder as ``run`` writes it (made up here: real PSLD ended with everything on PS 0)."""
    workers, iterations = 4, 2
    blocks = {
        p: int(run(load_scenario(SCENARIO, [*SHORT, f"policy={p}"])).info["blocks"])
        for p in ("mxnet", "psld")
    }
    maps = {"profiling": [b % 3 for b in range(blocks["psld"])], "mxnet": [1] * blocks["mxnet"]}
    maps["psld"] = [0] * blocks["psld"]
    rows = []
    for name, owners in maps.items():
        pd.DataFrame({"iteration": range(iterations)}).to_parquet(
            tmp_path / f"real_{name}_iterations.parquet"
        )
        for w in range(workers):
            rows += [(f"real_{name}", w, r) for _ in range(iterations - 1) for r in [2] * len(owners)]
            rows += [(f"real_{name}", w, r) for r in owners]
    pd.DataFrame(rows, columns=["run", "worker", "server"]).to_parquet(tmp_path / "real_samples.parquet")
    table = [{"policy": p, "real_it_s": 1.0, "sim_it_s": 2.0} for p in ("mxnet", "psld")]
    results = {
        "scenario": str(SCENARIO.relative_to(ROOT)),
        "overrides": ["runtime.device=cpu"],  # as records saved before the section was named real: say
        "profile_s": 2.0,
        "duration_s": 3.0,
        "warmup_s": 1.0,
        "workers": workers,
        "profiling_it_s": 1.0,
        "table": table,
    }
    (tmp_path / "results.json").write_text(json.dumps(results))
    (tmp_path / "calibration.json").write_text(json.dumps({"overrides": []}))
    out = resim(tmp_path)
    assert out["psld"]["sim_saved"] == 2.0 and math.isnan(out["profiling"]["sim_saved"])
    psld = load_scenario(SCENARIO, [*SHORT, "policy=psld", *FROZEN])
    assert out["psld"]["pinned_sim"] == _rate(run(psld, initial_owners=maps["psld"]))
    assert out["profiling"]["pinned_sim"] == out["profiling"]["sim"]  # its map is the round-robin one
    assert out["psld"]["sim"] != out["psld"]["pinned_sim"]


def test_a_rate_from_a_flat_slope_is_marked_a_lower_bound() -> None:
    line = {"intercept": 0.02, "window_s": 0.05, "load_bytes": 1e6}
    assert not link_is_bound(Line(slope=1e-9, slope_se=1e-11, **line))
    assert link_is_bound(Line(slope=-1e-11, slope_se=1e-10, **line))  # workers / (slope + 2 se)
    assert link_is_bound(Line(slope=-1e-9, slope_se=1e-11, **line))  # workers x load / window
