"""One installed top-level name: the wheel holds the package ``clustertwin`` alone, with every subpackage
and the bundled data, and pyproject.toml lists every package folder."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from package_layout import ROOT, package_dirs, setuptools_config


def package_folders() -> dict[str, Path]:
    """Every folder with an ``__init__.py`` under a mapped folder, by its installed package name."""
    found = {}
    for name, folder in package_dirs().items():
        for init in folder.rglob("__init__.py"):
            found[".".join([name, *init.parent.relative_to(folder).parts])] = init.parent
    return found


def wheel_path(package: str, folder: Path, file: Path) -> str:
    """Where ``file``, under ``folder`` (the source of ``package``), lies in the wheel."""
    return "/".join([*package.split("."), *file.relative_to(folder).parts])


def test_pyproject_lists_every_package_folder() -> None:
    listed = set(setuptools_config()["packages"])
    found = set(package_folders())
    assert found - listed == set(), "package folders missing from [tool.setuptools] packages"
    assert listed - found == set(), "[tool.setuptools] packages names folders without an __init__.py"


def test_the_wheel_holds_one_top_level_package_with_its_data(tmp_path: Path) -> None:
    # Built from a copy: an in-place build leaves build/ behind, and its stale files go into later wheels.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in set(package_dirs().values()):
        shutil.copytree(folder, source / folder.name, ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    pip_wheel = ["pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), "."]
    subprocess.run([sys.executable, "-m", *pip_wheel], cwd=source, check=True, timeout=300)
    (wheel,) = wheels.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (top_level,) = (name for name in names if name.endswith(".dist-info/top_level.txt"))
        assert archive.read(top_level).decode().split() == ["clustertwin"]
    tops = {name.split("/")[0] for name in names}
    assert {top for top in tops if not top.endswith((".dist-info", ".data"))} == {"clustertwin"}

    expected = {wheel_path(name, d, f) for name, d in package_folders().items() for f in d.glob("*.py")}
    traces, scenarios = (package_dirs()[f"clustertwin.{name}"] for name in ("traces", "scenarios"))
    expected |= {wheel_path("clustertwin.traces", traces, f) for f in traces.glob("data/**/*") if f.is_file()}
    expected |= {wheel_path("clustertwin.scenarios", scenarios, f) for f in scenarios.rglob("*.yaml")}
    assert {"clustertwin/sim/__init__.py", "clustertwin/runtime/spot/model.py"} <= expected
    assert any(name.startswith("clustertwin/traces/data/") for name in expected)
    assert sorted(expected - names) == []
