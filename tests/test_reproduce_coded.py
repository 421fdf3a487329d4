"""`clustertwin reproduce flexrr --quick`: the claims table, its exit status and the run cache."""

from __future__ import annotations

import json
from pathlib import Path

from clustertwin.cli import main


def test_flexrr_quick_reproduction_exit_status_matches_its_claims_and_reruns_from_cache(
    tmp_path: Path, capsys
) -> None:
    out = tmp_path / "flexrr"
    code = main(["reproduce", "flexrr", "--quick", "--out", str(out)])
    claims = json.loads((out / "claims.json").read_text())["claims"]
    checked = [c for c in claims if c["ok"] is not None]
    assert len(checked) >= 10 and {c["id"] for c in claims} >= {"power-order", "group-0-is-ssp"}
    assert code == (0 if all(c["ok"] for c in checked) else 1)
    assert "flexrr claims" in capsys.readouterr().out
    runs = sorted((out / "runs").glob("*.json"))
    stamps = [p.stat().st_mtime_ns for p in runs]
    assert main(["reproduce", "flexrr", "--quick", "--out", str(out)]) == code
    assert [p.stat().st_mtime_ns for p in sorted((out / "runs").glob("*.json"))] == stamps  # nothing rerun
    assert json.loads((out / "claims.json").read_text())["claims"] == claims
