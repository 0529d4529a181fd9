"""Local MCP servers (stdio or in-process) as tools, through the ``mcp`` client.

`MCPBridge` connects an agent's servers for one prompt and exposes each of
their tools as a `groundswell.tools.ToolHandler` named
``mcp__<server>__<tool>``; remote servers (``{"type": "url", ...}``) are kept
aside for the API's MCP connector. `check_mcps` validates ``mcps=`` when an
agent or prompt is built, and `register_mcp_secrets` keeps their tokens and
env values out of every output.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from ._serialize import register_secret
from .errors import ConfigurationError, ToolError
from .settings_check import check_api_item
from .tools import ToolContext, ToolFailed
from .tree import NodeType

__all__ = ["CONNECT_TIMEOUT", "MCPBridge", "call_mcp_tool", "check_mcps", "register_mcp_secrets"]

# Seconds a local MCP server gets to start and list its tools (config key "timeout").
CONNECT_TIMEOUT = 30.0


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
        if not isinstance(name, str):
            raise ConfigurationError(f"an MCP server's 'name' must be a string, got {name!r:.40}")
        if kind == "stdio":
            _check_stdio(name, item)
            params = StdioServerParameters(
                command=item["command"],
                args=list(item.get("args", [])),
                # The agent's env and the server's own env reach the subprocess;
                # os.environ is never modified.
                env={**env, **(item.get("env") or {})} or None,
                cwd=item.get("cwd"),
            )
            self.local.append((_server_name(name), params))
            self.timeouts[_server_name(name)] = float(item.get("timeout", CONNECT_TIMEOUT))
        elif kind == "url":
            if not item.get("url"):
                raise ConfigurationError(f"remote MCP server {name!r} needs a 'url'")
            remote = {k: v for k, v in item.items() if k != "type"}
            remote["type"] = "url"
            # Keys only in the message: the values may hold tokens.
            shown = f"MCP server {name!r} (keys {sorted(remote)})"
            check_api_item("mcp_servers", remote, shown, "config", show_value=False)
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


def _check_stdio(name: str, item: Mapping[str, Any]) -> None:
    """A stdio MCP server config: ``command`` a string, ``args`` strings, ``env`` string pairs."""
    command, args, env = item.get("command"), item.get("args", []), item.get("env") or {}
    timeout = item.get("timeout", CONNECT_TIMEOUT)
    if not isinstance(command, str) or not command:
        raise ConfigurationError(f"stdio MCP server {name!r} needs a 'command' (a string)")
    if not isinstance(args, list | tuple) or not all(isinstance(a, str) for a in args):
        raise ConfigurationError(f"stdio MCP server {name!r}: 'args' must be a list of strings")
    if not isinstance(env, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise ConfigurationError(f"stdio MCP server {name!r}: 'env' must map strings to strings")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ConfigurationError(
            f"stdio MCP server {name!r}: 'timeout' must be seconds > 0, got {timeout!r:.40}"
        )


def check_mcps(items: Any, env: Mapping[str, str], owner: str) -> list[Any]:
    """``mcps=`` as a list, each server config checked (nothing is started here)."""
    if items is None:
        return []
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, Sequence):
        raise ConfigurationError(
            f"{owner}: mcps must be a list of MCP servers (an MCPServer, or a "
            f"{{'type': 'stdio'|'url', 'name': ...}} config), got {type(items).__name__}"
        )
    try:
        MCPBridge(items, env)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{owner}: mcps: {exc}") from None
    return list(items)


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
