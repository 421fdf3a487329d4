"""The installed layout, read from pyproject.toml: the folder each package of ``clustertwin`` comes from,
and a copy of the Python sources arranged the way an install arranges them."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"


def setuptools_config() -> dict:
    return tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["setuptools"]


def package_dirs() -> dict[str, Path]:
    """``{"clustertwin.sim": ROOT / "sim", ...}`` for every mapped top-level folder."""
    return {name: ROOT / folder for name, folder in setuptools_config()["package-dir"].items()}


def _sources_only(folder: str, names: list[str]) -> list[str]:
    return [
        name
        for name in names
        if name == "__pycache__" or not (name.endswith(".py") or (Path(folder) / name).is_dir())
    ]


def stage_sources(destination: Path) -> Path:
    """Copy every ``.py`` file to where an install puts it (``destination/clustertwin/sim/...``).

    A source checkout finds the subpackages through ``clustertwin.__path__`` at import time, which static
    tools such as import-linter do not run; the staged copy is what they can read.
    """
    # Parents before children, so a child's folder lands inside its parent's copy.
    for name, folder in sorted(package_dirs().items()):
        shutil.copytree(
            folder, destination.joinpath(*name.split(".")), ignore=_sources_only, dirs_exist_ok=True
        )
    return destination
