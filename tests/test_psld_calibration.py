"""A PSLD simulation calibrated by a profiling run's file (``calibration:``, ``scenarios.psld_calibration``,
``clustertwin profile``): the file's values reach the simulator, a file of another set-up or a broken one
is refused by name, and the profile's whole path (a real profiling run, its file, the calibrated
simulation and ``compare``) is slow-marked."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from clustertwin.analysis.psld_metrics import window_rate
from clustertwin.runtime.psld.calibrate import Calibration
from clustertwin.scenarios.load import load_scenario
from clustertwin.scenarios.psld_calibration import calibrated, calibration_yaml, load_calibration
from hypothesis import given, settings
from hypothesis import strategies as st

from clustertwin.cli import main
from clustertwin.errors import InputError
from clustertwin.kinds.psld import simulate_psld

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "psld-real-cpu.yaml"
REAL = ["real.model=resnet_small", "duration_s=2.5", "warmup_s=0.5"]


def _calibration(compute_s: float = 0.2) -> Calibration:
    return Calibration(
        compute_s=compute_s,
        barrier_s=0.01,
        report_barrier_s=0.02,
        link_gbps=0.1,
        link_gbps_per_ps=(0.1, 0.1),
        link_gbps_per_ps_bound=(False, True),
        latency_s=0.004,
        sum_gbytes_per_s=0.2,
        update_gbytes_per_s=None,
        algo_s_per_block_server=2e-5,
        timing_noise=1.0,
    )


def _write(tmp_path: Path, cal: Calibration, overrides: list[str] = REAL, name: str = "cal.yaml") -> Path:
    path = tmp_path / name
    scenario = load_scenario(SCENARIO, overrides)
    path.write_text(calibration_yaml(scenario, cal.values(), {}, {}))
    return path


def _rate(result) -> float:
    return float(window_rate(result.tables["iterations"], float(result.info["warmup_s"]), math.inf))


def test_the_file_prices_the_real_network_as_measured(tmp_path: Path) -> None:
    rates = {}
    for compute in (0.1, 0.4):
        path = _write(tmp_path, _calibration(compute), name=f"cal-{compute}.yaml")
        scenario = load_scenario(SCENARIO, [*REAL, "policy=mxnet", f"calibration={path}"])
        result = simulate_psld(scenario)
        assert result.info["worker_compute_s"] == pytest.approx(compute + 0.01)
        assert result.info["calibration"] == str(path)
        rates[compute] = _rate(result)
        # an iteration is at least the measured compute, and the blocks are the network's tensors
        assert 1.0 / rates[compute] >= compute + 0.01
        assert result.info["blocks"] == 29
    uncalibrated = _rate(simulate_psld(load_scenario(SCENARIO, [*REAL, "policy=mxnet"])))
    assert rates[0.4] < rates[0.1] < uncalibrated  # the catalog's GPU compute is far below a CPU's


def test_a_relative_path_is_read_beside_the_scenario(tmp_path: Path) -> None:
    _write(tmp_path, _calibration())
    text = SCENARIO.read_text() + "real: {model: resnet_small}\ncalibration: cal.yaml\n"
    (tmp_path / "s.yaml").write_text(text)
    scenario = load_scenario(tmp_path / "s.yaml")
    assert Path(scenario.calibration) == tmp_path / "cal.yaml"
    assert calibrated(scenario).cluster.server_gbps == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["cluster.workers=2"], "workers 4 (the scenario: 2)"),
        (["real.model=mlr"], "real_model 'resnet_small' (the scenario: 'mlr')"),
        (["batch_size=8"], "batch_size 32 (the scenario: 8)"),
        (["mode=vanilla"], "mode 'byteps'"),
    ],
)
def test_a_file_of_another_set_up_is_refused_by_name(
    tmp_path: Path, overrides: list[str], named: str, capsys
) -> None:
    path = _write(tmp_path, _calibration())
    scenario = load_scenario(SCENARIO, [*REAL, *overrides, f"calibration={path}"])
    with pytest.raises(InputError, match="field calibration") as err:
        calibrated(scenario)
    assert named in err.value.message
    out = tmp_path / "run"
    argv = ["run", str(SCENARIO), *sum((["--set", o] for o in [*REAL, *overrides]), [])]
    assert main([*argv, "--set", f"calibration={path}", "--out", str(out), "--quiet"]) == 2
    assert "field calibration" in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda d: d["overrides"].update({"cluster.nic_gbps": 1.0}), "overrides.cluster.nic_gbps"),
        (lambda d: d["overrides"].update({"costs.worker_compute_s": -1.0}), "worker_compute_s"),
        (lambda d: d.update(kind="gavel"), "field kind"),
        (lambda d: d.pop("measured_for"), "measured_for"),
    ],
)
def test_a_broken_file_is_refused_by_name(tmp_path: Path, edit, field: str) -> None:
    import yaml

    path = _write(tmp_path, _calibration())
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data))
    scenario = load_scenario(SCENARIO, [*REAL, f"calibration={path}"])
    with pytest.raises(InputError) as err:
        calibrated(scenario)
    assert field in f"{err.value.where} {err.value.message}"
    with pytest.raises(InputError, match="cannot read"):
        load_calibration(tmp_path / "missing.yaml")


@settings(max_examples=25, deadline=None)
@given(
    compute=st.floats(1e-4, 10.0),
    link=st.floats(1e-3, 1e3),
    update=st.none() | st.floats(1e-3, 10.0),
)
def test_the_overrides_and_the_file_say_the_same(compute: float, link: float, update: float | None) -> None:
    cal = Calibration(
        compute, 0.0, 0.0, link, (link,), (False,), 1e-3, 1.0, update, 1e-5, 0.3
    )  # fmt: skip
    values = cal.values()
    parsed = {k: float(v) for k, _, v in (o.partition("=") for o in cal.overrides())}
    assert parsed.keys() == values.keys()
    assert all(parsed[k] == pytest.approx(values[k], rel=1e-6) for k in values)
    assert ("costs.update_gbytes_per_core_s" in values) == (update is not None)


@pytest.mark.slow
def test_profile_then_calibrated_simulation_then_compare(tmp_path: Path, capsys) -> None:
    """``clustertwin profile`` runs a real profiling run of a small set-up (MLR on 2 workers and 2 PSs)
    and writes the file; the calibrated simulation runs and ``compare`` prints both errors."""
    small = ["real.model=mlr", "block_mb=0.0005", "cluster={workers: 2, servers: 2}", "stragglers=[]"]
    sets = sum((["--set", o] for o in small), [])
    cal = tmp_path / "cal.yaml"
    assert main(["profile", str(SCENARIO), *sets, "--seconds", "3", "--out", str(cal)]) == 0
    assert f"--set calibration={cal}" in capsys.readouterr().out
    found = load_calibration(cal)
    assert found.measured_for["real_model"] == "mlr" and found.measured_for["workers"] == 2
    assert found.overrides["costs.worker_compute_s"] > 0 and found.profile["iterations"] >= 2
    real, sim = tmp_path / "real", tmp_path / "sim"
    common = [*sets, "--set", "duration_s=3.0", "--set", "warmup_s=0.5", "--quiet", "--no-plots"]
    assert main(["run", str(SCENARIO), "--backend", "real", "--out", str(real), *common]) == 0
    assert main(["run", str(SCENARIO), "--set", f"calibration={cal}", "--out", str(sim), *common]) == 0
    capsys.readouterr()
    assert main(["compare", str(sim), str(real)]) == 0
    out = capsys.readouterr().out
    assert "iterations_per_s_error=" in out and "reassignments_error=" in out
    figures = json.loads(next(real.glob("compare-vs-*/compare.json")).read_text())
    assert figures["iterations_per_s_sim"] > 0 and figures["iterations_per_s_real"] > 0


@pytest.mark.parametrize(
    ("argv", "named"),
    [(["--host"], "--host"), (["--steps", "3"], "--steps 3"), (["--repeats", "2"], "--repeats")],
)
def test_profile_options_a_psld_run_cannot_honour_are_refused(
    argv: list[str], named: str, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "cal.yaml"
    assert main(["profile", str(SCENARIO), "--set", "real.model=mlr", *argv, "--out", str(out)]) == 2
    assert named in capsys.readouterr().err and not out.exists()
