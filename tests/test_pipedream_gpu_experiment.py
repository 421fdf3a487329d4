"""``experiments/pipedream_gpu.py run --device cpu`` (the GPU benchmark's code path at a tiny size with
gloo) produces every row, real and simulated, with finite columns, ``report`` renders them, and
``resimulate`` rebuilds the same simulated columns from the saved files."""

from __future__ import annotations

import csv
import json
import math

import pytest

pytest.importorskip("torch")

from experiments.pipedream_gpu import main  # noqa: E402


@pytest.mark.slow
def test_cpu_run_produces_every_row(tmp_path, capsys):
    assert main(["run", "--out", str(tmp_path), "--device", "cpu", "--gpus", "2"]) == 0
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["baseline.csv", "graph.txt", "ops.csv", "profile.json", "results.csv", "results.json"]
    with (tmp_path / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["schedule"] for r in rows] == ["gpipe", "flush", "2bw", "1f1b", "interleaved"]
    numeric = ["real_samples_per_s", "sim_samples_per_s", "throughput_error", "real_peak_gib", "sim_peak_gib"]
    assert all(math.isfinite(float(r[c])) and float(r[c]) != 0 for r in rows for c in numeric)
    with (tmp_path / "baseline.csv").open() as f:
        base = list(csv.DictReader(f))
    assert [b["schedule"] for b in base] == ["gpipe", "flush", "interleaved"]
    assert all(math.isfinite(float(v)) for b in base for k, v in b.items() if k != "schedule")
    results = json.loads((tmp_path / "results.json").read_text())
    ranking = results["configurations"][0]["ranking"]
    assert sorted(ranking["throughput_real"]) == sorted(ranking["throughput_sim"])
    profile = json.loads((tmp_path / "profile.json").read_text())["profile"]
    assert len(profile["layers"]) == 10 and all(lay["held_bytes"] > 0 for lay in profile["layers"])
    capsys.readouterr()
    assert main(["report", "--from", str(tmp_path)]) == 0
    assert "| 2 | 1f1b |" in capsys.readouterr().out
    # resimulate: the same simulated columns from the saved profile, the measured ones untouched
    again = tmp_path / "again"
    assert main(["resimulate", "--from", str(tmp_path), "--out", str(again)]) == 0
    redone = json.loads((again / "results.json").read_text())
    before, after = results["configurations"][0]["rows"], redone["configurations"][0]["rows"]
    for old, new in zip(before, after, strict=True):
        assert new["real_peak_gib_per_rank"] == old["real_peak_gib_per_rank"]
        assert new["sim_peak_gib_per_rank"] == pytest.approx(old["sim_peak_gib_per_rank"])
        assert new["sim_samples_per_s"] == pytest.approx(old["sim_samples_per_s"])
    assert (again / "report.md").read_text().startswith("GPT:")
