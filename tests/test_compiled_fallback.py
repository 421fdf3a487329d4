"""Without numba the compiled loops run as plain Python and a simulation's event log is the same."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import sys
if sys.argv[1] == "without":
    sys.modules["numba"] = None  # import numba now fails, as on a machine without it
import hashlib
import pandas as pd
from clustertwin.policies import compiled
from clustertwin.scenarios.load import load_scenario
from clustertwin.sim.gavel.setup import run
assert (compiled.numba is None) == (sys.argv[1] == "without")
sets = ("workload.generate.jobs_per_hour=null", "workload.generate.num_jobs=24", "workload.window=null")
tables = run(load_scenario(None, sets)).tables
for name in ("events", "rounds", "jobs"):
    digest = hashlib.sha256(pd.util.hash_pandas_object(tables[name], index=True).values.tobytes())
    print("table", name, digest.hexdigest())
"""


def test_a_gavel_run_without_numba_writes_the_same_tables() -> None:
    logs = [
        subprocess.run(
            [sys.executable, "-c", SCRIPT, mode], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.splitlines()
        for mode in ("with", "without")
    ]
    hashes = [[line for line in log if line.startswith("table ")] for log in logs]
    assert len(hashes[0]) == 3
    assert hashes[0] == hashes[1]
