"""``clustertwin reproduce``: claims as data, the exit status, and resuming from finished runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clustertwin.scenarios import claims

from clustertwin.cli import main

SMALL = """\
name: small
kind: gavel
cluster:
  gpus: {v100: 4, k80: 4}
workload:
  generate: {num_jobs: 30, jobs_per_hour: 8.0}
policy:
  name: las
"""


def claim_set(tmp_path: Path, accept: str, why: str = "why: a smaller cluster than the paper's") -> Path:
    (tmp_path / "small.yaml").write_text(SMALL)
    claims = tmp_path / "claims"
    claims.mkdir()
    (claims / "tiny.yaml").write_text(f"""\
paper: test
claims:
  - id: aware-beats-agnostic
    claim: aware LAS lowers average JCT
    source: test
    paper: 2.0
    scenario: {tmp_path / "small.yaml"}
    metric: avg_jct_s
    baseline: [policy.params.aware=false]
    accept: {accept}
    {why}
    full: {{seeds: [0, 1]}}
    quick: {{seeds: [0]}}
""")
    return claims


@pytest.mark.parametrize(("accept", "code"), [("[1.0, 100.0]", 0), ("[50.0, 100.0]", 1)])
def test_exit_status_follows_the_claims(tmp_path: Path, monkeypatch, capsys, accept: str, code: int) -> None:
    monkeypatch.setattr(claims, "CLAIMS_DIR", claim_set(tmp_path, accept))
    out = tmp_path / "out"
    assert main(["reproduce", "tiny", "--quick", "--out", str(out), "--workers", "1"]) == code
    result = json.loads((out / "claims.json").read_text())
    row = result["claims"][0]
    assert row["holds"] is (code == 0) and row["gated"] is True
    assert row["ours"] > 1.0  # heterogeneity-aware LAS wins on a V100+K80 cluster
    assert row["per_seed"] == [row["ours"]] and row["why"] == "a smaller cluster than the paper's"
    printed = capsys.readouterr().out.strip().splitlines()
    assert any("aware-beats-agnostic" in line for line in printed)
    summary = (
        "1 of 1 gated claims hold"
        if code == 0
        else "0 of 1 gated claims hold; does not reproduce: aware-beats-agnostic — a smaller cluster than the"
        " paper's"
    )
    assert printed[-1] == summary == result["summary"]


def test_a_claim_without_a_why_is_bad_input(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(claims, "CLAIMS_DIR", claim_set(tmp_path, "[1.0, 100.0]", why=""))
    assert main(["reproduce", "tiny", "--quick", "--out", str(tmp_path / "out")]) == 2
    assert "why" in capsys.readouterr().err
    assert not (tmp_path / "out" / "claims.json").exists()


def test_finished_runs_are_reused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(claims, "CLAIMS_DIR", claim_set(tmp_path, "[1.0, 100.0]"))
    out = tmp_path / "out"
    main(["reproduce", "tiny", "--out", str(out), "--workers", "1"])
    cached = sorted((out / "runs").glob("*.json"))
    assert len(cached) == 4  # two arms x two seeds
    # Rerunning must not simulate again: make any simulation fail loudly.
    import clustertwin.reproduce

    monkeypatch.setattr(clustertwin.reproduce, "simulate", lambda spec: pytest.fail("re-simulated"))
    assert main(["reproduce", "tiny", "--out", str(out), "--workers", "1"]) == 0


def test_runs_made_by_other_code_are_run_again(tmp_path: Path, monkeypatch) -> None:
    import clustertwin.claim_runs

    monkeypatch.setattr(claims, "CLAIMS_DIR", claim_set(tmp_path, "[1.0, 100.0]"))
    out = tmp_path / "out"
    main(["reproduce", "tiny", "--out", str(out), "--workers", "1"])
    monkeypatch.setattr(clustertwin.claim_runs, "code_fingerprint", lambda: "other code")
    assert main(["reproduce", "tiny", "--out", str(out), "--workers", "1"]) == 0
    # A file is written only when its run finishes: all four were simulated again, by the new code.
    assert {json.loads(p.read_text())["code"] for p in (out / "runs").glob("*.json")} == {"other code"}


def test_unknown_claim_set_is_an_input_error(capsys) -> None:
    assert main(["reproduce", "nonesuch", "--quick"]) == 2
    assert "gavel" in capsys.readouterr().err


@pytest.mark.slow
def test_gavel_quick_claims(tmp_path: Path) -> None:
    """The quick Gavel reproduction (seed 0; the points its claims file gives): its exit status says
    whether every gated claim held; at least 12 claims are judged, the heterogeneity-aware fairness and
    FIFO claims it judges must hold, and every claim that is not judged or does not hold says why."""
    out = tmp_path / "gavel"
    code = main(["reproduce", "gavel", "--quick", "--out", str(out)])
    rows = {row["id"]: row for row in json.loads((out / "claims.json").read_text())["claims"]}
    assert code == (0 if all(row["holds"] for row in rows.values() if row["gated"]) else 1)
    assert sum(row["holds"] is not None for row in rows.values()) >= 12
    for claim in ("las-continuous-single", "las-continuous-multiple", "ftf-continuous-multiple",
                  "fifo-continuous-single", "agnostic-las-types-alike"):  # fmt: skip
        assert rows[claim]["holds"] or rows[claim]["why"].startswith("not judged in --quick"), rows[claim]
    assert all(row["why"] for row in rows.values() if row["holds"] is not True)


@pytest.mark.parametrize("workers", ["0", "-1", "two"])
def test_workers_must_be_a_positive_number(workers: str, capsys) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["reproduce", "gavel", "--quick", "--workers", workers])
    assert caught.value.code == 2
    assert "--workers" in capsys.readouterr().err


def test_help_documents_the_exit_status(capsys) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["reproduce", "--help"])
    assert caught.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "0 every gated claim holds; 1 a gated claim does not hold; 2 bad input" in text


def test_markdown_writes_and_then_replaces_the_sets_section(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(claims, "CLAIMS_DIR", claim_set(tmp_path, "[1.0, 100.0]"))
    page = tmp_path / "reproduction.md"
    page.write_text("# Reproduction\n\nWritten by the tools.\n")
    args = ["reproduce", "tiny", "--quick", "--out", str(tmp_path / "out"), "--workers", "1"]
    assert main([*args, "--markdown", str(page)]) == 0
    first = page.read_text()
    assert first.startswith("# Reproduction\n\nWritten by the tools.\n")
    assert "<!-- reproduce tiny -->\n## tiny (--quick)" in first and "1 of 1 gated claims hold" in first
    assert "| aware-beats-agnostic |" in first and "| yes |" in first
    assert main([*args, "--markdown", str(page)]) == 0  # a rerun replaces its own section
    assert page.read_text().count("<!-- reproduce tiny -->") == 1


def test_value_computed_and_unmeasured_claims(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "small.yaml").write_text(SMALL)
    run = tmp_path / "real"
    run.mkdir()
    lost = {"gpu/started": 7.2, "cpu/started": 3.6, "gpu/renewed": 0.1}
    (run / "summary.json").write_text(json.dumps({"run": {"round_overhead_s": lost}}))
    (tmp_path / "claims").mkdir()
    (tmp_path / "claims" / "mixed.yaml").write_text(f"""\
paper: test
claims:
  - id: one-run
    claim: types used alike
    source: test
    paper: "1"
    measure: value
    scenario: {tmp_path / "small.yaml"}
    metric: utilisation_spread
    treatment: [policy.params.aware=false]
    show: [utilisation_v100, utilisation_k80]
    accept: [1.0, 100.0]
    why: test
    quick: {{seeds: [0]}}
  - id: recorded
    claim: started lease overhead
    source: test
    paper: "< 3%"
    measure: computed
    metric: lease_overhead_share
    args: {{runs: ["{run}"], lease: started, round_s: 360}}
    accept: [0.0, 0.03]
    why: test
  - id: no-data
    claim: not measurable here
    source: test
    paper: 1.5
    measure: unmeasured
    why: no such run recorded
""")
    monkeypatch.setattr(claims, "CLAIMS_DIR", tmp_path / "claims")
    out = tmp_path / "out"
    assert main(["reproduce", "mixed", "--quick", "--out", str(out), "--workers", "1"]) == 0
    rows = {r["id"]: r for r in json.loads((out / "claims.json").read_text())["claims"]}
    assert len(list((out / "runs").glob("*.json"))) == 1  # a value claim runs its treatment only
    assert rows["one-run"]["ours"] >= 1.0 and "utilisation_v100=" in rows["one-run"]["claim"]
    assert rows["recorded"]["ours"] == pytest.approx(7.2 / 360) and rows["recorded"]["holds"]
    assert rows["no-data"]["holds"] is None and rows["no-data"]["gated"] is False


def test_an_unmeasured_claim_cannot_have_a_band(tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "claims").mkdir()
    (tmp_path / "claims" / "bad.yaml").write_text("""\
paper: test
claims:
  - {id: x, claim: c, source: s, paper: 1.0, measure: unmeasured, accept: [1.0, 2.0], why: w}
""")
    monkeypatch.setattr(claims, "CLAIMS_DIR", tmp_path / "claims")
    assert main(["reproduce", "bad", "--quick", "--out", str(tmp_path / "out")]) == 2
    assert "unmeasured" in capsys.readouterr().err


def test_only_the_quick_variant_may_skip_a_claim(tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "small.yaml").write_text(SMALL)
    (tmp_path / "claims").mkdir()
    (tmp_path / "claims" / "bad.yaml").write_text(f"""\
paper: test
claims:
  - {{id: x, claim: c, source: s, paper: 1.0, scenario: {tmp_path / "small.yaml"}, metric: avg_jct_s,
     accept: [1.0, 2.0], why: w, full: {{skip: too slow}}}}
""")
    monkeypatch.setattr(claims, "CLAIMS_DIR", tmp_path / "claims")
    assert main(["reproduce", "bad", "--out", str(tmp_path / "out")]) == 2
    assert "full.skip" in capsys.readouterr().err


WINDOWED = """\
name: windowed
kind: gavel
cluster:
  gpus: {v100: 2, k80: 2}
  gpus_per_server: 2
workload:
  generate: {num_jobs: auto, jobs_per_hour: 1.0, durations_h: [1.0]}
  window: [10, 20]
policy:
  name: las
  params: {aware: false}
"""


def test_bounded_run_gives_setups_run_or_finds_the_saturation_setup_refuses(tmp_path: Path) -> None:
    """Out of saturation the reproduction's run is the simulator's own; past it, where the simulator
    refuses the run after draining every trace it tried, the reproduction calls it saturated."""
    from clustertwin.scenarios.load import load_scenario
    from clustertwin.sim.gavel.setup import run

    from clustertwin.errors import InputError
    from clustertwin.reproduce import bounded_run

    path = tmp_path / "windowed.yaml"
    path.write_text(WINDOWED)
    steady = load_scenario(path)
    ours, theirs = bounded_run(steady), run(steady)
    assert ours is not None
    assert ours.tables["jobs"].equals(theirs.tables["jobs"])
    overloaded = load_scenario(path, ["workload.generate.jobs_per_hour=6"])
    assert bounded_run(overloaded) is None
    with pytest.raises(InputError, match="grows without bound"):
        run(overloaded)


def test_a_saturated_baseline_is_an_infinite_ratio_and_a_saturated_treatment_never_holds() -> None:
    from clustertwin.reproduce import metric_of, ratio_of

    saturated, steady = {"saturated": 1.0}, {"avg_jct_s": 10.0}
    assert metric_of(saturated, "avg_jct_s") == float("inf")
    assert ratio_of(saturated, steady, "avg_jct_s") == float("inf")
    assert ratio_of({"avg_jct_s": 30.0}, steady, "avg_jct_s") == 3.0
    ratio = ratio_of(steady, saturated, "avg_jct_s")
    assert not 0.0 <= ratio <= float("inf")  # NaN: in no band


def test_code_fingerprint_follows_sources_and_data_not_claim_texts(tmp_path: Path, monkeypatch) -> None:
    from clustertwin import code_fingerprint as fingerprint

    (tmp_path / "scenarios" / "claims").mkdir(parents=True)
    (tmp_path / "sim" / "__pycache__").mkdir(parents=True)
    (tmp_path / "scenarios" / "claims" / "set.yaml").write_text("why: one\n")
    (tmp_path / "scenarios" / "point.yaml").write_text("rate: 1\n")
    (tmp_path / "sim" / "engine.py").write_text("STEP = 1\n")
    monkeypatch.setattr(fingerprint, "_package_roots", lambda: [tmp_path / "scenarios", tmp_path / "sim"])
    digest = fingerprint.code_fingerprint.__wrapped__
    first = digest()
    (tmp_path / "scenarios" / "claims" / "set.yaml").write_text("why: another\n")
    (tmp_path / "sim" / "__pycache__" / "engine.cpython-311.pyc").write_bytes(b"\0")
    assert digest() == first
    (tmp_path / "scenarios" / "point.yaml").write_text("rate: 2\n")
    assert digest() != first
    changed = digest()
    (tmp_path / "sim" / "engine.py").write_text("STEP = 2\n")
    assert digest() != changed
