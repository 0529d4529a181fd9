"""Tools an agent can call: Python callables, provider toolsets, skills, MCP servers.

Every tool ends up as an Anthropic tool definition (``name``, ``description``,
``input_schema``) plus a handler. Anthropic tool dicts without a handler
(server tools such as web search) pass through to the API unchanged.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import inspect
import json
import math
import os
import re
import typing
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

import pydantic
from pydantic import BaseModel

from ._serialize import register_secret
from .errors import ConfigurationError, ToolError
from .tree import NodeType

__all__ = [
    "MCPBridge",
    "Skill",
    "Tool",
    "ToolContext",
    "ToolFailed",
    "ToolHandler",
    "check_timeout",
    "tool_error_text",
    "tool_for",
    "tool_result_content",
]

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
# Seconds a local MCP server gets to start and list its tools (config key "timeout").
CONNECT_TIMEOUT = 30.0


@dataclass(frozen=True)
class ToolContext:
    """Given to a tool that declares a parameter annotated ``ToolContext``.

    ``env`` is the agent's ``env`` (never ``os.environ``); ``node_id`` is the
    tool call's node in the event tree.
    """

    agent: str
    tool_use_id: str
    env: Mapping[str, str] = field(default_factory=dict)
    node_id: str | None = None


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


def tool_error_text(exc: BaseException) -> str:
    """What the model sees when a tool call raised ``exc``."""
    if isinstance(exc, ToolFailed):
        return exc.content
    return f"{type(exc).__name__}: {exc}"


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
    A parameter annotated `ToolContext` is filled in by the agent and
    left out of the schema. Sync functions run in a worker thread.
    ``timeout`` (seconds) bounds one call: a call over it is an ``is_error``
    result for the model (a sync function's thread cannot be stopped and
    finishes in the background).
    """

    node_type = NodeType.TOOL_CALL

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
    ) -> None:
        if not callable(fn):
            raise ToolError(f"a tool needs a callable, got {type(fn).__name__}")
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            raise ToolError(
                f"tool {getattr(fn, '__name__', fn)!r} is a generator; a tool must return its "
                "whole result (return a list or a string instead of yielding)"
            )
        self.fn = fn
        #: A groundswell.ToolCachePolicy to cache this tool's results (deterministic tools only).
        self.cache = cache
        #: The named toolset this tool belongs to (recorded on its tool-call nodes).
        self.toolset = toolset
        #: Seconds one call may take (``None``: the agent's ``tool_timeout``, if any).
        self.timeout = check_timeout(timeout, f"Tool {getattr(fn, '__name__', fn)!r}")
        self.name: str = name or str(getattr(fn, "__name__", ""))
        if not _NAME.match(self.name):
            raise ToolError(
                f"tool name {self.name!r} is invalid: use 1-64 letters, digits, '_' or '-'"
            )
        doc, arg_docs = _doc_parts(fn)
        self.description = description if description is not None else doc or self.name
        self._context_param: str | None = None
        self._model: type[BaseModel] | None = None
        if input_schema is not None:
            self.input_schema = input_schema
        else:
            self._model = self._build_model(arg_docs)
            self.input_schema = _without_titles(self._model.model_json_schema())

    def _build_model(self, arg_docs: dict[str, str]) -> type[BaseModel]:
        try:
            hints = get_type_hints(self.fn, include_extras=True)
        except Exception as exc:
            raise ToolError(f"tool {self.name!r}: cannot resolve its type hints: {exc}") from exc
        fields: dict[str, Any] = {}
        for param in inspect.signature(self.fn).parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            annotation = hints.get(param.name, Any)
            if annotation is ToolContext or ToolContext in typing.get_args(annotation):
                self._context_param = param.name
                continue
            if param.kind is param.POSITIONAL_ONLY:
                raise ToolError(
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
            raise ToolError(f"tool {self.name!r}: cannot build an input schema: {exc}") from exc

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
    """A tool's return value as ``tool_result`` content: text, or content blocks as given."""
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


class Skill:
    """A local skill folder with a ``SKILL.md`` (YAML front matter: name, description).

    Its name and description go into the system prompt; the agent gets a
    ``read_skill`` tool that returns the body.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        folder = Path(path)
        file = folder / "SKILL.md" if folder.is_dir() else folder
        if not file.is_file():
            raise ConfigurationError(f"Skill({str(path)!r}): no SKILL.md found there")
        text = file.read_text(encoding="utf-8")
        meta: dict[str, str] = {}
        body = text
        if text.startswith("---"):
            _, front, body = text.split("---", 2)
            for line in front.strip().splitlines():
                key, _, value = line.partition(":")
                meta[key.strip()] = value.strip().strip("'\"")
        self.path = file
        self.name = meta.get("name") or file.parent.name
        self.description = meta.get("description", "")
        self.body = body.strip()

    def __repr__(self) -> str:
        return f"Skill({self.name!r})"


def skills_tool(skills: Sequence[Skill]) -> Tool:
    """The ``read_skill`` tool serving the bodies of local skills."""
    by_name = {s.name: s for s in skills}

    def read_skill(name: str) -> str:
        """Read the full instructions of one of your skills.

        Args:
            name: The skill's name, as listed in your instructions.
        """
        skill = by_name.get(name)
        if skill is None:
            raise ToolError(f"no skill named {name!r}; available: {sorted(by_name)}")
        return skill.body

    return Tool(read_skill)


def skills_system_text(skills: Sequence[Skill]) -> str:
    """The system-prompt section that tells the model which local skills it has."""
    lines = [f"- {s.name}: {s.description}" for s in skills]
    return (
        "You have these skills. Call the read_skill tool with a skill's name to read "
        "its full instructions before using it:\n" + "\n".join(lines)
    )


@dataclass
class _MCPTool:
    """A tool of a connected MCP server, named ``mcp__<server>__<tool>``."""

    name: str
    server: str
    remote_name: str
    description: str
    input_schema: dict[str, Any]
    call: Callable[[str, dict[str, Any]], Awaitable[Any]]
    node_type: NodeType = NodeType.MCP_CALL
    toolset: str | None = None

    def definition(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }

    async def invoke(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        text, failed = await call_mcp_tool(self, arguments)
        if failed:  # the server's own error text is what the model sees
            raise ToolFailed(text)
        return text


class MCPBridge:
    """Connects an agent's local MCP servers for one prompt and exposes their tools."""

    def __init__(self, mcps: Sequence[Any], env: Mapping[str, str]) -> None:
        self.local: list[tuple[str, Any]] = []
        self.remote: list[dict[str, Any]] = []
        self.timeouts: dict[str, float] = {}
        for item in mcps:
            self._add(item, env)
        self.tools: list[_MCPTool] = []
        self._stack = AsyncExitStack()

    def _add(self, item: Any, env: Mapping[str, str]) -> None:
        from mcp import StdioServerParameters
        from mcp.server.mcpserver import MCPServer

        if isinstance(item, MCPServer):
            self.local.append((_server_name(item.name), item))
            return
        if not isinstance(item, Mapping):
            raise ConfigurationError(
                f"mcps items must be an MCPServer or a config dict, got {type(item).__name__}"
            )
        register_mcp_secrets([item])  # first: nothing below may echo a secret
        kind = item.get("type", "stdio")
        name = item.get("name")
        if not name:
            # Name the keys only: the values may hold tokens.
            raise ConfigurationError(
                f"an MCP server config needs a 'name' (got keys {sorted(item)})"
            )
        if kind == "stdio":
            if not item.get("command"):
                raise ConfigurationError(f"stdio MCP server {name!r} needs a 'command'")
            params = StdioServerParameters(
                command=item["command"],
                args=list(item.get("args", [])),
                # The agent's env and the server's own env reach the subprocess;
                # os.environ is never modified.
                env={**env, **item.get("env", {})} or None,
                cwd=item.get("cwd"),
            )
            self.local.append((_server_name(name), params))
            self.timeouts[_server_name(name)] = float(item.get("timeout", CONNECT_TIMEOUT))
        elif kind == "url":
            if not item.get("url"):
                raise ConfigurationError(f"remote MCP server {name!r} needs a 'url'")
            remote = {k: v for k, v in item.items() if k != "type"}
            remote["type"] = "url"
            self.remote.append(remote)
        else:
            raise ConfigurationError(
                f"MCP server {name!r}: unknown type {kind!r} (use 'stdio' or 'url')"
            )

    async def __aenter__(self) -> MCPBridge:
        from mcp import Client

        try:
            for server_name, target in self.local:
                try:
                    # A server that never answers must not hang the prompt forever.
                    async with asyncio.timeout(self.timeouts.get(server_name, CONNECT_TIMEOUT)):
                        client = await self._stack.enter_async_context(Client(target))
                        listed = await client.list_tools()
                except asyncio.CancelledError:
                    raise
                except BaseException as exc:
                    cause = _leaf(exc)
                    raise ToolError(
                        f"MCP server {server_name!r} failed to start: {type(cause).__name__}: {cause}"
                        if not isinstance(cause, TimeoutError)
                        else f"MCP server {server_name!r} did not answer within "
                        f"{self.timeouts.get(server_name, CONNECT_TIMEOUT)}s"
                    ) from exc
                for tool in listed.tools:
                    self.tools.append(
                        _MCPTool(
                            name=_mcp_tool_name(server_name, tool.name),
                            server=server_name,
                            remote_name=tool.name,
                            description=tool.description or tool.name,
                            input_schema=dict(tool.input_schema),
                            call=client.call_tool,
                        )
                    )
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()


def register_mcp_secrets(mcps: Sequence[Any]) -> None:
    """Remember the tokens and env values of MCP configs as secrets, to scrub them everywhere."""
    for item in mcps:
        if isinstance(item, Mapping):
            for secret in [item.get("authorization_token"), *dict(item.get("env") or {}).values()]:
                if secret:
                    register_secret(str(secret))


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _mcp_tool_name(server: str, tool: str) -> str:
    """``mcp__<server>__<tool>``, made valid for the API (letters, digits, _ and -; 64 max)."""
    name = f"mcp__{server}__{re.sub(r'[^a-zA-Z0-9_-]', '_', tool)}"
    if len(name) > 64:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        name = f"{name[:55]}_{digest}"
    return name


def _server_name(name: str) -> str:
    cleaned = re.sub(r"[^a-zA-Z0-9_-]", "_", name)
    return cleaned or "server"


async def call_mcp_tool(tool: _MCPTool, arguments: dict[str, Any]) -> tuple[str, bool]:
    """Call an MCP tool; returns (text content, is_error)."""
    result = await tool.call(tool.remote_name, arguments)
    parts: list[str] = []
    for block in result.content:
        text = getattr(block, "text", None)
        parts.append(text if isinstance(text, str) else block.model_dump_json())
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content))
    return "\n".join(parts), bool(result.is_error)
