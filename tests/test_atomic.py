"""Atomic writes: a result carries its final name only once it is complete, even when the writer is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clustertwin.atomic import (
    write_atomically,
    write_bytes,
    write_folder,
    write_json,
    write_parquet,
    write_text,
)

ROOT = Path(__file__).resolve().parent.parent

# The child writes part of the new content, then dies mid-write as a SIGKILL (OOM, eviction) would leave it.
KILLED_WRITE = """
import os, signal, sys
from pathlib import Path
from clustertwin.atomic import write_atomically, write_folder

def die_halfway(path: Path) -> None:
    if sys.argv[1] == "folder":
        path = path / "summary.json"
    path.write_text("new, half")
    os.kill(os.getpid(), signal.SIGKILL)

write = write_folder if sys.argv[1] == "folder" else write_atomically
write(Path(sys.argv[2]), die_halfway)
"""

tmp_dirs = settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=50)


def visible(folder: Path) -> list[str]:
    """What a reader listing the folder sees: staging names are hidden."""
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


def run_killed_writer(kind: str, path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", KILLED_WRITE, kind, str(path)], env=env, timeout=60)
    assert result.returncode == -signal.SIGKILL


@tmp_dirs
@given(text=st.text())
def test_text_round_trips_exactly(tmp_path: Path, text: str) -> None:
    path = write_text(tmp_path / "out.txt", text)
    assert path.read_bytes() == text.encode("utf-8")  # no newline translation either way
    assert visible(tmp_path) == ["out.txt"] and len(list(tmp_path.iterdir())) == 1


@tmp_dirs
@given(data=st.binary())
def test_bytes_round_trip(tmp_path: Path, data: bytes) -> None:
    assert write_bytes(tmp_path / "out.bin", data).read_bytes() == data


@tmp_dirs
@given(
    data=st.dictionaries(
        st.text(),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
            lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
            max_leaves=10,
        ),
    )
)
def test_json_round_trips(tmp_path: Path, data: dict) -> None:
    assert json.loads(write_json(tmp_path / "out.json", data).read_text(encoding="utf-8")) == data


def test_parquet_round_trips_without_the_index(tmp_path: Path) -> None:
    table = pd.DataFrame({"job": [3, 1, 2], "jct_s": [1.5, float("nan"), 2.0]}, index=[10, 11, 12])
    back = pd.read_parquet(write_parquet(tmp_path / "jobs.parquet", table))
    pd.testing.assert_frame_equal(back, table.reset_index(drop=True))


def test_a_written_file_is_as_readable_as_any_other(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        path = write_text(tmp_path / "out.txt", "x")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


def test_a_failed_write_keeps_the_old_file_and_leaves_nothing_else(tmp_path: Path) -> None:
    path = write_text(tmp_path / "out.txt", "old")

    def fail_halfway(temporary: Path) -> None:
        temporary.write_text("new, half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        write_atomically(path, fail_halfway)
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


@pytest.mark.parametrize("old", ["old", None])
def test_a_killed_write_leaves_the_old_file_or_nothing(tmp_path: Path, old: str | None) -> None:
    path = tmp_path / "out.txt"
    if old is not None:
        write_text(path, old)
    run_killed_writer("file", path)
    assert visible(tmp_path) == ([] if old is None else ["out.txt"])
    if old is not None:
        assert path.read_text() == old


@pytest.mark.parametrize("old", ["old", None])
def test_a_killed_folder_write_leaves_the_old_folder_or_nothing(tmp_path: Path, old: str | None) -> None:
    folder = tmp_path / "run"
    if old is not None:
        write_folder(folder, lambda staging: (staging / "summary.json").write_text(old))
    run_killed_writer("folder", folder)
    assert visible(tmp_path) == ([] if old is None else ["run"])
    if old is not None:
        assert visible(folder) == ["summary.json"]
        assert (folder / "summary.json").read_text() == old


def test_a_folder_is_replaced_as_a_whole(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "run", lambda staging: (staging / "old.txt").write_text("old"))
    write_folder(folder, lambda staging: (staging / "new.txt").write_text("new"))
    assert visible(folder) == ["new.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # neither staging nor the old folder is left
