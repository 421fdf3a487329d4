"""The replay of the third GPU run's PSLD samples (``experiments.psld_replay``): while the replayed map
is the run's, it is the run, which is what makes it a tool for reading the run's decisions."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments.psld_replay import DEFAULT_DIR, config_with, main, replay


def test_the_replay_reproduces_the_runs_reports_and_its_lock() -> None:
    recorded = pd.read_parquet(DEFAULT_DIR / "real_psld_reports.parquet")
    result = replay()
    assert result.diverged_at_k is None and result.substituted == 0
    assert [(r.k, r.action) for r in result.reports if r.action != "none"] == [(2, "reassign")]
    ps0 = recorded[recorded.server == 0].pred_ref_s.tolist()
    assert [r.pred_ref_s[0] for r in result.reports] == pytest.approx(ps0, rel=1e-9)
    # The lock (docs/psld.md, "Third GPU run"): PS 0 keeps one 2 KB block and never gets back in.
    assert all(0 not in r.superior for r in result.reports if r.k >= 10)
    assert result.reports[-1].loads[0] == 2048
    assert {r.sizes_seen[0] for r in result.reports if r.k >= 10} == {1}


def test_a_changed_config_diverges_and_substitutes_samples(capsys) -> None:
    config = config_with(DEFAULT_DIR, ["min_gain=0"])
    assert config.min_gain == 0.0
    result = replay(config=config)
    assert result.diverged_at_k is not None and 0 < result.substituted < result.total
    assert sum(r.action != "none" for r in result.reports) > 1
    with pytest.raises(SystemExit, match="FIELD=VALUE"):
        config_with(DEFAULT_DIR, ["no_such_field=1"])
    assert main(["--set", "min_gain=0"]) == 0
    assert '"diverged_at_k"' in capsys.readouterr().out
