"""One claim row for every ``clustertwin reproduce NAME``: the schema refuses a gated failure without a
reason, every claim set's rows carry the same keys and a reason on every gated claim, and the summary line
names what does not reproduce."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from pathlib import Path

import pytest
from clustertwin.scenarios.claims import load_claims

from clustertwin import reproduce_flexrr, reproduce_pipedream, reproduce_proteus, reproduce_psld
from clustertwin.claim_results import ClaimRow, exit_status, report, summary_line
from clustertwin.claim_runs import Spec, with_per_seed
from clustertwin.reproduce import claim_row

KEYS = ["id", "claim", "source", "paper", "ours", "per_seed", "accept", "holds", "gated", "why"]


def _placeholder(key: str) -> float:
    """A stand-in metric value, distinct per run so that differences and ratios are not degenerate."""
    return 1.0 + int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % 997 / 997


def _metrics(keys: list) -> dict:
    return {key: defaultdict(lambda key=key: _placeholder(str(key))) for key in keys}


def _gavel() -> list[ClaimRow]:
    return [
        claim_row(claim, [claim.paper if isinstance(claim.paper, float) else 1.0])
        for claim in load_claims("gavel").claims
    ]


def _flexrr() -> list[ClaimRow]:
    plan = reproduce_flexrr._Plan([0, 1, 2])
    return reproduce_flexrr._claims(plan)(_metrics(list(plan.specs)))


def _psld() -> list[ClaimRow]:
    plan = reproduce_psld._Plan([0])
    return reproduce_psld._claims(plan, True)(_metrics(list(plan.specs)))


def _proteus() -> list[ClaimRow]:
    starts = 2
    keys = [
        (market, hours, seed, config)
        for market in reproduce_proteus.MARKETS
        for hours in reproduce_proteus.JOB_HOURS
        for seed in range(1, starts + 1)
        for config in reproduce_proteus.CONFIGS
    ]
    return [*reproduce_proteus.market_rows(_metrics(keys), starts), *reproduce_proteus.stage_claims()]


def _pipedream() -> list[ClaimRow]:
    rp = reproduce_pipedream
    return [*rp.oracle_rows(True), *rp.brute_force_rows(True), *rp.choice_rows(), *rp.ptdp_rows()]


SETS = {"gavel": _gavel, "flexrr": _flexrr, "psld": _psld, "proteus": _proteus, "pipedream": _pipedream}


@pytest.mark.parametrize("name", SETS)
def test_every_claim_sets_rows_share_the_keys_and_say_why_a_gated_claim_may_fail(name: str) -> None:
    """Rows built from each set's claim data (placeholder metrics, no simulation): the same keys in
    every set, unique ids, and a reason on every gated claim whatever its result today."""
    rows = SETS[name]()
    assert rows
    assert all(list(r.to_json()) == KEYS for r in rows)
    assert len({r.id for r in rows}) == len(rows)
    assert all(r.source.strip() for r in rows)
    assert [r.id for r in rows if r.gated and not r.why.strip()] == []


def test_a_gated_claim_that_fails_without_a_why_is_refused() -> None:
    with pytest.raises(ValueError, match="claim x: a gated claim that does not hold needs a why"):
        ClaimRow("x", "claim", "§1", 2.0, 5.0, (1.0, 3.0))
    # holding, not gated, or reported only: no reason needed
    assert ClaimRow("x", "claim", "§1", 2.0, 2.5, (1.0, 3.0)).holds is True
    assert ClaimRow("x", "claim", "§1", 2.0, 5.0, (1.0, 3.0), gated=False).holds is False
    reported = ClaimRow("x", "claim", "§1", 2.0, 5.0, None)
    assert reported.holds is None and reported.gated is False


def _rows() -> list[ClaimRow]:
    return [
        ClaimRow("fast", "it is fast", "§2", 2.0, 2.1, (1.0, 3.0), why="a slower machine"),
        ClaimRow("small", "it is small", "Fig. 3", "tiny", 9.0, (0.0, 1.0), why="the model grew"),
        ClaimRow("cheap", "it is cheap", "§4", 1.0, 7.0, (0.0, 1.0), gated=False, why="2016 prices"),
        ClaimRow("count", "how many", "§5", "-", 4.0, None),
    ]


def test_the_summary_line_names_the_failing_gated_claim_and_its_reason() -> None:
    rows = _rows()
    assert summary_line(rows) == "1 of 2 gated claims hold; does not reproduce: small — the model grew"
    assert exit_status(rows) == 1
    assert summary_line(rows[:1]) == "1 of 1 gated claims hold"
    assert exit_status([rows[0], rows[2], rows[3]]) == 0  # a failing claim that is not gated does not decide


def test_report_saves_every_row_and_ends_with_the_summary(tmp_path: Path, capsys) -> None:
    rows = _rows()
    assert report("toy", "A paper", True, [0, 1], tmp_path, rows) == 1
    saved = json.loads((tmp_path / "claims.json").read_text())
    assert saved["name"] == "toy" and saved["paper"] == "A paper" and saved["seeds"] == [0, 1]
    assert [c["id"] for c in saved["claims"]] == [r.id for r in rows]
    assert [c["holds"] for c in saved["claims"]] == [True, False, False, None]
    assert [c["gated"] for c in saved["claims"]] == [True, True, False, False]
    assert saved["summary"] == summary_line(rows)
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-1] == summary_line(rows)
    assert any("cheap: 2016 prices" in line for line in printed)  # a checked row that is not gated: its why
    assert any("(not gated)" in line and "docs/algorithms/toy.md" in line for line in printed)


def test_repeated_ids_are_refused(tmp_path: Path) -> None:
    row = _rows()[0]
    with pytest.raises(ValueError, match="ids repeat"):
        report("toy", "A paper", True, [0], tmp_path, [row, row])


def test_per_seed_values_come_from_each_seeds_runs_alone() -> None:
    """Two arms over three seeds: ours is the ratio of the arms' means; per seed, the ratio of that seed's
    runs."""
    arms = {arm: [Spec("s.yaml", (f"arm={arm}", f"seed={seed}")) for seed in (0, 1, 2)] for arm in ("a", "b")}
    specs = {s.key: s for runs in arms.values() for s in runs}
    values = {"a": [2.0, 4.0, 6.0], "b": [1.0, 1.0, 2.0]}
    done = {s.key: {"x": values[arm][i]} for arm, runs in arms.items() for i, s in enumerate(runs)}

    def make_rows(metrics: dict) -> list[ClaimRow]:
        mean = {arm: sum(metrics[s.key]["x"] for s in runs) / 3 for arm, runs in arms.items()}
        return [ClaimRow("ratio", "a over b", "§1", 2.0, mean["a"] / mean["b"], (0.0, 9.0), why="toy")]

    [row] = with_per_seed(make_rows(done), make_rows, done, specs, [0, 1, 2])
    assert row.ours == pytest.approx(4.0 / (4.0 / 3))
    assert row.per_seed == pytest.approx((2.0, 4.0, 3.0))


def test_an_unbounded_ratio_prints_as_infinity_and_keeps_each_seed(tmp_path: Path, capsys) -> None:
    """A ratio over a saturated baseline is infinite on some seeds: the table shows ∞ and each seed's
    value instead of a spread, and the saved row keeps the values."""
    row = ClaimRow("las", "aware beats agnostic", "§1", 3.5, float("inf"), (1.75, float("inf")),
                   "{:.2f}x", why="saturates", per_seed=(float("inf"), 4.0, float("inf")))  # fmt: skip
    assert row.holds
    assert report("toy", "A paper", False, [0, 1, 2], tmp_path, [row]) == 0
    printed = capsys.readouterr().out
    assert "∞ (∞, 4.00x, ∞)" in printed
    saved = json.loads((tmp_path / "claims.json").read_text())["claims"][0]
    assert saved["ours"] == float("inf") and saved["per_seed"][1] == 4.0
