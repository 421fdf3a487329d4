"""Do identical PSs read alike? The real runtime's scheduler samples per PS and by a block's position.

    python -m experiments.psld_sample_position [--scenario FILE] [--set FIELD=VALUE ...]

Runs ``FILE`` (default ``scenarios/psld-real-cpu.yaml`` with three PSs, vanilla mode, 20 s) for real
on PSLD's initial round-robin layout with no straggler and the scheduler never acting (the profiling
run, ``runtime.psld.calibrate.PROFILE``), and prints per PS: the mean of the scheduler's samples
(``ps.shaped``) with its standard error over (worker, iteration) means, its bytes per worker and
iteration, and the median sample and raw push-to-pull time by the block's rank among that PS's blocks
of the iteration (0: its first). Identical PSs should read alike at equal block sizes whatever their
blocks' ranks (docs/algorithms/psld.md, "Block timing" and "Known gaps"). The first iteration is
dropped: it pays the process group's first touches.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np
import pandas as pd
from clustertwin.runtime.psld.calibrate import PROFILE
from clustertwin.runtime.psld.run import run_real
from clustertwin.scenarios.load import load_scenario

DEFAULTS = ("cluster.servers=3", "mode=vanilla", "duration_s=20")
RANKS = [-1, 0, 1, 3, 7, 15, 1 << 20]  # bins of a block's rank among its PS's blocks


def samples_by_rank(scenario: str, overrides: Sequence[str]) -> pd.DataFrame:
    """Every block sample of one real profiling run: worker, PS, bytes, the scheduler's seconds, the raw
    seconds from push issue, iteration and the block's rank among its PS's blocks of the iteration."""
    result = run_real(load_scenario(scenario, [*DEFAULTS, *overrides, *PROFILE]))
    rows = [
        (s.worker, s.server, s.nbytes, s.seconds, r.seconds)
        for s, r in zip(result.samples, result.raw_samples, strict=True)  # type: ignore[attr-defined]
    ]
    frame = pd.DataFrame(rows, columns=["worker", "server", "nbytes", "seconds", "raw"])
    blocks = len(result.job.blocks)  # type: ignore[attr-defined]
    frame["iteration"] = frame.groupby("worker").cumcount() // blocks
    frame["rank"] = frame.groupby(["worker", "iteration", "server"]).cumcount()
    return frame[frame["iteration"] >= 1]


def per_server(frame: pd.DataFrame) -> pd.DataFrame:
    """Per PS: mean sample and its standard error (over (worker, iteration) means), in ms, and MB per
    worker and iteration."""
    means = frame.groupby(["server", "worker", "iteration"])["seconds"].mean().groupby("server")
    cells = frame.groupby(["worker", "iteration"]).ngroups
    return pd.DataFrame(
        {
            "mean_ms": means.mean() * 1e3,
            "sem_ms": means.std() / np.sqrt(means.size()) * 1e3,
            "mb": frame.groupby("server")["nbytes"].sum() / cells / 1e6,
        }
    )


def by_rank(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """Median of ``column`` in ms by PS (columns) and the block's rank bin (rows)."""
    bins = pd.cut(frame["rank"], RANKS)
    return frame.groupby([bins, "server"], observed=True)[column].median().unstack() * 1e3


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="scenarios/psld-real-cpu.yaml")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    args = parser.parse_args(argv)
    frame = samples_by_rank(args.scenario, args.set)
    print(f"{frame['iteration'].nunique()} iterations")
    print(per_server(frame).round(2).to_string())
    print("scheduler sample (ms) by rank among the PS's blocks")
    print(by_rank(frame, "seconds").round(2).to_string())
    print("raw push-to-pull (ms) by rank")
    print(by_rank(frame, "raw").round(2).to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
