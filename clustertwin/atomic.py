"""Writing one result file atomically: a half-written file never carries its final name, so a crash or a
kill leaves either the previous file or the new one (the run folder as a whole: ``analysis/output.py``)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_atomically(path: Path, write: Callable[[Path], object]) -> Path:
    """``write(temporary)`` beside ``path``, then rename it into place; returns ``path``."""
    # Not tempfile: its files are private (0600) and would stay so after the rename.
    temporary = path.with_name(f".{path.name}.writing-{os.getpid()}-{time.time_ns()}")
    try:
        write(temporary)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


def write_text(path: Path, text: str) -> Path:
    return write_atomically(path, lambda p: p.write_text(text, encoding="utf-8"))


def write_json(path: Path, data: object, default: Callable[[Any], Any] | None = None) -> Path:
    return write_text(path, json.dumps(data, indent=2, allow_nan=True, default=default))
