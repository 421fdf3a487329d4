"""``clustertwin report DIR``: a self-contained HTML page for a run, sweep or comparison folder, checked
by parsing it here and by loading it in headless Chromium when that is installed."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from clustertwin.analysis.compare import compare_runs, write_comparison
from clustertwin.analysis.report import write_report
from test_compare import real_result
from test_compare import write as write_compared
from test_output import small_result
from test_output import write as write_small_run

from clustertwin.cli import main
from clustertwin.errors import InputError

IMG = re.compile(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


def sweep_folder(folder: Path) -> Path:
    """A sweep folder as `clustertwin sweep` leaves it: 2 policies x 3 loads x 2 seeds, one run failed."""
    folder.mkdir()
    rows = []
    for policy, base in (("aware", 10.0), ("agnostic", 20.0)):
        for load in (1.0, 2.0, 4.0):
            for seed in (0, 1):
                jct = base * load + (1.0 if seed else -1.0)  # mean base*load, sd sqrt(2)
                rows.append({"run": f"{policy}{load}{seed}", "policy": policy, "load": load, "seed": seed,
                             "status": "ok", "error": None, "wall_s": 0.5, "node": "here", "avg_jct_h": jct,
                             "utilisation": 0.5})  # fmt: skip
    rows[-1].update(status="failed", error="WorkerCrashedError: <the worker died>", avg_jct_h=np.nan)
    pd.DataFrame(rows).to_parquet(folder / "results.parquet", index=False)
    meta = {
        "name": "demo",
        "columns": ["policy", "load", "seed"],
        "runs": 13,
        "spec": {"description": "a demo sweep", "report": {"x": "load", "series": ["policy"]}},
    }
    (folder / "sweep.json").write_text(json.dumps(meta))
    return folder


def images(page: str) -> list[bytes]:
    return [base64.b64decode(data) for data in IMG.findall(page)]


def assert_self_contained(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"(src|href)=\"(?!data:)", page), "a resource outside the page"
    assert "http://" not in page and "https://" not in page


def test_sweep_report_plots_means_with_seed_spread(tmp_path: Path) -> None:
    folder = sweep_folder(tmp_path / "sweep")
    path = write_report(folder)
    assert path == folder / "report.html"
    page = path.read_text()
    assert_self_contained(page)
    pngs = images(page)
    assert len(pngs) == 1 and pngs[0].startswith(b"\x89PNG\r\n\x1a\n")
    assert (folder / "sweep_avg_jct_h.png").read_bytes() == pngs[0]
    # The means table: aware at load 2 is 20 ± 1.414 over 2 seeds; agnostic at load 4 has 1 ok run.
    assert re.search(
        r"<td class=\"text\">aware</td><td class=\"text\">2.0</td><td>2</td><td>20 ± 1.414</td>", page
    )
    assert re.search(
        r"<td class=\"text\">agnostic</td><td class=\"text\">4.0</td><td>1</td><td>79</td>", page
    )
    assert "Failed runs (1)" in page and "WorkerCrashedError: &lt;the worker died&gt;" in page
    assert 'runs not finished</td><td class="text">1<' in page  # 13 planned, 12 in the table


def test_run_and_comparison_reports(tmp_path: Path) -> None:
    run = write_small_run(tmp_path / "run", plots=True)
    page = write_report(run).read_text()
    assert_self_contained(page)
    assert len(images(page)) == len(list(run.glob("*.png"))) == 3
    assert "avg_jct_h" in page and "Run small (seed 3)" in page

    sim = write_compared(tmp_path / "sim", small_result(), "sim")
    real = write_compared(tmp_path / "real", real_result(), "real")
    out = tmp_path / "cmp"
    write_comparison(compare_runs(sim, real), out)
    page = write_report(out).read_text()
    assert_self_contained(page)
    assert len(images(page)) == 1 and "avg_jct_error" in page and "Simulation vs reality" in page


def test_report_refuses_other_folders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(InputError, match="not a result folder"):
        write_report(tmp_path)
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_report_loads_in_headless_chromium(tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("headless check needs the Debian package chromium (apt-get install -y chromium)")
    folder = sweep_folder(tmp_path / "sweep")
    run = write_small_run(tmp_path / "run", plots=True)
    for target, expected in ((folder, 1), (run, 3)):
        assert main(["report", str(target)]) == 0
        dom = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--dump-dom", (target / "report.html").as_uri()],
            capture_output=True, text=True, timeout=120,
        ).stdout  # fmt: skip
        # Written by the page's own script after load: images that decoded / images on the page.
        assert f'data-images-loaded="{expected}/{expected}"' in dom, dom[:500]
        assert dom.count("<img ") == expected
