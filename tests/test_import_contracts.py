"""Dependencies flow one way: the import contracts in pyproject.toml (``[tool.importlinter]``) hold."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from package_layout import PYPROJECT, stage_sources

LINT = "from importlinter.cli import lint_imports_command; lint_imports_command()"


def lint_imports(staged: Path) -> subprocess.CompletedProcess[str]:
    """Run import-linter on the staged copy, with nothing else of clustertwin importable."""
    env = {**os.environ, "PYTHONPATH": str(staged), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-c", LINT, str(PYPROJECT), "--no-cache", "--no-logo"],
        cwd=staged,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_import_contracts_are_kept(tmp_path: Path) -> None:
    result = lint_imports(stage_sources(tmp_path))
    if result.returncode != 0:
        pytest.fail(f"broken import contracts:\n{result.stdout}{result.stderr}", pytrace=False)


def test_a_policy_importing_an_executor_breaks_a_contract(tmp_path: Path) -> None:
    staged = stage_sources(tmp_path)
    probe = staged / "clustertwin" / "policies" / "reads_the_clock.py"
    probe.write_text("import clustertwin.sim\n", encoding="utf-8")
    result = lint_imports(staged)
    assert result.returncode != 0
    assert "clustertwin.policies.reads_the_clock -> clustertwin.sim" in result.stdout
