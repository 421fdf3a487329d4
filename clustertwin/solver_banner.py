"""HiGHS prints a licence banner on stdout when a process makes its first solver object. Making that
first object with stdout pointed at /dev/null keeps the CLI's output (``key=value`` lines, tables) clean."""

from __future__ import annotations

import os
import sys


def silence_solver_banner() -> None:
    import highspy

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as sink:
            os.dup2(sink.fileno(), 1)
            highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
