"""`clustertwin reproduce flexrr --quick`: the claims table, its exit status and the run cache; which
rows gate the exit status (`ClaimRow.gated`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clustertwin.claim_results import ClaimRow, report
from clustertwin.cli import main

# the paper's central claims: exactly these decide `reproduce flexrr`'s exit status
GATING = {
    "slow-bsp-linear",
    "slow-ssp-50",
    *(f"slow-flexrr-ideal-{d}" for d in (0, 50, 100, 200, 300, 400)),
    "slow-reassigned-400",
    "power-order",
    "disrupted-flexrr",
    "group-0-is-ssp",
    "group-3plus-near-ideal",
    "group-3to16-negligible",
    "replication-25-vs-ssp",
}


@pytest.mark.slow
def test_flexrr_quick_reproduction_exit_status_matches_its_claims_and_reruns_from_cache(
    tmp_path: Path, capsys
) -> None:
    out = tmp_path / "flexrr"
    code = main(["reproduce", "flexrr", "--quick", "--out", str(out)])
    claims = json.loads((out / "claims.json").read_text())["claims"]
    assert json.loads((out / "claims.json").read_text())["seeds"] == [0, 1, 2]  # >= 3 runs, as the paper
    checked = [c for c in claims if c["holds"] is not None]
    assert {c["id"] for c in checked if c["gated"]} == GATING
    assert any(not c["gated"] for c in checked)  # the other paper claims are still checked and saved
    assert all(len(c["per_seed"]) == 3 for c in claims)  # our value on each seed's runs alone
    assert code == (0 if all(c["holds"] for c in checked if c["gated"]) else 1)
    printed = capsys.readouterr().out
    assert "flexrr claims" in printed and "(not gated)" in printed
    assert "reproduce flexrr: " in printed  # progress, one line per finished run off a terminal
    runs = sorted((out / "runs").glob("*.json"))
    stamps = [p.stat().st_mtime_ns for p in runs]
    assert main(["reproduce", "flexrr", "--quick", "--out", str(out)]) == code
    assert [p.stat().st_mtime_ns for p in sorted((out / "runs").glob("*.json"))] == stamps  # nothing rerun
    assert json.loads((out / "claims.json").read_text())["claims"] == claims


def _row(
    id: str, ours: float, gated: bool = True, accept: tuple[float, float] | None = (0.0, 1.0)
) -> ClaimRow:
    return ClaimRow(id, f"claim {id}", "§0", "-", ours, accept, gated=gated, why=f"reason {id}")


@pytest.mark.parametrize(
    ("rows", "code"),
    [
        ([_row("a", 0.5), _row("b", 2.0, gated=False)], 0),  # a failing claim that is not gated: still 0
        ([_row("a", 2.0), _row("b", 0.5, gated=False)], 1),  # a failing gated claim: 1
        ([_row("a", 0.5), _row("b", 2.0, accept=None)], 0),  # reported only: never decides
        ([_row("a", 2.0, gated=False), _row("b", 2.0, gated=False)], 0),
    ],
)
def test_only_gated_rows_decide_the_exit_status(
    tmp_path: Path, capsys, rows: list[ClaimRow], code: int
) -> None:
    assert report("toy", "A paper", True, [0, 1, 2], tmp_path, rows) == code
    saved = {c["id"]: c for c in json.loads((tmp_path / "claims.json").read_text())["claims"]}
    assert {i: c["gated"] for i, c in saved.items()} == {r.id: r.gated for r in rows}
    assert {i: c["holds"] for i, c in saved.items()} == {r.id: r.holds for r in rows}
    printed = capsys.readouterr().out
    marked = any(r.holds is not None and not r.gated for r in rows)
    assert ("(not gated)" in printed) == marked
    assert ("docs/algorithms/toy.md" in printed) == marked


def test_a_row_gates_by_default_unless_it_is_reported_only() -> None:
    assert _row("a", 0.5).gated is True
    assert ClaimRow("a", "c", "s", "p", 1.0, None).gated is False
