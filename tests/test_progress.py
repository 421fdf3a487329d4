"""Progress off a terminal: work made of finished units prints one plain line per unit with its count."""

from __future__ import annotations

import io

from rich.console import Console

from clustertwin.progress import progress_bar


def test_off_a_terminal_each_finished_unit_prints_a_counted_line() -> None:
    plain = io.StringIO()
    with progress_bar("reproduce toy", console=Console(file=plain), lines=True) as progress:
        for done in range(4):
            progress(done / 3, f"{done}/3 runs")
    assert plain.getvalue().splitlines() == [f"reproduce toy: {done}/3 runs" for done in range(4)]


def test_lines_stay_off_with_quiet_and_a_terminal_draws_the_bar() -> None:
    quiet = io.StringIO()
    with progress_bar("reproduce toy", quiet=True, console=Console(file=quiet), lines=True) as progress:
        progress(1.0, "1/1 runs")
    assert quiet.getvalue() == ""
    terminal = io.StringIO()
    with progress_bar(
        "reproduce toy", console=Console(file=terminal, force_terminal=True), lines=True
    ) as progress:
        progress(0.5, "1/2 runs")
    assert "reproduce toy" in terminal.getvalue() and "reproduce toy: 1/2 runs\n" not in terminal.getvalue()


def test_a_reproduction_piped_to_a_file_shows_each_run(tmp_path, monkeypatch, capsys) -> None:
    """Through the command line with stdout captured (not a terminal): one line per finished run."""
    from clustertwin.scenarios import claims

    from clustertwin.cli import main

    (tmp_path / "small.yaml").write_text(
        "name: small\nkind: gavel\ncluster:\n  gpus: {v100: 4, k80: 4}\n"
        "workload:\n  generate: {num_jobs: 6, jobs_per_hour: 8.0}\npolicy:\n  name: las\n"
    )
    (tmp_path / "claims").mkdir()
    (tmp_path / "claims" / "tiny.yaml").write_text(
        f"paper: test\nclaims:\n  - id: aware\n    claim: aware LAS\n    source: §1\n    paper: 2.0\n"
        f"    scenario: {tmp_path / 'small.yaml'}\n    metric: avg_jct_s\n"
        f"    baseline: [policy.params.aware=false]\n    accept: [0.0, 100.0]\n    why: a test\n"
        f"    quick: {{seeds: [0]}}\n"
    )
    monkeypatch.setattr(claims, "CLAIMS_DIR", tmp_path / "claims")
    main(["reproduce", "tiny", "--quick", "--out", str(tmp_path / "out"), "--workers", "1"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("reproduce tiny: ")]
    assert lines[0] == "reproduce tiny: 0/2 runs"
    counts = [line.split(";")[0] for line in lines[1:]]
    assert counts == ["reproduce tiny: 1/2 runs", "reproduce tiny: 2/2 runs"]
    # each finished run is named: the scenario and its overrides
    assert sorted(line.split("; done: ")[1] for line in lines[1:]) == [
        "small policy.params.aware=false seed=0",
        "small seed=0",
    ]
