"""``experiments/flexrr_gpu.py --model/--data/--hidden``: the GPU case trains the network it is given,
in the sizing step, the profiling run and the real runs alike. No processes (the tiny end-to-end run is
``tests/test_flexrr_gpu_experiment.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from clustertwin.runtime.flexrr import model as flexrr_model

from clustertwin.kinds.flexrr import _check_real
from experiments import flexrr_gpu as fg

CNN = {"model": "cnn", "data": "synthetic_images", "hidden": 4, "features": 64}


def test_the_options_reach_the_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    monkeypatch.setattr(fg, "run_experiment", lambda setup, out: seen.append(setup) or {})
    monkeypatch.setattr(fg, "markdown", lambda results: "")
    argv = ["run", "--out", str(tmp_path), "--device", "cpu", "--features", "64", "--hidden", "4"]
    assert fg.main([*argv, "--model", "cnn", "--data", "synthetic_images"]) == 0
    assert (seen[0].model, seen[0].data, seen[0].hidden) == ("cnn", "synthetic_images", 4)
    assert fg.main(argv) == 0
    assert (seen[1].model, seen[1].data) == ("mlr", "synthetic")  # the paper's MLR by default


def test_every_run_trains_the_given_network(monkeypatch: pytest.MonkeyPatch) -> None:
    setup = fg.Setup.for_device("cpu", quick=True, items=20, checks=4, pool=64, **CNN)
    profile = fg.profile_scenario(setup, batch=2)
    runs = [fg.mode_scenario(setup, 2, mode, None) for mode in fg.MODES]
    for scenario in (profile, *runs):
        assert (scenario.real.model, scenario.real.data, scenario.real.hidden) == (
            "cnn",
            "synthetic_images",
            4,
        )
    _check_real(profile)  # the network builds on its data set
    built = []
    real_trainer = flexrr_model.Trainer

    def trainer(problem, device="cpu"):
        built.append(problem.model)
        return real_trainer(problem, device)

    monkeypatch.setattr(flexrr_model, "Trainer", trainer)
    batch, _ = fg.size_batch(setup)
    assert batch >= 1 and set(built) == {"cnn"}
