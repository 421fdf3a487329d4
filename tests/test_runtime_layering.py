"""The real runtime never imports the simulator; what needs both (a real run's prediction) sits above."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def test_no_runtime_module_imports_the_simulator() -> None:
    offenders = {
        str(path.relative_to(ROOT)): name
        for path in sorted((ROOT / "runtime").rglob("*.py"))
        for name in _imports(path)
        if name == "clustertwin.sim" or name.startswith("clustertwin.sim.")
    }
    assert offenders == {}
