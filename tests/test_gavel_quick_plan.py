"""The quick Gavel reproduction's plan, without simulating: every quick run is a valid scenario whose
policy can be built, at least twelve claims are judged, and the judging code gives each claim a row,
a verdict where it is judged and a reason where it is not."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest
from clustertwin.scenarios.claims import load_claims
from clustertwin.scenarios.gavel_scheduler import gavel_policy
from clustertwin.scenarios.load import load_scenario

from clustertwin import reproduce
from clustertwin.atomic import write_json
from clustertwin.cli import main
from clustertwin.code_fingerprint import code_fingerprint

JUDGED_IN_QUICK = 12


def test_every_quick_run_is_a_scenario_with_a_policy() -> None:
    plan = reproduce.plan_of(load_claims("gavel"), quick=True)
    specs = reproduce.specs_of(plan)
    assert specs
    for spec in specs.values():
        scenario = load_scenario(spec.scenario, spec.overrides)
        assert scenario.seed in (0, 1, 2)
        gavel_policy(scenario)  # a baseline whose policy refuses its parameters fails here


def test_quick_judges_at_least_twelve_claims_and_skips_the_rest_with_a_reason() -> None:
    claim_set = load_claims("gavel")
    plan = reproduce.plan_of(claim_set, quick=True)
    judged = [c for c in claim_set.claims if c.accept is not None and not c.quick.skip]
    assert len(judged) >= JUDGED_IN_QUICK
    for claim in claim_set.claims:
        if claim.runs and not claim.quick.skip:
            arms = {"treatment", "baseline"} if claim.measure == "ratio" else {"treatment"}
            assert set(plan[claim.id]) == arms and all(plan[claim.id].values()), claim.id
        else:
            assert plan[claim.id] == {}, claim.id
    # The quick points are lighter than the full ones or the same; never heavier.
    full = reproduce.specs_of(reproduce.plan_of(claim_set, quick=False))
    assert len(reproduce.specs_of(plan)) <= len(full)


def _metric(key: str, metric: str) -> float:
    """A stand-in metric, distinct per run and metric, in [1, 2)."""
    return 1.0 + int(hashlib.sha256(f"{key}/{metric}".encode()).hexdigest()[:8], 16) % 997 / 997


def test_reproduce_quick_reports_a_verdict_per_judged_claim(tmp_path: Path, monkeypatch, capsys) -> None:
    """The whole command on stand-in finished runs (the per-run cache), so nothing is simulated."""
    claim_set = load_claims("gavel")
    plan = reproduce.plan_of(claim_set, quick=True)
    out = tmp_path / "out"
    metrics = {m for c in claim_set.claims if c.runs for m in (c.metric, *c.show)}
    (out / "runs").mkdir(parents=True)
    for key in reproduce.specs_of(plan):
        stand_in = {m: _metric(key, m) for m in metrics}
        write_json(out / "runs" / f"{key}.json", {**stand_in, "code": code_fingerprint()})
    monkeypatch.setattr(reproduce, "simulate", lambda spec: pytest.fail(f"simulated {spec}"))
    import clustertwin.analysis.gavel_claim_measures as measures

    monkeypatch.setattr(measures, "compute", lambda name, args: 0.01)
    page = tmp_path / "reproduction.md"
    code = main(["reproduce", "gavel", "--quick", "--out", str(out), "--markdown", str(page)])
    saved = json.loads((out / "claims.json").read_text())
    rows = {r["id"]: r for r in saved["claims"]}
    assert list(rows) == [c.id for c in claim_set.claims]
    assert code == (0 if all(r["holds"] for r in rows.values() if r["gated"]) else 1)
    assert sum(r["holds"] is not None for r in rows.values()) >= JUDGED_IN_QUICK
    for claim in claim_set.claims:
        row = rows[claim.id]
        if claim.quick.skip:
            assert row["holds"] is None and row["why"] == f"not judged in --quick: {claim.quick.skip}"
        elif claim.accept is not None:
            low, high = claim.accept
            assert row["holds"] is (low <= row["ours"] <= high) and not math.isnan(row["ours"])
        if claim.quick.note and not claim.quick.skip:
            assert claim.quick.note in row["claim"]
    assert saved["summary"] in capsys.readouterr().out
    assert "<!-- reproduce gavel -->" in page.read_text() and saved["summary"] in page.read_text()
