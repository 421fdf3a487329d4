"""Reading a trace file, with errors that name it: every loader in ``traces/`` reads through these."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from clustertwin.errors import InputError


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(str(path), "no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(str(path), f"cannot read: {err}") from None


def read_json(path: Path) -> Any:
    """The file's JSON value; a syntax error is reported at its line and column."""
    return parse_json(read_text(path), path)


def parse_json(text: str, path: Path) -> Any:
    """``text`` (read from ``path``) as JSON; a syntax error is reported at its line and column."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{path}:{err.lineno}:{err.colno}", f"not valid JSON: {err.msg}") from None
