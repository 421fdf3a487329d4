"""``clustertwin bench flexrr``: the dispatch and the printed keys, at a small size.

Not a timing test: it checks that the figures are printed as ``key=value`` lines whose values parse as
positive numbers, with the size in the key name.
"""

from __future__ import annotations

import pytest

import clustertwin.bench_flexrr as bench_flexrr
from clustertwin.bench import bench
from clustertwin.cli import main

SMALL = (
    "cluster.machines=2",
    "cluster.workers_per_machine=2",
    "iterations=3",
    "items_per_worker=200",
    "rr.message_checks=20",
    "mode=flexrr",
)


def test_bench_flexrr_prints_positive_figures(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(bench_flexrr, "FULL", SMALL)
    assert bench("flexrr") == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "=" in line]
    figures = dict(line.split("=", 1) for line in lines)
    for key in ("sim_4w_3it_s", "events", "events_per_s"):
        assert float(figures[key]) > 0, key
    assert figures["scenario"].startswith("flexrr-default (flexrr, ")


def test_bench_flexrr_returns_what_it_emits() -> None:
    seen: list[tuple[str, object]] = []
    out = bench_flexrr.bench_flexrr(emit=lambda k, v: seen.append((k, v)), overrides=SMALL, repeats=1)
    assert [k for k, _ in seen] == list(out)
    assert int(out["events"]) > 4 * 3  # at least a gate opening and a task end per worker-iteration


def test_bench_unknown_name_lists_flexrr(capsys) -> None:
    assert main(["bench", "nope"]) == 2
    assert "flexrr" in capsys.readouterr().err
