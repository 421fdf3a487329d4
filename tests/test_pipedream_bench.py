"""``clustertwin bench pipedream``: the named keys are printed as positive wall seconds.

Not a timing test. The largest profile is swapped for a small one so the planner part stays quick.
"""

from __future__ import annotations

import pytest
from clustertwin.traces.pipedream_profile import bundled_profile

import clustertwin.bench_pipedream as bench_pipedream
from clustertwin.bench import bench


def test_bench_pipedream_prints_the_named_figures(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(bench_pipedream, "largest_profile", lambda: ("alexnet", bundled_profile("alexnet")))
    assert bench("pipedream") == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "=" in line]
    figures = dict(line.split("=", 1) for line in lines)
    for key in ("sim_8x64_1f1b_s", "planner_largest_s", "planner_full_resolution_s"):
        assert float(figures[key]) > 0, key
    assert int(figures["sim_1f1b_8x64_ops"]) == 8 * 64 * 3  # F, B and W per microbatch and stage
    # Every layer of the largest profile on the largest cluster shape of `reproduce pipedream`.
    assert figures["planner_full_resolution_shape"].startswith("B 2x8 (alexnet, ")
