"""The scenario reference (``docs/scenarios.md``), generated from the scenario schemas themselves.

Every field of every kind's pydantic model, with its type, its default and its description. A field's
description is the comment written beside it in the schema (or on the lines just above it), so the schema
stays the one place where a field is explained. ``python -m clustertwin.scenario_reference --write``
rewrites the page; a test fails when the page is stale.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import io
import json
import textwrap
import tokenize
import types
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo

PAGE = Path(__file__).resolve().parents[1] / "docs" / "scenarios.md"

_HEADER = """# Scenario reference

A scenario is a YAML file whose `kind` picks one of the schemas below. Every field may be overridden from
the command line with `--set path=value` (the value is read as YAML). Unknown fields are errors, and types
are strict (`yes` is not `true`). Sections that hold a name from a registered family (a policy, a
schedule, ...) accept the names that `clustertwin list` prints.

This page is generated from the schemas (`python -m clustertwin.scenario_reference --write`); a test fails
when it is out of date.
"""


def render(schemas: dict[str, type[BaseModel]]) -> str:
    """The whole page for the given kinds (kind name -> scenario model)."""
    parts = [_HEADER]
    for kind, model in sorted(schemas.items()):
        parts.append(f"\n## `kind: {kind}`\n")
        doc = inspect.getdoc(model)
        if doc:
            parts.append(doc.split("\n\n")[0].replace("\n", " ") + "\n")
        parts.append("\n| field | type | default | description |\n|---|---|---|---|\n")
        for path, info, text in _fields(model, ""):
            if path == "kind":
                continue
            row = (f"`{path}`", _type_text(info.annotation, info.metadata), _default(info), text)
            parts.append("| " + " | ".join(_cell(c) for c in row) + " |\n")
    return "".join(parts)


def builtin_schemas() -> dict[str, type[BaseModel]]:
    from clustertwin.kinds import kinds

    return {spec.name: spec.schema for spec in kinds()}


def _fields(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, FieldInfo, str]]:
    comments = _comments(model)
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        text = info.description or comments.get(name, "")
        nested = list(_models_in(info.annotation))
        if nested and not text:
            text = (inspect.getdoc(nested[0]) or "").split("\n\n")[0].replace("\n", " ")
        yield path, info, text
        for sub, shape in _nested(info.annotation):
            yield from _fields(sub, f"{path}{shape}.")


def _nested(annotation: Any, shape: str = "") -> Iterator[tuple[type[BaseModel], str]]:
    """The models inside a field's type, with the path step that reaches them (``.<key>``, ``[]``)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation, shape
    elif origin is typing.Annotated:
        yield from _nested(args[0], shape)
    elif origin in (typing.Union, types.UnionType):
        seen: set[type] = set()
        for arg in args:
            for sub, step in _nested(arg, shape):
                if sub not in seen:
                    seen.add(sub)
                    yield sub, step
    elif origin in (list, tuple, set, frozenset) and args:
        yield from _nested(args[0], shape + "[]")
    elif origin is dict and len(args) == 2:
        yield from _nested(args[1], shape + ".<name>")


def _models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    for model, _ in _nested(annotation):
        yield model


_SCALARS = {
    str: "text",
    int: "integer",
    float: "number",
    bool: "true/false",
    Path: "path",
    type(None): "null",
}
_BOUNDS = ((at.Gt, "gt", ">"), (at.Ge, "ge", "≥"), (at.Lt, "lt", "<"), (at.Le, "le", "≤"))


def _type_text(annotation: Any, metadata: Sequence[Any] = ()) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_text(args[0], [*args[1:], *metadata])
    if origin is typing.Literal:
        text = " \\| ".join(str(a) for a in args)
    elif origin in (typing.Union, types.UnionType):
        text = " or ".join(_type_text(a) for a in args)
    elif origin in (list, tuple, set, frozenset):
        text = f"list of {_type_text(args[0])}" if args else "list"
    elif origin is dict:
        text = f"map of {_type_text(args[0])} to {_type_text(args[1])}" if args else "map"
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        text = "section"
    else:
        text = _SCALARS.get(annotation, getattr(annotation, "__name__", str(annotation)))
    bounds = [
        f"{sign} {getattr(m, attr)}"
        for m in metadata
        for cls, attr, sign in _BOUNDS
        if isinstance(m, cls)
        or (isinstance(m, FieldInfo | at.Interval) and getattr(m, attr, None) is not None)
    ]
    min_length = [m.min_length for m in metadata if getattr(m, "min_length", None) is not None]
    if min_length:
        bounds.append(f"at least {min_length[0]} long")
    return f"{text} ({', '.join(bounds)})" if bounds else text


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value = info.default_factory() if info.default_factory is not None else info.default  # type: ignore[call-arg]
    if isinstance(value, BaseModel):
        return "(section defaults)"
    return json.dumps(value, default=str)


def _comments(model: type[BaseModel]) -> dict[str, str]:
    """The comment beside each field of the class body, or the comment lines just above it."""
    try:
        source = textwrap.dedent(inspect.getsource(model))
    except (OSError, TypeError):
        return {}
    by_line: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            by_line[token.start[0]] = token.string.lstrip("#").strip()
    lines = source.splitlines()
    found: dict[str, str] = {}
    for node in ast.parse(source).body[0].body:  # type: ignore[attr-defined]
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above: list[str] = []
        line = node.lineno - 1
        while line in by_line and lines[line - 1].lstrip().startswith("#"):
            above.insert(0, by_line[line])
            line -= 1
        beside = [
            by_line[n] for n in range(node.lineno, (node.end_lineno or node.lineno) + 1) if n in by_line
        ]
        text = " ".join([*above, *beside]).strip()
        if text and not text.startswith(("noqa", "type:", "fmt:")):
            found[node.target.id] = text
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\\\\|", "\\|").replace("\n", " ")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clustertwin.scenario_reference", description=__doc__)
    parser.add_argument("--write", action="store_true", help=f"rewrite {PAGE.name} instead of printing it")
    args = parser.parse_args(argv)
    page = render(builtin_schemas())
    if args.write:
        PAGE.write_text(page, encoding="utf-8")
        print(PAGE)
    else:
        print(page, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
