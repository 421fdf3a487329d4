"""Writing files and folders atomically: a half-written result never carries its final name, so a crash or
a kill leaves either the previous version or the new one (or nothing, where there was nothing before).

Everything is written under a hidden sibling name (``.NAME.writing-PID-NS``) on the same file system and
renamed into place at the end. This module sits below every layer: executors, trace writers, analysis and
the command line all write through it.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


def _staging_name(path: Path) -> Path:
    # Not tempfile: its files and folders are private (0600/0700) and would stay so after the rename.
    return path.with_name(f".{path.name}.writing-{os.getpid()}-{time.time_ns()}")


def write_atomically(path: Path, write: Callable[[Path], object]) -> Path:
    """``write(temporary)`` beside ``path``, then rename it into place; returns ``path``."""
    temporary = _staging_name(path)
    try:
        write(temporary)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


def write_text(path: Path, text: str) -> Path:
    """UTF-8, line endings as given (a file reads the same on every platform)."""
    return write_atomically(path, lambda p: p.write_text(text, encoding="utf-8", newline=""))


def write_bytes(path: Path, data: bytes) -> Path:
    return write_atomically(path, lambda p: p.write_bytes(data))


def write_json(path: Path, data: object, default: Callable[[Any], Any] | None = None) -> Path:
    """Indented for people to read; NaN is written as ``NaN``."""
    return write_text(path, json.dumps(data, indent=2, allow_nan=True, default=default))


def write_parquet(path: Path, table: pd.DataFrame) -> Path:
    """The table without its index."""
    return write_atomically(path, lambda p: table.to_parquet(p, index=False))


def write_folder(
    path: Path, fill: Callable[[Path], object], keep: Callable[[Path], bool] | None = None
) -> Path:
    """``fill(staging)`` in a hidden sibling folder, then put it in place of ``path``; returns ``path``.

    An earlier folder at ``path`` is replaced; the entries of it for which ``keep(entry)`` is true (files a
    user added, say) move into the new folder unless it has an entry of that name. What a killed write of
    ``path`` left beside it is cleared first: a staging folder whose process is gone is removed, and an old
    folder set aside is restored (the new one never arrived) or gives up its kept entries.
    """
    _recover(path, keep)
    staging = _staging_name(path)
    staging.mkdir()
    try:
        fill(staging)
        _move_into_place(staging, path, keep)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return path


def _move_into_place(staging: Path, path: Path, keep: Callable[[Path], bool] | None) -> None:
    if not path.exists():
        staging.rename(path)
        return
    # A folder cannot be renamed over another: two renames, and the old folder stays whole under a
    # hidden name until the new one is in place.
    aside = path.with_name(f".{path.name}.old-{time.time_ns()}")
    path.rename(aside)
    try:
        staging.rename(path)
    except BaseException:
        aside.rename(path)
        raise
    _carry_over(aside, path, keep)


def _carry_over(aside: Path, path: Path, keep: Callable[[Path], bool] | None) -> None:
    if keep is not None:
        for entry in aside.iterdir():
            if keep(entry) and not (path / entry.name).exists():
                entry.rename(path / entry.name)
    shutil.rmtree(aside, ignore_errors=True)


def _recover(path: Path, keep: Callable[[Path], bool] | None) -> None:
    for staging in path.parent.glob(f".{path.name}.writing-*"):
        pid = staging.name.rsplit(".writing-", 1)[1].split("-", 1)[0]
        if not (pid.isdigit() and _alive(int(pid))):
            shutil.rmtree(staging, ignore_errors=True)
    for aside in sorted(path.parent.glob(f".{path.name}.old-*")):
        if path.exists():
            _carry_over(aside, path, keep)
        else:
            aside.rename(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
