"""A tool call's arguments checked against its JSON schema (the subset ``specs`` uses). Pure.

A model makes mistakes a programmer would not (a number as a string, a missing field, a field
of another tool, a 10 MB string): every one is a ``ToolError`` that says which argument and
what it must be, never a crash and never a value passed on unchecked. Optional arguments that
are absent or null get their schema's default (or None). The schema subset: ``type`` (object,
string, integer, number, boolean, array), ``minimum``/``maximum``, ``minLength``/``maxLength``,
``minItems``/``maxItems``, ``enum``, ``items``, ``required``, ``additionalProperties: false``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..errors import ToolError
from .specs import ToolSpec

__all__ = ["check_arguments"]

_TYPE_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "array": "an array",
    "object": "an object",
}


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _is_type(value: object, kind: str) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        if isinstance(value, float) and value.is_integer():
            return True  # JSON has one number type: 20.0 is the integer 20
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if kind == "array":
        return isinstance(value, (list, tuple))
    return isinstance(value, Mapping)


def _check(name: str, value: object, schema: Mapping[str, Any]) -> object:
    kind = schema.get("type", "string")
    if not _is_type(value, kind):
        raise ToolError(f"argument {name!r} must be {_TYPE_NAMES[kind]}, not {_type_name(value)}")
    if kind == "integer":
        value = int(value)  # type: ignore[call-overload]
    if kind in ("integer", "number"):
        number: float = value  # type: ignore[assignment]
        low, high = schema.get("minimum"), schema.get("maximum")
        if (low is not None and number < low) or (high is not None and number > high):
            raise ToolError(f"argument {name!r} must be between {low} and {high}")
    if kind == "string":
        text: str = value  # type: ignore[assignment]
        if "enum" in schema and text not in schema["enum"]:
            raise ToolError(f"argument {name!r} must be one of {', '.join(schema['enum'])}")
        if len(text) < schema.get("minLength", 0):
            raise ToolError(f"argument {name!r} must not be empty")
        if "maxLength" in schema and len(text) > schema["maxLength"]:
            raise ToolError(f"argument {name!r} is too long (at most {schema['maxLength']} characters)")
    if kind == "array":
        items: list[Any] = list(value)  # type: ignore[call-overload]
        if not schema.get("minItems", 0) <= len(items) <= schema.get("maxItems", len(items)):
            raise ToolError(
                f"argument {name!r} must have {schema.get('minItems', 0)} to {schema.get('maxItems')} items"
            )
        inner = schema.get("items", {})
        value = [_check(f"{name}[{i}]", item, inner) for i, item in enumerate(items)]
    return value


def check_arguments(spec: ToolSpec, arguments: object) -> dict[str, Any]:
    """``arguments`` checked against ``spec.input_schema``, with defaults filled in; every
    property of the schema is a key of the result (None where absent and without default)."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        raise ToolError(f"the arguments of {spec.name} must be an object, not {_type_name(arguments)}")
    schema = spec.input_schema
    properties: Mapping[str, Any] = schema["properties"]
    unknown = sorted(str(k) for k in arguments if k not in properties)
    if unknown:
        known = ", ".join(properties) or "none"
        raise ToolError(f"{spec.name} has no argument {unknown[0]!r} (its arguments: {known})")
    checked: dict[str, Any] = {}
    for name, sub in properties.items():
        value = arguments.get(name)
        if value is None:
            if name in schema.get("required", ()):
                raise ToolError(f"{spec.name} needs the argument {name!r}")
            checked[name] = sub.get("default")
            continue
        checked[name] = _check(name, value, sub)
    return checked
