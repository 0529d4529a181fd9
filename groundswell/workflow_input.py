"""A workflow's input: its arguments after ``ctx``, as a JSON schema and checked.

For callers that start workflows from data (a tool call, a request): the schema
says what to send, and `validate_input` turns what was sent into the keyword
arguments, or a `ConfigurationError` naming what is wrong.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any

import pydantic

from .errors import ConfigurationError

__all__ = ["input_model", "validate_input"]


@functools.lru_cache(maxsize=256)
def input_model(executor: Callable[..., Any]) -> type[pydantic.BaseModel]:
    """A pydantic model of an executor's parameters after ``ctx`` (extra fields refused)."""
    try:
        hints = typing.get_type_hints(executor)
    except Exception:
        hints = {}
    fields: dict[str, Any] = {}
    params = list(inspect.signature(executor).parameters.values())[1:]
    for param in params:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (hints.get(param.name, Any), default)
    name = f"{getattr(executor, '__name__', 'workflow')}_input"
    model: type[pydantic.BaseModel] = pydantic.create_model(
        name, __config__=pydantic.ConfigDict(extra="forbid"), **fields
    )
    return model


def validate_input(name: str, executor: Callable[..., Any], data: Any) -> dict[str, Any]:
    """Check ``data`` against the workflow ``name``'s executor; return the keyword arguments.

    Raises `ConfigurationError` naming each invalid or missing argument.
    """
    if not isinstance(data, dict):
        raise ConfigurationError(
            f"workflow {name!r}: input must be an object of arguments, got {type(data).__name__}"
        )
    model = input_model(executor)
    try:
        checked = model.model_validate(data)
    except pydantic.ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(input)'}: {e['msg']}"
            for e in exc.errors()[:5]
        )
        raise ConfigurationError(
            f"workflow {name!r}: invalid input ({problems}); expected {sorted(model.model_fields)}"
        ) from exc
    return {field: getattr(checked, field) for field in model.model_fields}
