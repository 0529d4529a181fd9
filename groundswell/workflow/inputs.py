"""A workflow's input: its arguments after ``ctx``, as a JSON schema and checked.

For callers that start workflows from data (a tool call, a request): the schema
says what to send, and `validate_input` turns what was sent into the keyword
arguments, or a `ConfigurationError` naming what is wrong.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any

import pydantic

from ..errors import ConfigurationError

__all__ = ["call_error", "check_takes_ctx", "input_model", "validate_input"]


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


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def check_takes_ctx(name: str, executor: Callable[..., Any], context: type) -> None:
    """Refuse a workflow function with no parameter to take ``ctx`` (its first argument).

    A first parameter annotated with a class that ``context`` (`WorkflowContext`)
    is no kind of (``name: str``) was meant for an argument: ctx was forgotten.
    """
    try:
        params = list(inspect.signature(executor).parameters.values())
    except (TypeError, ValueError):  # no signature to read: the call will tell
        return
    fix = (
        "a workflow function gets its WorkflowContext as the first argument: "
        f"async def {name}(ctx, ...)"
    )
    if not params or params[0].kind not in (*_POSITIONAL, params[0].VAR_POSITIONAL):
        raise ConfigurationError(
            f"workflow {name!r}: its function takes no parameter for ctx; {fix}"
        )
    first = params[0]
    try:
        annotation = typing.get_type_hints(executor).get(first.name)
    except Exception:
        return
    try:
        wrong = (
            isinstance(annotation, type)
            and annotation is not Any  # a class since Python 3.11
            and not issubclass(context, annotation)
        )
    except TypeError:  # a Protocol that is not runtime-checkable, say
        return
    if wrong:
        raise ConfigurationError(
            f"workflow {name!r}: its first parameter {first.name!r} is a "
            f"{getattr(annotation, '__name__', annotation)}, but the first argument is the "
            f"WorkflowContext (ctx); {fix}"
        )


def call_error(name: str, executor: Callable[..., Any], args: Any, kwargs: Any) -> str | None:
    """What is wrong with calling workflow ``name`` with ``args`` and ``kwargs``, else None.

    Bound against the parameters after ``ctx``; called only once a call failed,
    so a right call never pays for it.
    """
    try:
        try:  # the annotations as types (`str`), not the strings postponed ones are
            params = list(inspect.signature(executor, eval_str=True).parameters.values())[1:]
        except Exception:
            params = list(inspect.signature(executor).parameters.values())[1:]
    except (TypeError, ValueError):
        return None
    signature = inspect.Signature(params)
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        wrong = str(exc)
        names = [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        unknown = [k for k in kwargs if k not in names]
        close = difflib.get_close_matches(unknown[0], names, n=1) if unknown else []
        if close:
            wrong += f" (did you mean {close[0]!r}?)"
        elif "positional" in wrong:
            wrong += f" ({len(args)} given)"
        return (
            f"workflow {name!r} was called with the wrong arguments: {wrong}; it takes "
            f"{signature} after ctx, which is passed for you (wf.run(...) takes the rest)"
        )
    return None
