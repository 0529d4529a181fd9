"""Tools an agent can call: Python callables and provider toolsets.

Every tool ends up as an Anthropic tool definition (``name``, ``description``,
``input_schema``) plus a handler. Anthropic tool dicts without a handler
(server tools such as web search) pass through to the API unchanged. Local
skills live in `groundswell.skills.local` (``Skill`` is still importable from here)
and MCP servers in `groundswell.mcp.bridge`.
"""

from __future__ import annotations

import asyncio
import base64
import dis
import inspect
import json
import math
import re
import signal
import sys
import typing
import weakref
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar, get_type_hints

import pydantic
from pydantic import BaseModel

from ..cache.backends import ToolCachePolicy
from ..errors import ConfigurationError, ToolDefinitionError, ToolError
from ..model.settings_check import check_api_item
from ..plugins.manager import get_plugin_manager
from ..tree.tree import NodeType

if TYPE_CHECKING:
    from ..skills.local import Skill

__all__ = [
    "Skill",
    "Tool",
    "ToolContext",
    "ToolFailed",
    "ToolHandler",
    "check_cache_policy",
    "check_context_ttl",
    "check_timeout",
    "check_tools",
    "is_interrupt",
    "tool_error_text",
    "tool_for",
    "tool_result_content",
]

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


#: The type of a prompt's ``deps`` as a tool sees it (``ToolContext[Shop]``); ``Any`` when bare.
if TYPE_CHECKING or sys.version_info >= (3, 13):
    DepsT = TypeVar("DepsT", default=Any)
else:  # TypeVar takes default= from Python 3.13 on; only type checkers need it
    DepsT = TypeVar("DepsT")


@dataclass(frozen=True)
class ToolContext(Generic[DepsT]):
    """Given to a tool that declares a parameter annotated ``ToolContext`` (or ``ToolContext[Deps]``).

    ``env`` is the agent's ``env`` (never ``os.environ``); ``node_id`` is the
    tool call's node in the event tree; ``deps`` is the object the call passed
    as ``agent.prompt(..., deps=...)`` (``None`` when none was). Annotate the
    parameter ``ToolContext[Shop]`` and type checkers know ``ctx.deps`` is a
    ``Shop``; a bare ``ToolContext`` is ``ToolContext[Any]``.
    ``idempotency_key`` names this call for a service that deduplicates
    requests (a payment API's idempotency key): in a durable run it is the same
    on every recovery of the run, so a call that runs again after a crash can
    ask the service not to repeat its effect; elsewhere it is ``tool_use_id``.
    """

    agent: str
    tool_use_id: str
    env: Mapping[str, str] = field(default_factory=dict)
    node_id: str | None = None
    deps: DepsT = None  # type: ignore[assignment]  # None when the call passed no deps
    idempotency_key: str | None = None


class ToolFailed(ToolError):
    """A tool's error result: the model sees exactly ``content`` (no exception type in front).

    Raise it from a tool or a ``wrap_tool_call`` middleware to answer a call with
    an ``is_error`` result worded as you like; any other exception reaches the
    model as ``"Type: message"``.
    """

    def __init__(self, content: str) -> None:
        super().__init__(content)
        self.content = content


def check_timeout(value: Any, owner: str) -> float | None:
    """``value`` as a tool timeout in seconds (``None`` for none); `ConfigurationError` if bad."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ConfigurationError(
            f"{owner}: timeout must be a number of seconds > 0 (or None), got {value!r}"
        )
    return float(value)


def check_context_ttl(value: Any, owner: str) -> int | None:
    """``context_ttl``: model turns a tool result stays in the conversation (``None``: always)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(
            f"{owner}: context_ttl must be a number of model turns >= 1 (or None to keep "
            f"results for the whole prompt), got {value!r:.40}"
        )
    return value


def check_cache_policy(policy: Any, owner: str) -> ToolCachePolicy | None:
    """``policy`` if it is a well-formed `ToolCachePolicy` (or None); `ConfigurationError` if not.

    ``owner`` names where it was given (``"Tool 'weather': cache"``).
    """
    if policy is None:
        return None
    if not isinstance(policy, ToolCachePolicy):
        raise ConfigurationError(
            f"{owner} must be a ToolCachePolicy (groundswell.ToolCachePolicy), "
            f"got {type(policy).__name__}"
        )
    ttl, key, events = policy.ttl, policy.key, policy.invalidate_on
    if ttl is not None and (
        isinstance(ttl, bool)
        or not isinstance(ttl, int | float)
        or not math.isfinite(ttl)
        or ttl <= 0
    ):
        raise ConfigurationError(
            f"{owner}: ToolCachePolicy.ttl must be seconds > 0 or None, got {ttl!r:.40}"
        )
    if key is not None and not callable(key) and not _strings(key):
        raise ConfigurationError(
            f"{owner}: ToolCachePolicy.key must be None, a list of argument names or a "
            f"callable taking the arguments, got {key!r:.40}"
        )
    if not _strings(events):
        raise ConfigurationError(
            f"{owner}: ToolCachePolicy.invalidate_on must be a list of event names, "
            f"got {events!r:.40}"
        )
    if policy.hit_message is not None and not isinstance(policy.hit_message, str):
        raise ConfigurationError(
            f"{owner}: ToolCachePolicy.hit_message must be a string or None, "
            f"got {type(policy.hit_message).__name__}"
        )
    if not isinstance(policy.enabled, bool):
        raise ConfigurationError(
            f"{owner}: ToolCachePolicy.enabled must be True or False, got {policy.enabled!r:.40}"
        )
    return policy


def _strings(value: Any) -> bool:
    """True for a list or tuple of strings (a lone string is not one)."""
    return isinstance(value, list | tuple) and all(isinstance(v, str) and v for v in value)


def check_tools(items: Any, owner: str) -> list[Any]:
    """``tools=`` as a list, checked where an agent, prompt or override is built.

    Every item must be a callable, a tool handler (`Tool`), an Anthropic tool
    dict the SDK's types accept, or the name of a registered toolset; tool
    names must be unique. A toolset makes its tools at the first prompt
    (factories are lazy), so a clash with one of those is found there.
    """
    if items is None:
        return []
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, Sequence):
        hint = f"; did you mean tools=[{items!r}]?" if isinstance(items, str) else ""
        raise ConfigurationError(
            f"{owner}: tools must be a list of callables, groundswell.Tool, Anthropic tool "
            f"dicts or toolset names, got {type(items).__name__}{hint}"
        )
    named: dict[str, int] = {}
    for i, item in enumerate(items):
        where = f"tools[{i}]"
        if isinstance(item, str):
            try:
                get_plugin_manager().lookup("register_tool_providers", item)
            except ConfigurationError as exc:
                raise ConfigurationError(f"{owner}: {where}: {exc}") from None
            continue
        if isinstance(item, Mapping):
            check_api_item("tools", item, owner, where)
            if "name" not in item:
                # An entry the SDK accepts without a name (the MCP-client
                # beta's mcp_toolset) names no tool, so it cannot clash.
                continue
            name = str(item["name"])
        elif isinstance(item, ToolHandler):
            name = item.name
        elif callable(item):
            name = tool_for(item).name
        else:
            raise ConfigurationError(
                f"{owner}: {where} must be a callable, a groundswell.Tool, an Anthropic tool "
                f"dict or a toolset name, got {type(item).__name__}"
            )
        if name in named:
            raise ConfigurationError(
                f"{owner}: two tools are named {name!r} (tools[{named[name]}] and {where}); "
                "tool names must be unique (rename one with Tool(fn, name=...))"
            )
        named[name] = i
    return list(items)


def tool_error_text(exc: BaseException) -> str:
    """What the model sees when a tool call raised ``exc``.

    A `ToolFailed`'s ``content`` as it is; any other exception as ``"Type: message"``.
    For a ``wrap_tool_call`` middleware that rewrites error results.
    """
    if isinstance(exc, ToolFailed):
        return exc.content
    return f"{type(exc).__name__}: {exc}"


_RAISE = dis.opmap["RAISE_VARARGS"]
_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGBREAK")
    if hasattr(signal, name)
)


def is_interrupt(exc: BaseException) -> bool:
    """Whether ``exc``, raised in a tool call, stops the run rather than being its error result.

    True only for a ``KeyboardInterrupt`` or ``SystemExit`` that a signal brought: raised
    in a Python signal handler the process has installed (``asyncio.run``'s own, on a
    second Ctrl-C; one that calls ``sys.exit``), or a ``KeyboardInterrupt`` that Python's
    default SIGINT handler raised wherever the main thread was (not at a ``raise``).
    One a tool raises itself, or that comes from a worker thread (where no signal
    arrives), is an error like any other. (Under ``asyncio.run`` a first Ctrl-C
    cancels the run's task instead: that is a ``CancelledError``, not this.)
    """
    if not isinstance(exc, KeyboardInterrupt | SystemExit):
        return False
    handlers = set()
    for signum in _SIGNALS:
        try:
            handler = signal.getsignal(signum)
        except (OSError, ValueError):  # pragma: no cover - a signal this platform refuses
            continue
        code = getattr(getattr(handler, "__func__", handler), "__code__", None)
        if code is not None:
            handlers.add(code)
    tb, last = exc.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code in handlers:
            return True
        last, tb = tb, tb.tb_next
    if last is None or not isinstance(exc, KeyboardInterrupt):
        return last is None  # no traceback to tell by: treat it as the user's
    code = last.tb_frame.f_code
    return code.co_code[last.tb_lasti] != _RAISE


@typing.runtime_checkable
class ToolHandler(typing.Protocol):
    """What every tool of a prompt is, whatever it came from (a function, a toolset,
    a skill or an MCP server): a definition for the API and a way to call it."""

    name: str
    #: The node type its calls are recorded as (``tool_call`` or ``mcp_call``).
    node_type: NodeType
    #: The registered toolset it came from (e.g. ``"introspection"``), or ``None``.
    toolset: str | None

    def definition(self) -> dict[str, Any]:
        """The Anthropic tool definition (``name``, ``description``, ``input_schema``)."""
        ...

    async def invoke(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        """Run the tool; returns its result (text, content blocks or any value), raises on failure."""
        ...


def _bad_name(name: str, from_function: bool) -> str:
    """Why ``name`` cannot name a tool, and how to name it."""
    if from_function and name == "<lambda>":
        return (
            "a lambda has no name the model can call it by: give one with "
            "Tool(fn, name='lookup_order') (1-64 letters, digits, '_' or '-'), or write a def"
        )
    fix = "pass Tool(fn, name=...)" if from_function else "choose another name"
    return f"tool name {name!r} is invalid: use 1-64 letters, digits, '_' or '-' ({fix})"


def _schema_error(tool: str, fields: dict[str, Any], exc: Exception) -> str:
    """The parameter whose type has no JSON schema, and what a tool author can do about it."""
    for annotation, info in fields.values():
        try:
            pydantic.TypeAdapter(annotation)
        except Exception:
            kind = getattr(annotation, "__name__", None) or repr(annotation)
            return (
                f"tool {tool!r}: parameter {info.alias!r} has type {kind}, which has no JSON "
                "schema, so the model cannot send it; use a JSON type (str, int, float, bool, "
                "list, dict, a Literal, an Enum, a pydantic model, a dataclass or a TypedDict "
                "of those), or pass the object as deps (Agent(deps_type=...)) and read it "
                "from a ToolContext parameter (ctx.deps) instead"
            )
    return f"tool {tool!r}: cannot build an input schema: {exc}"


def _doc_parts(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """The description (docstring before ``Args:``) and per-argument descriptions."""
    doc = inspect.getdoc(fn) or ""
    head, _, rest = doc.partition("\nArgs:")
    params: dict[str, str] = {}
    current = None
    for line in rest.splitlines():
        match = re.match(r"^\s{2,}(\w+)(?:\s*\([^)]*\))?:\s*(.*)$", line)
        if match:
            current = match.group(1)
            params[current] = match.group(2).strip()
        elif current and line.strip() and not re.match(r"^\S", line):
            params[current] += " " + line.strip()
        elif line.strip() and re.match(r"^\S", line):
            break  # the next section (Returns:, Raises:)
    return head.strip(), params


class Tool:
    """A tool the model can call, built from a Python function (sync or async).

    The input schema comes from the signature (types via pydantic) and the
    docstring (first paragraph as description, ``Args:`` entries per argument).
    A parameter annotated `ToolContext` (or ``ToolContext[Deps]``) is filled
    in by the agent and left out of the schema. Sync functions run in a worker thread.
    ``timeout`` (seconds) bounds one call: a call over it is an ``is_error``
    result for the model (a sync function's thread cannot be stopped and
    finishes in the background). ``context_ttl`` (model turns) replaces the
    tool's results in the conversation with a short note once the model has
    seen them that many times (``None``: the agent's ``context_ttl``, if any).
    ``requires_approval=True`` makes every call wait for a person's approval
    before it runs (see ``Agent(approval=...)`` and docs/people-in-the-loop.md).
    In a durable run each call is checkpointed when the tool returns, and a
    recovered run takes its result from the checkpoint instead of calling the
    tool again; ``checkpoint=False`` opts out (a cheap read worth repeating).
    """

    node_type = NodeType.TOOL_CALL

    #: Fixed once the tool is made: an agent works out once which of its layers its
    #: tools need (`Middleware.per_agent`), so a later change would go unseen there.
    _FIXED = frozenset({"cache", "timeout", "context_ttl", "requires_approval", "checkpoint"})

    def __setattr__(self, name: str, value: Any) -> None:
        if name in Tool._FIXED and name in self.__dict__:
            raise AttributeError(
                f"Tool {self.__dict__.get('name')!r}: {name} is fixed when the tool is made "
                f"(agents decide once what their tools need); make a new Tool(..., {name}=...)"
            )
        object.__setattr__(self, name, value)

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        input_schema: dict[str, Any] | None = None,
        cache: Any = None,
        toolset: str | None = None,
        timeout: float | None = None,
        context_ttl: int | None = None,
        requires_approval: bool = False,
        checkpoint: bool = True,
    ) -> None:
        if not callable(fn):
            raise ToolDefinitionError(f"a tool needs a callable, got {type(fn).__name__}")
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            raise ToolDefinitionError(
                f"tool {getattr(fn, '__name__', fn)!r} is a generator; a tool must return its "
                "whole result (return a list or a string instead of yielding)"
            )
        self.fn = fn
        label = f"Tool {getattr(fn, '__name__', fn)!r}"
        for what, value in (("name", name), ("description", description), ("toolset", toolset)):
            if value is not None and not isinstance(value, str):
                raise ConfigurationError(
                    f"{label}: {what} must be a string or None, got {type(value).__name__}"
                )
        if input_schema is not None and not isinstance(input_schema, Mapping):
            raise ConfigurationError(
                f"{label}: input_schema must be a JSON schema dict "
                f"({{'type': 'object', 'properties': {{...}}}}), got {type(input_schema).__name__}"
            )
        #: A groundswell.ToolCachePolicy to cache this tool's results (deterministic tools only).
        self.cache = check_cache_policy(cache, f"{label}: cache")
        #: The named toolset this tool belongs to (recorded on its tool-call nodes).
        self.toolset = toolset
        #: Seconds one call may take (``None``: the agent's ``tool_timeout``, if any).
        self.timeout = check_timeout(timeout, label)
        #: Model turns its results stay in the conversation (``None``: the agent's ``context_ttl``).
        self.context_ttl = check_context_ttl(context_ttl, label)
        if not isinstance(requires_approval, bool):
            raise ConfigurationError(
                f"{label}: requires_approval must be True or False, got {requires_approval!r:.40}"
            )
        #: Every call waits for a person's approval before it runs.
        self.requires_approval = requires_approval
        if not isinstance(checkpoint, bool):
            raise ConfigurationError(
                f"{label}: checkpoint must be True or False, got {checkpoint!r:.40}"
            )
        #: In a durable run, a call's result is checkpointed and not run again on recovery.
        self.checkpoint = checkpoint
        self.name: str = name or str(getattr(fn, "__name__", ""))
        if not _NAME.match(self.name):
            raise ToolDefinitionError(_bad_name(self.name, name is None))
        doc, arg_docs = _doc_parts(fn)
        self.description = description if description is not None else doc or self.name
        self._context_param: str | None = None
        self._model: type[BaseModel] | None = None
        if input_schema is not None:
            self.input_schema = dict(input_schema)
            # What the API would refuse (a schema that is not an object's) fails here.
            check_api_item("tools", self.definition(), f"Tool {self.name!r}", "input_schema")
        else:
            self._model = self._build_model(arg_docs)
            self.input_schema = _without_titles(self._model.model_json_schema())

    def _build_model(self, arg_docs: dict[str, str]) -> type[BaseModel]:
        try:
            hints = get_type_hints(self.fn, include_extras=True)
        except Exception as exc:
            raise ToolDefinitionError(
                f"tool {self.name!r}: cannot resolve its type hints: {exc} (define or import "
                "every type its annotations name where the function is defined)"
            ) from exc
        fields: dict[str, Any] = {}
        for param in inspect.signature(self.fn).parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            annotation = hints.get(param.name, Any)
            if _is_context(annotation):
                self._context_param = param.name
                continue
            if param.kind is param.POSITIONAL_ONLY:
                raise ToolDefinitionError(
                    f"tool {self.name!r}: parameter {param.name!r} is positional-only; tools are "
                    "called with keyword arguments (remove the '/' from the signature)"
                )
            default = ... if param.default is param.empty else param.default
            # Internal field names with the real name as alias: parameters called
            # "json", "schema" or "model_config" would otherwise clash with pydantic.
            fields[f"arg{len(fields)}"] = (
                annotation,
                pydantic.Field(default, alias=param.name, description=arg_docs.get(param.name)),
            )
        try:
            return pydantic.create_model(f"{self.name}_input", **fields)
        except Exception as exc:
            raise ToolDefinitionError(_schema_error(self.name, fields, exc)) from exc

    def definition(self) -> dict[str, Any]:
        """The Anthropic tool definition."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> Any:
        """Validate ``arguments`` and call the function; errors propagate."""
        if self._model is not None:
            try:
                validated = self._model.model_validate(dict(arguments))
            except pydantic.ValidationError as exc:
                raise ToolError(f"invalid input for tool {self.name!r}: {exc}") from exc
            kwargs = {
                field.alias or name: getattr(validated, name)
                for name, field in type(validated).model_fields.items()
            }
        else:
            kwargs = dict(arguments)
        if self._context_param:
            kwargs[self._context_param] = context
        if inspect.iscoroutinefunction(self.fn):
            return await self.fn(**kwargs)
        result = await asyncio.to_thread(self.fn, **kwargs)
        return await result if inspect.isawaitable(result) else result

    async def invoke(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        """Run the tool and return what the function returned (the loop makes it content)."""
        return await self.run(arguments, context)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"


def _is_context(annotation: Any) -> bool:
    """True for ``ToolContext``, ``ToolContext[Deps]``, and either inside ``Optional`` or
    ``Annotated``."""
    if annotation is ToolContext or typing.get_origin(annotation) is ToolContext:
        return True
    return any(
        arg is ToolContext or typing.get_origin(arg) is ToolContext
        for arg in typing.get_args(annotation)
    )


def _without_titles(schema: Any) -> Any:
    """The schema without pydantic's auto-generated titles, which only cost tokens."""
    if isinstance(schema, dict):
        out = {
            k: _without_titles(v)
            for k, v in schema.items()
            if k != "title" or not isinstance(v, str)
        }
        if isinstance(schema.get("properties"), dict):
            out["properties"] = {k: _without_titles(v) for k, v in schema["properties"].items()}
        return out
    if isinstance(schema, list):
        return [_without_titles(v) for v in schema]
    return schema


_built: weakref.WeakKeyDictionary[Callable[..., Any], Tool] = weakref.WeakKeyDictionary()


def tool_for(fn: Callable[..., Any]) -> Tool:
    """The `Tool` for a plain function, built once and reused.

    Building one costs a pydantic model (hundreds of microseconds), and agents
    resolve their tools on every prompt. Weak keys: a function that goes away
    takes its tool with it.
    """
    with suppress(KeyError, TypeError):  # TypeError: not weakly referenceable
        return _built[fn]
    tool = Tool(fn)
    with suppress(TypeError):
        _built[fn] = tool
    return tool


def tool_result_content(value: Any) -> str | list[dict[str, Any]]:
    """A tool's return value as ``tool_result`` content: text, or content blocks as given.

    Text stays text, bytes are decoded (or base64 when not UTF-8), a pydantic model
    is its JSON, a list of ``text``/``image``/``document`` blocks is kept, anything
    else is JSON (``repr`` when it is not serializable): what the model is sent.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return f"(binary, {len(value)} bytes, base64) {base64.b64encode(bytes(value)).decode()}"
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    if (
        isinstance(value, list)
        and value
        and all(
            isinstance(b, dict) and b.get("type") in ("text", "image", "document") for b in value
        )
    ):
        return value
    try:
        return json.dumps(value, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)
