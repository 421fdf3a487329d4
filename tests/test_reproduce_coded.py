"""`clustertwin reproduce flexrr --quick`: the claims table, its exit status and the run cache; which
rows gate the exit status (`Row.gate`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clustertwin.cli import main
from clustertwin.coded_claims import Row, save_and_print

# the claims the project's issue lists: exactly these decide `reproduce flexrr`'s exit status
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
}


def test_flexrr_quick_reproduction_exit_status_matches_its_claims_and_reruns_from_cache(
    tmp_path: Path, capsys
) -> None:
    out = tmp_path / "flexrr"
    code = main(["reproduce", "flexrr", "--quick", "--out", str(out)])
    claims = json.loads((out / "claims.json").read_text())["claims"]
    assert json.loads((out / "claims.json").read_text())["seeds"] == [0, 1, 2]  # >= 3 runs, as the paper
    checked = [c for c in claims if c["ok"] is not None]
    assert {c["id"] for c in checked if c["gate"]} == GATING
    assert any(not c["gate"] for c in checked)  # the other paper claims are still checked and saved
    assert code == (0 if all(c["ok"] for c in checked if c["gate"]) else 1)
    printed = capsys.readouterr().out
    assert "flexrr claims" in printed and "(not gating)" in printed
    runs = sorted((out / "runs").glob("*.json"))
    stamps = [p.stat().st_mtime_ns for p in runs]
    assert main(["reproduce", "flexrr", "--quick", "--out", str(out)]) == code
    assert [p.stat().st_mtime_ns for p in sorted((out / "runs").glob("*.json"))] == stamps  # nothing rerun
    assert json.loads((out / "claims.json").read_text())["claims"] == claims


def _row(id: str, ours: float, gate: bool = True, accept: tuple[float, float] | None = (0.0, 1.0)) -> Row:
    return Row(id, f"claim {id}", "§0", "-", ours, accept, gate=gate)


@pytest.mark.parametrize(
    ("rows", "code"),
    [
        ([_row("a", 0.5), _row("b", 2.0, gate=False)], 0),  # a failing non-gating row: still 0
        ([_row("a", 2.0), _row("b", 0.5, gate=False)], 1),  # a failing gating row: 1
        ([_row("a", 0.5), _row("b", 2.0, accept=None)], 0),  # reported only: never decides
        ([_row("a", 2.0, gate=False), _row("b", 2.0, gate=False)], 0),
    ],
)
def test_only_gating_rows_decide_the_exit_status(tmp_path: Path, capsys, rows: list[Row], code: int) -> None:
    assert save_and_print("toy", True, tmp_path, [0, 1, 2], rows) == code
    saved = {c["id"]: c for c in json.loads((tmp_path / "claims.json").read_text())["claims"]}
    assert {i: c["gate"] for i, c in saved.items()} == {r.id: r.gate for r in rows}
    assert {i: c["ok"] for i, c in saved.items()} == {r.id: r.ok for r in rows}
    printed = capsys.readouterr().out
    marked = any(r.ok is not None and not r.gate for r in rows)
    assert ("(not gating)" in printed) == marked
    assert ("docs/algorithms/toy.md" in printed) == marked


def test_row_gates_by_default() -> None:
    # a row built without `gate` (reproduce_pipedream's) still decides the exit status
    assert _row("a", 0.5).gate is True and Row("a", "c", "s", "p", 1.0, None).gate is True
