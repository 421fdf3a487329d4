"""Reading a scenario file: YAML, ``--set`` overrides, path resolution and validation.

Every failure is an :class:`InputError` that points at the file and line (or at the ``--set`` override)
and names the field, so a user can fix a scenario without reading this code. The YAML is composed into
nodes first so that a field path such as ``cluster.gpus.v100`` can be mapped back to its line.
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from clustertwin.scenarios.kinds import KINDS, AnyScenario
from pydantic import BaseModel, ValidationError

from clustertwin.errors import InputError

DEFAULT_SCENARIO = Path(__file__).with_name("gavel-default.yaml")

FieldPath = tuple[str | int, ...]


def load_scenario(path: str | Path | None, overrides: Sequence[str] = ()) -> AnyScenario:
    """Load, override and validate a scenario; ``None`` loads the bundled default.

    ``overrides`` are ``key.sub=value`` strings; the value is parsed as YAML, so ``=false``, ``=8``,
    ``=null`` and ``=[50, 250]`` mean what they would in the file. Relative paths in the file are
    relative to the file's folder; relative paths given in an override are relative to the working
    directory.
    """
    source = DEFAULT_SCENARIO if path is None else Path(path)
    label = str(source)
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as err:
        raise InputError(label, f"cannot read the scenario file: {err.strerror or err}") from None
    data, lines = _parse(text, label)

    overridden: dict[FieldPath, str] = {}
    for item in overrides:
        keys, value = _parse_override(item)
        _apply_override(data, keys, value, item)
        overridden[keys] = item
    model, path_fields = _kind(data, lines, label, overridden)
    _resolve_paths(data, source.parent.resolve(), overridden, path_fields)

    try:
        # The context marks input written by a user (a file and its --set overrides), as opposed to a
        # scenario re-validated after a round trip, where every field looks explicitly given.
        scenario = model.model_validate(data, context={"user_input": True})
    except ValidationError as err:
        raise _explain(err, data, lines, label, overridden, model) from None
    scenario._source = label
    return scenario  # type: ignore[return-value]


def _kind(
    data: dict[str, Any], lines: dict[FieldPath, int], label: str, overridden: dict[FieldPath, str]
) -> tuple[type[BaseModel], dict[str, tuple[str, ...]]]:
    """The schema that the scenario's ``kind`` names."""
    kind = data.get("kind")
    if kind in KINDS:
        return KINDS[kind]
    where = f"{label}: --set {overridden[('kind',)]}" if ("kind",) in overridden else label
    if ("kind",) in lines and ("kind",) not in overridden:
        where = f"{label}:{lines[('kind',)]}"
    got = "required field is missing" if kind is None else f"got {kind!r}"
    raise InputError(where, f"field kind: expected one of {', '.join(KINDS)}; {got}")


def scenario_to_dict(scenario: AnyScenario) -> dict[str, Any]:
    """The scenario as plain JSON-ready values (for summary.json)."""
    return scenario.model_dump(mode="json")


def _parse(text: str, label: str) -> tuple[dict[str, Any], dict[FieldPath, int]]:
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        lines = _line_map(node, (), label) if node is not None else {}
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{label}:{mark.line + 1}:{mark.column + 1}" if mark else label
        raise InputError(where, f"malformed YAML: {err.problem or err.context}") from None
    except yaml.YAMLError as err:
        raise InputError(label, f"malformed YAML: {err}") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise InputError(
            label, f"a scenario is a mapping of fields (name, kind, cluster, ...); got {type(data).__name__}"
        )
    return data, lines


def _line_map(node: yaml.Node, path: FieldPath, label: str) -> dict[FieldPath, int]:
    """Line (1-based) of every key and list item, by field path; also rejects duplicate keys,
    which PyYAML would otherwise resolve silently by keeping the last one."""
    lines: dict[FieldPath, int] = {}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            child = (*path, key_node.value)
            line = key_node.start_mark.line + 1
            if child in lines:
                raise InputError(f"{label}:{line}", f"field {_dotted(child)}: appears twice")
            lines[child] = line
            lines.update(_line_map(value_node, child, label))
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*path, index)] = item.start_mark.line + 1
            lines.update(_line_map(item, (*path, index), label))
    return lines


def _parse_override(item: str) -> tuple[FieldPath, Any]:
    key, sep, raw = item.partition("=")
    keys = tuple(key.strip().split("."))
    if not sep or not all(keys):
        raise InputError(f"--set {item}", "expected key.sub=value, for example --set cluster.gpus.v100=8")
    try:
        return keys, yaml.safe_load(raw)
    except yaml.YAMLError as err:
        problem = getattr(err, "problem", None) or err
        raise InputError(f"--set {item}", f"the value is not valid YAML: {problem}") from None


def _apply_override(data: dict[str, Any], keys: FieldPath, value: Any, item: str) -> None:
    node = data
    for depth, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:  # absent or null: the override creates the mapping
            child = node[key] = {}
        elif not isinstance(child, dict):
            where = _dotted(keys[: depth + 1])
            raise InputError(
                f"--set {item}",
                f"{where} is {child!r}, not a mapping, so it has no field {keys[depth + 1]!r}",
            )
        node = child
    node[keys[-1]] = value


def _resolve_paths(
    data: dict[str, Any],
    base: Path,
    overridden: dict[FieldPath, str],
    path_fields: dict[str, tuple[str, ...]],
) -> None:
    for dotted, keywords in path_fields.items():
        keys = tuple(dotted.split("."))
        parent: Any = data
        for key in keys[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        value = parent.get(keys[-1]) if isinstance(parent, dict) else None
        if not isinstance(value, str) or value in keywords:
            continue
        from_cli = any(keys[: len(o)] == o for o in overridden)
        folder = Path.cwd() if from_cli else base
        parent[keys[-1]] = str((folder / Path(value).expanduser()).resolve())


def _explain(
    err: ValidationError,
    data: dict[str, Any],
    lines: dict[FieldPath, int],
    label: str,
    overridden: dict[FieldPath, str],
    model: type[BaseModel],
) -> InputError:
    # Group by field: a union (int or mapping) reports one error per alternative for the same field.
    grouped: dict[FieldPath, list[str]] = {}
    for error in err.errors(include_url=False):
        path = _data_path(error["loc"], data, keep_last=error["type"] == "missing")
        message = _message(error, path, model)
        if message not in grouped.setdefault(path, []):
            grouped[path].append(message)

    problems: list[tuple[str, str]] = []
    for path, messages in grouped.items():
        text = f"field {_dotted(path) or '(top level)'}: {' or '.join(messages)}"
        culprits = [o for o in overridden if path[: len(o)] == o]
        if culprits:
            problems.append((f"{label}: --set {overridden[max(culprits, key=len)]}", text))
            continue
        line = next((lines[p] for p in _prefixes(path) if p in lines), None)
        inside = [item for o, item in overridden.items() if o[: len(path)] == path]
        if inside:
            text += f" (after --set {', --set '.join(inside)})"
        problems.append((f"{label}:{line}" if line else label, text))

    if len(problems) == 1:
        return InputError(*problems[0])
    listing = "\n".join(f"  {where}: {text}" for where, text in problems)
    return InputError(label, f"{len(problems)} problems:\n{listing}")


def _data_path(loc: tuple[str | int, ...], data: Any, *, keep_last: bool) -> FieldPath:
    """The part of a pydantic error location that indexes the input; drops union branch tags
    such as ``constrained-int`` that pydantic inserts between real keys."""
    path: list[str | int] = []
    node = data
    for depth, part in enumerate(loc):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list | tuple) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif keep_last and depth == len(loc) - 1:
            pass
        else:
            continue
        path.append(part)
    return tuple(path)


def _message(error: dict[str, Any], path: FieldPath, scenario_model: type[BaseModel]) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        allowed = _allowed_fields(path[:-1], scenario_model)
        listing = f"; allowed fields here: {', '.join(allowed)}" if allowed else ""
        return f"unknown field {path[-1]!r}{listing}"
    if kind == "missing":
        return "required field is missing"
    message = str(error["msg"]).removeprefix("Value error, ")
    value = error.get("input")
    if kind != "value_error" and (value is None or isinstance(value, str | int | float | bool)):
        shown = repr(value)
        message += f" (got {shown if len(shown) <= 60 else shown[:57] + '...'})"
    return message


def _allowed_fields(path: FieldPath, scenario_model: type[BaseModel]) -> list[str]:
    model: type[BaseModel] | None = scenario_model
    for part in path:
        field = model.model_fields.get(str(part)) if model is not None else None
        model = _model_in(field.annotation) if field is not None else None
    return list(model.model_fields) if model is not None else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if typing.get_origin(annotation) is None and isinstance(annotation, type):
        return annotation if issubclass(annotation, BaseModel) else None
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _prefixes(path: FieldPath) -> list[FieldPath]:
    """``path`` and its ancestors, longest first, with keys as the YAML spells them (strings)."""
    keys = tuple(p if isinstance(p, int) else str(p) for p in path)
    return [keys[:n] for n in range(len(keys), 0, -1)]


def _dotted(path: FieldPath) -> str:
    return ".".join(str(p) for p in path)
