"""A tool call's arguments checked against the tool's typed signature (pydantic).

Each tool's pydantic model (``specs.arguments_model``) has one field per parameter of its
method, with its ``Annotated`` constraints and default, no other field and strict types: a
model makes mistakes a programmer would not (a number as a string, a missing field, a field of
another tool, a 10 MB string), and each is refused, never coerced. JSON has one number type,
so ``20.0`` is the integer 20; null is an absent argument (its default).

``check_arguments`` returns the arguments with defaults filled in, or raises a ``ToolError``
that says which argument and what it must be.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from ..errors import ToolError
from .specs import ToolSpec

__all__ = ["bind_arguments", "check_arguments"]

#: what a strict type error means, by pydantic's error type
_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "list_type": "an array",
}


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _kinds(schema: Mapping[str, Any]) -> set[str]:
    """The JSON types a property's schema allows (``anyOf`` branches included)."""
    return {str(s.get("type")) for s in [schema, *schema.get("anyOf", ())] if "type" in s}


def _branch(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """A property's schema without its null branch (where the constraints are)."""
    return next((s for s in schema.get("anyOf", ()) if s.get("type") != "null"), schema)


def _json_values(spec: ToolSpec, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` as JSON means them: null is absent, an integral number where an integer is
    asked for is that integer, an array is a list (a Python caller's tuple too)."""
    properties: Mapping[str, Any] = spec.input_schema["properties"]
    values: dict[str, Any] = {}
    for name, value in arguments.items():
        kinds = _kinds(properties.get(name, {}))
        if value is None and name in properties:
            continue
        if "integer" in kinds and isinstance(value, float) and value.is_integer():
            value = int(value)
        elif "array" in kinds and isinstance(value, tuple):
            value = list(value)
        values[name] = value
    return values


def _message(spec: ToolSpec, error: ErrorDetails) -> str:
    """One pydantic error as a sentence for the model: the argument and what it must be."""
    properties: Mapping[str, Any] = spec.input_schema["properties"]
    loc = error["loc"]
    top = str(loc[0]) if loc else ""
    arg = top + "".join(f"[{part}]" for part in loc[1:])
    kind, value = error["type"], error.get("input")
    schema = _branch(properties.get(top, {}))
    if kind == "missing":
        return f"{spec.name} needs the argument {top!r}"
    if kind == "extra_forbidden":
        known = ", ".join(properties) or "none"
        return f"{spec.name} has no argument {top!r} (its arguments: {known})"
    if kind == "finite_number":
        return f"argument {arg!r} must be a number, and finite (not NaN or infinity)"
    if kind in _EXPECTED:
        return f"argument {arg!r} must be {_EXPECTED[kind]}, not {_type_name(value)}"
    if kind in ("greater_than_equal", "less_than_equal"):
        return f"argument {arg!r} must be between {schema.get('minimum')} and {schema.get('maximum')}"
    if kind == "literal_error":
        return f"argument {arg!r} must be one of {', '.join(map(str, schema.get('enum', ())))}"
    if kind == "string_too_short":
        least = (error.get("ctx") or {}).get("min_length", 1)
        if least <= 1:
            return f"argument {arg!r} must not be empty"
        return f"argument {arg!r} is too short (at least {least} characters)"
    if kind == "string_too_long":
        return f"argument {arg!r} is too long (at most {(error.get('ctx') or {}).get('max_length')} characters)"
    if kind in ("too_short", "too_long"):
        return f"argument {arg!r} must have {schema.get('minItems', 0)} to {schema.get('maxItems')} items"
    return f"argument {arg!r}: {error['msg']}"


def check_arguments(spec: ToolSpec, arguments: object) -> dict[str, Any]:
    """``arguments`` (a dict, as a model sends them) checked against ``spec``'s model, with
    defaults filled in: every argument of the tool is a key of the result."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        raise ToolError(f"the arguments of {spec.name} must be an object, not {_type_name(arguments)}")
    if spec.model is None:  # a spec made by hand, not derived from a tool method
        raise ToolError(f"{spec.name} has no argument model to check a call against")
    try:
        checked = spec.model.model_validate(_json_values(spec, arguments))
    except ValidationError as exc:
        raise ToolError(_message(spec, exc.errors(include_url=False)[0])) from None
    return {name: getattr(checked, name) for name in type(checked).model_fields}


def bind_arguments(method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """A direct call's positional and keyword arguments by name (``self`` left out), unchecked."""
    try:
        bound = inspect.signature(method).bind_partial(None, *args, **kwargs)
    except TypeError as exc:
        raise ToolError(f"{method.__name__}: {exc}") from None
    named = dict(bound.arguments)
    named.pop(next(iter(inspect.signature(method).parameters)), None)
    return named
