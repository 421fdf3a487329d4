"""``bench gavel --scale`` on small clusters: every figure is emitted and the streamed table is complete."""

from __future__ import annotations

import pytest

from clustertwin import bench_gavel


@pytest.mark.slow
def test_scale_bench_emits_each_size_and_the_slope(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_gavel, "SCALE_GPUS", (16, 32, 64))
    figures: dict[str, object] = {}
    bench_gavel.bench_gavel_scale(figures.__setitem__)
    for size in ("16", "32", "64"):
        assert float(figures[f"scale_{size}_s"]) > 0
        assert int(figures[f"scale_{size}_jobs"]) == 10 * int(size)
        assert float(figures[f"scale_{size}_peak_rss_gb"]) > 0
        # Each job runs at least one round, so the streamed table has at least a row per job.
        assert int(figures[f"scale_{size}_rounds_table_rows"]) >= 10 * int(size)
        assert int(figures[f"scale_{size}_max_active_jobs"]) >= 1
    assert "scale_slope_us_per_job_round" in figures
