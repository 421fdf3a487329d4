"""A digest of the code and data a simulation's result depends on, so that a cached result is reused only
by the code that made it."""

from __future__ import annotations

import functools
import hashlib
import importlib
from pathlib import Path

import clustertwin

# The claim files say which runs to make (their overrides are in each run's key) and what to say of
# them; editing a claim's text must not throw its runs away.
_NOT_RESULTS = ("scenarios/claims/",)


@functools.cache
def code_fingerprint() -> str:
    """SHA-256 (16 hex digits) over every source and data file of the installed ``clustertwin`` package,
    its subpackages' folders included, by relative path and content."""
    digest = hashlib.sha256()
    for root in _package_roots():
        for path in sorted(root.rglob("*")):
            name = f"{root.name}/{path.relative_to(root).as_posix()}"
            if path.is_file() and "__pycache__" not in path.parts and not name.startswith(_NOT_RESULTS):
                digest.update(f"{name}\0".encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _package_roots() -> list[Path]:
    """``clustertwin``'s folder and each subpackage folder that lies elsewhere (the repository maps its
    top-level folders in as subpackages)."""
    main = Path(clustertwin.__file__).parent
    roots = [main]
    for name in ("policies", "sim", "traces", "scenarios", "analysis"):
        folder = Path(importlib.import_module(f"clustertwin.{name}").__file__).parent
        if not folder.is_relative_to(main):
            roots.append(folder)
    return roots
