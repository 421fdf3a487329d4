"""The replay of a GPU run's PSLD samples (``experiments.psld_replay``): while the replayed map is the
run's, it is the run, which is what makes it a tool for reading the run's decisions. The run replayed is
run 3 of ``results/psld-gpu-fifth``, the first recorded with today's policy code; its fixture keeps the
PSLD run's samples only, which are all the replay reads."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from experiments.psld_replay import config_with, main, replay

RUN = Path(__file__).parent / "fixtures" / "psld-gpu-fifth-run3"


def test_the_replay_reproduces_the_runs_reports_and_decisions() -> None:
    recorded = pd.read_parquet(RUN / "real_psld_reports.parquet")
    moves = pd.read_parquet(RUN / "real_psld_reassignments.parquet")
    result = replay(RUN)
    assert result.diverged_at_k is None and result.substituted == 0
    assert [(r.k, r.action) for r in result.reports if r.action != "none"] == [
        (int(k), "reassign") for k in moves.iteration
    ]
    assert len(moves) == 12
    for server in (0, 1, 2):
        ours = [r.pred_ref_s[server] for r in result.reports]
        assert ours == pytest.approx(recorded[recorded.server == server].pred_ref_s.tolist(), rel=1e-9)
    # No decision of the run ever made the throttled PS 2 superior (since the superior set's fit was fixed).
    assert all(2 not in r.superior for r in result.reports)


def test_a_changed_config_diverges_and_substitutes_samples(capsys) -> None:
    config = config_with(RUN, ["min_gain=0"])
    assert config.min_gain == 0.0
    result = replay(RUN, config=config)
    assert result.diverged_at_k is not None and 0 < result.substituted < result.total
    assert sum(r.action != "none" for r in result.reports) > 1
    with pytest.raises(SystemExit, match="FIELD=VALUE"):
        config_with(RUN, ["no_such_field=1"])
    assert main(["--from", str(RUN), "--set", "min_gain=0"]) == 0
    assert '"diverged_at_k"' in capsys.readouterr().out


def test_the_significance_test_stops_the_runs_churn() -> None:
    # The run reassigned 12 times under the point test; on its own samples the significance test
    # (policies.psld.stability) applies the first, clear move off the throttled PS and then holds.
    result = replay(RUN, config=config_with(RUN, ["gain_test=significant"]))
    moves = [r for r in result.reports if r.action != "none"]
    recorded = pd.read_parquet(RUN / "real_psld_reassignments.parquet")
    assert len(recorded) == 12 and 1 <= len(moves) <= 2
    assert moves[0].k == recorded.iteration.iloc[0]  # the run's own first decision, on the same samples
    assert all(2 not in r.superior for r in result.reports)
