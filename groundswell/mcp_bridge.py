"""Local MCP servers (stdio or in-process) as tools, and remote ones for the API's MCP connector.

`MCPBridge` connects an agent's local servers for one prompt (or takes them
from an `groundswell.mcp_session.MCPSession`, which keeps them running across
prompts) and exposes each of their tools as a `groundswell.tools.ToolHandler`
named ``mcp__<server>__<tool>``. Every server start is an ``mcp_connect`` node;
a stdio server's stderr goes to that node and to the ``groundswell.mcp``
logger, never to the terminal. Remote servers (``{"type": "url", ...}``) are
kept aside for the API's MCP connector: `remote_request` gives the request
fields the MCP-client beta takes. `check_mcps` validates ``mcps=`` when an
agent or prompt is built, and `register_mcp_secrets` keeps their tokens and
env values out of every output.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import difflib
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from ._serialize import register_secret, scrub
from .errors import ConfigurationError, ToolError
from .run_context import current_frame
from .settings_check import check_api_item
from .tools import ToolContext, ToolFailed
from .tree import EventNode, EventTree, NodeStatus, NodeType

__all__ = [
    "CONNECT_TIMEOUT",
    "LEGACY_MCP_CLIENT_BETA",
    "MCP_CLIENT_BETA",
    "LocalServer",
    "MCPBridge",
    "MCPConnection",
    "call_mcp_tool",
    "check_mcps",
    "check_toolsets",
    "register_mcp_secrets",
    "remote_request",
]

logger = logging.getLogger("groundswell.mcp")

# Seconds a local MCP server gets to start and list its tools (config key "timeout").
CONNECT_TIMEOUT = 30.0
#: The MCP-client beta remote servers are sent with (``mcp_servers`` plus an
#: ``mcp_toolset`` entry in ``tools`` for each), unless ``betas`` names another.
MCP_CLIENT_BETA = "mcp-client-2025-11-20"
#: The first MCP-client beta: no ``mcp_toolset``; ``tool_configuration`` on the server.
LEGACY_MCP_CLIENT_BETA = "mcp-client-2025-04-04"
# Lines of a server's stderr kept for its mcp_connect node and its start-up errors.
_STDERR_LINES = 20


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


@dataclass(frozen=True)
class LocalServer:
    """A local MCP server of a prompt: its name, what to connect to, and its start-up time limit.

    ``key`` tells configs apart: a session runs one server per key, whatever
    name a prompt gives it.
    """

    name: str
    target: Any  # an MCPServer, or mcp's StdioServerParameters
    timeout: float
    key: tuple[Any, ...]

    @property
    def transport(self) -> str:
        return "stdio" if self.key[0] == "stdio" else "in_process"


class _Stderr:
    """A stdio server's stderr: a pipe read by a thread, into the log and a short tail."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.lines: collections.deque[str] = collections.deque(maxlen=_STDERR_LINES)
        read_end, write_end = os.pipe()
        #: What the subprocess gets as its stderr.
        self.file: TextIO = os.fdopen(write_end, "w")
        self._thread = threading.Thread(
            target=self._read, args=(read_end,), name=f"mcp-stderr-{server}", daemon=True
        )
        self._thread.start()

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as pipe:
            for raw in pipe:
                line = scrub(raw.decode("utf-8", errors="replace").rstrip())
                if line:
                    self.lines.append(line)
                    logger.info("MCP server %r: %s", self.server, line)

    def release(self) -> None:
        """Close this process's copy of the pipe (once the subprocess holds its own)."""
        if not self.file.closed:
            self.file.close()

    async def drain(self, timeout: float = 1.0) -> None:
        """Wait (a little) until the server's last lines are read: it has exited."""
        self.release()
        await asyncio.to_thread(self._thread.join, timeout)


class MCPConnection:
    """One local MCP server, connected by a task of its own and kept until `close`.

    Its own task (in an empty context) owns the ``mcp`` client, so that any
    prompt's task may use it and another may close it. `wait` gives the
    client and its tool listing, or raises `ToolError` saying why the server
    did not start.
    """

    def __init__(self, server: LocalServer) -> None:
        self.server = server
        loop = asyncio.get_running_loop()
        self._ready: asyncio.Future[tuple[Any, Any]] = loop.create_future()
        # Read even when nobody waits (a cancelled prompt): never "exception never retrieved".
        self._ready.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._closing = asyncio.Event()
        self._stderr = _Stderr(server.name) if server.transport == "stdio" else None
        self._task = loop.create_task(self._serve(), context=contextvars.Context())

    @property
    def stderr(self) -> list[str]:
        """The last lines the server wrote to its stderr (empty for an in-process server)."""
        return list(self._stderr.lines) if self._stderr is not None else []

    @property
    def alive(self) -> bool:
        """False once the server failed to start, stopped, or was closed."""
        if self._task.done() or self._closing.is_set():
            return False
        ready = self._ready
        return not ready.done() or (not ready.cancelled() and ready.exception() is None)

    async def _serve(self) -> None:
        from mcp import Client

        server, errlog = self.server, self._stderr
        try:
            async with contextlib.AsyncExitStack() as stack:
                try:
                    # A server that never answers must not hang the prompt forever.
                    async with asyncio.timeout(server.timeout):
                        if errlog is not None:
                            from mcp.client.stdio import stdio_client

                            target: Any = stdio_client(server.target, errlog=errlog.file)
                        else:
                            target = server.target
                        client = await stack.enter_async_context(Client(target))
                        if errlog is not None:
                            errlog.release()
                        listed = await client.list_tools()
                except asyncio.CancelledError:
                    raise
                except BaseException as exc:
                    with contextlib.suppress(Exception):  # the start's error is the one to tell
                        await stack.aclose()  # the process is gone: its last words are readable
                    if errlog is not None:
                        await errlog.drain()
                    self._ready.set_exception(self._start_error(exc))
                    return
                self._ready.set_result((client, listed))
                await self._closing.wait()
        except asyncio.CancelledError:
            if not self._ready.done():
                self._ready.cancel()
            raise
        except Exception as exc:  # the server stopped or broke while in use
            logger.warning(
                "MCP server %r stopped: %s: %s", server.name, type(_leaf(exc)).__name__, _leaf(exc)
            )
        finally:
            if errlog is not None:
                errlog.release()

    def _start_error(self, exc: BaseException) -> ToolError:
        server, cause = self.server, _leaf(exc)
        if isinstance(cause, TimeoutError):
            message = f"MCP server {server.name!r} did not answer within {server.timeout}s"
        else:
            message = f"MCP server {server.name!r} failed to start: {type(cause).__name__}: {cause}"
        if self.stderr:
            message += "; its stderr ended with:\n" + "\n".join(self.stderr[-5:])
        error = ToolError(message)
        error.__cause__ = exc
        return error

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """Call a tool of the server; a server found stopped is closed, for a later start."""
        client, _ = self._ready.result()
        try:
            return await client.call_tool(name, arguments)
        except Exception as exc:
            if not _connection_lost(exc):
                raise
            self._closing.set()  # not alive: a session starts the server again next time
            if self._stderr is not None:
                await self._stderr.drain(0.2)
            message = f"MCP server {self.server.name!r} has stopped ({type(exc).__name__}: {exc})"
            if self.stderr:
                message += "; its stderr ended with:\n" + "\n".join(self.stderr[-5:])
            raise ToolFailed(message) from exc

    async def wait(self) -> tuple[Any, Any]:
        """The connected client and its tool listing (raises `ToolError` if it did not start)."""
        # Shielded: a prompt that stops waiting does not stop a start others may share.
        return await asyncio.shield(self._ready)

    async def close(self) -> None:
        """Stop the server (a stdio one exits) and wait until it has."""
        self._closing.set()
        if not self._ready.done():
            self._task.cancel()
        try:
            await asyncio.shield(self._task)
        except asyncio.CancelledError:
            if not self._task.done():  # the caller itself was cancelled
                raise
        except Exception as exc:
            logger.warning("MCP server %r did not close cleanly: %s", self.server.name, exc)


class MCPBridge:
    """Connects a prompt's local MCP servers and exposes their tools; keeps remote ones aside.

    With a ``session`` (an `groundswell.mcp_session.MCPSession`), servers come
    from it (started on first use, kept until it closes), and the bridge holds
    the session until it exits, so that the servers outlive the block for a
    prompt still running; a session already closed is not used. Otherwise the
    servers are started here and stopped when the bridge exits.
    """

    def __init__(self, mcps: Sequence[Any], env: Mapping[str, str], session: Any = None) -> None:
        self.local: list[LocalServer] = []
        self.remote: list[dict[str, Any]] = []
        for item in mcps:
            self._add(item, env)
        self.tools: list[_MCPTool] = []
        self.session = session
        self._owned: list[MCPConnection] = []
        self._held: Any = None  # the session while this bridge uses its servers

    def _add(self, item: Any, env: Mapping[str, str]) -> None:
        from mcp import StdioServerParameters
        from mcp.server.mcpserver import MCPServer

        if isinstance(item, MCPServer):
            self.local.append(
                LocalServer(_server_name(item.name), item, CONNECT_TIMEOUT, ("in_process", item))
            )
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
        if "type" not in item and "url" in item:
            raise ConfigurationError(
                f"MCP server {name!r} has a 'url' but no 'type': add 'type': 'url' for a remote "
                f"server (a config without 'type' is a stdio server, which needs a 'command')"
            )
        if kind in ("stdio", "url"):
            _check_keys(name, kind, item)
        if kind == "stdio":
            _check_stdio(name, item)
            params = StdioServerParameters(
                command=item["command"],
                args=list(item.get("args", [])),
                # The agent's env and the server's own env reach the subprocess;
                # os.environ is never modified.
                env={**env, **(item.get("env") or {})} or None,
                cwd=os.fspath(item["cwd"]) if item.get("cwd") is not None else None,
            )
            timeout = float(item.get("timeout", CONNECT_TIMEOUT))
            key = ("stdio", params.model_dump_json())
            self.local.append(LocalServer(_server_name(name), params, timeout, key))
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
        # A session whose block has ended takes no new prompt: this one starts its own servers.
        session = self.session if self.local and self.session and self.session.acquire() else None
        self._held = session
        frame = current_frame()
        tree = frame.tree if frame is not None else None
        starting: list[tuple[LocalServer, MCPConnection, EventNode | None]] = []
        for server in self.local:
            if session is not None:
                connection, fresh = session.connection(server)
            else:
                connection, fresh = MCPConnection(server), True
                self._owned.append(connection)
            node = None
            if fresh and frame is not None and tree is not None:
                payload: dict[str, Any] = {"transport": server.transport}
                if server.transport == "stdio":
                    payload["command"] = [server.target.command, *server.target.args]
                if session is not None:
                    payload["session"] = session.label
                node = tree.start_node(
                    NodeType.MCP_CONNECT, server.name, frame.node, payload=payload
                )
            starting.append((server, connection, node))
        try:
            # Servers start side by side; each start is its own node.
            outcomes = await asyncio.gather(
                *(c.wait() for _, c, _ in starting), return_exceptions=True
            )
        except BaseException as exc:  # cancelled while they started
            for _, _, node in starting:
                _end_connect(tree, node, exc)
            await self._finish()
            raise
        failure: BaseException | None = None
        for (server, connection, node), outcome in zip(starting, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                _end_connect(tree, node, outcome)
                if session is not None:
                    session.forget(connection)
                failure = failure or outcome
                continue
            _, listed = outcome
            names = [_mcp_tool_name(server.name, tool.name) for tool in listed.tools]
            output: dict[str, Any] = {"tools": names}
            if connection.stderr:
                output["stderr"] = connection.stderr
            _end_connect(tree, node, output)
            for tool, name in zip(listed.tools, names, strict=True):
                self.tools.append(
                    _MCPTool(
                        name=name,
                        server=server.name,
                        remote_name=tool.name,
                        description=tool.description or tool.name,
                        input_schema=dict(tool.input_schema),
                        call=connection.call_tool,
                    )
                )
        if failure is not None:
            await self._finish()
            raise failure
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._finish()

    async def _finish(self) -> None:
        """Stop the servers this bridge started, and let go of the session's."""
        owned, self._owned = self._owned, []
        held, self._held = self._held, None
        try:
            if owned:
                await asyncio.gather(*(c.close() for c in owned))
        finally:
            if held is not None:
                await held.release()


def _end_connect(tree: EventTree | None, node: EventNode | None, outcome: Any) -> None:
    """Finish an ``mcp_connect`` node: its tools (and stderr), or why the server did not start."""
    if tree is None or node is None:
        return
    if isinstance(outcome, BaseException):
        tree.end_node_after(node, outcome)
    else:
        tree.end_node(node, NodeStatus.COMPLETED, output=outcome, record_output=True)


def check_toolsets(
    tools: Iterable[Any],
    mcps: Iterable[Any],
    owner: str,
    betas: Sequence[str] | None = None,
) -> None:
    """Every ``mcp_toolset`` in ``tools`` must name a remote server of ``mcps``.

    And the request's MCP-client beta must take toolsets: `LEGACY_MCP_CLIENT_BETA`
    does not. Raises `ConfigurationError` otherwise: the API refuses such a request.
    """
    remote = {m.get("name") for m in mcps if isinstance(m, Mapping) and m.get("type") == "url"}
    legacy = _mcp_beta(betas) == LEGACY_MCP_CLIENT_BETA
    for i, tool in enumerate(tools):
        if not isinstance(tool, Mapping) or tool.get("type") != "mcp_toolset":
            continue
        if legacy:
            raise ConfigurationError(
                f"{owner}: tools[{i}]: mcp_toolset needs the MCP-client beta {MCP_CLIENT_BETA!r} "
                f"(or a later one), but betas names {LEGACY_MCP_CLIENT_BETA!r}, which has no "
                f"toolsets; drop {LEGACY_MCP_CLIENT_BETA!r} from betas (Groundswell then adds "
                f"{MCP_CLIENT_BETA!r}), or drop the toolset and give the server a "
                f"'tool_configuration' instead"
            )
        server = tool.get("mcp_server_name")
        if server not in remote:
            known = ", ".join(repr(n) for n in sorted(map(str, remote))) or "none"
            raise ConfigurationError(
                f"{owner}: tools[{i}]: mcp_toolset names the MCP server {server!r}, which is not a "
                f"remote server of this prompt (remote servers in mcps: {known}); add "
                f"{{'type': 'url', 'name': {server!r}, 'url': ...}} to mcps, or drop the toolset"
            )


def remote_request(
    remote: Sequence[Mapping[str, Any]],
    betas: Sequence[str] | None,
    tools: Sequence[Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """The request's ``mcp_servers``, the ``mcp_toolset`` tools to add, and its ``betas``.

    Remote servers need an MCP-client beta: `MCP_CLIENT_BETA` is added unless
    ``betas`` names one. Under it (and later ones) each server gets an
    ``mcp_toolset`` entry in ``tools`` (unless ``tools`` has one for it
    already), and a server's ``tool_configuration`` (``enabled``,
    ``allowed_tools``) becomes that toolset's ``default_config`` and
    ``configs``. Under `LEGACY_MCP_CLIENT_BETA` servers are sent as given.
    """
    chosen = _mcp_beta(betas)
    sent_betas = list(betas or ()) if chosen else [*(betas or ()), MCP_CLIENT_BETA]
    if chosen == LEGACY_MCP_CLIENT_BETA:
        return [dict(s) for s in remote], [], sent_betas
    configured = {t.get("mcp_server_name") for t in tools if t.get("type") == "mcp_toolset"}
    servers: list[dict[str, Any]] = []
    toolsets: list[dict[str, Any]] = []
    for item in remote:
        server = {k: v for k, v in item.items() if k != "tool_configuration"}
        servers.append(server)
        if server["name"] in configured:
            continue
        toolset: dict[str, Any] = {"type": "mcp_toolset", "mcp_server_name": server["name"]}
        config = item.get("tool_configuration") or {}
        allowed = config.get("allowed_tools")
        if config.get("enabled") is False:
            toolset["default_config"] = {"enabled": False}
        elif allowed is not None:
            toolset["default_config"] = {"enabled": False}
            toolset["configs"] = {name: {"enabled": True} for name in allowed}
        toolsets.append(toolset)
    return servers, toolsets, sent_betas


def _mcp_beta(betas: Sequence[str] | None) -> str | None:
    """The MCP-client beta ``betas`` names (the last one, if several), if any."""
    chosen = [str(b) for b in betas or () if str(b).startswith("mcp-client-")]
    return chosen[-1] if chosen else None


# The keys of a stdio server config: what `MCPBridge` reads (a remote server's are the SDK's).
_STDIO_KEYS = frozenset({"type", "name", "command", "args", "env", "cwd", "timeout"})
# Spellings difflib does not bring close enough to the key meant.
_ALIASES = {
    "cmd": "command",
    "program": "command",
    "argv": "args",
    "arguments": "args",
    "environment": "env",
    "workdir": "cwd",
    "working_dir": "cwd",
    "directory": "cwd",
    "token": "authorization_token",
    "auth_token": "authorization_token",
}


@functools.cache
def _url_keys() -> frozenset[str]:
    """The keys of a remote server config: the SDK's server type's, and ``tool_configuration``."""
    from anthropic.types.beta import BetaRequestMCPServerURLDefinitionParam as Server

    # tool_configuration is on the type today; Groundswell moves it to the toolset either way.
    return Server.__required_keys__ | Server.__optional_keys__ | {"tool_configuration"}


def _check_keys(name: str, kind: str, item: Mapping[str, Any]) -> None:
    """Refuse keys a ``kind`` config does not take: a typo would be dropped or sent to the API."""
    known = _STDIO_KEYS if kind == "stdio" else _url_keys()
    unknown = [k for k in item if k not in known]
    if not unknown:
        return
    # Keys only, never values: a misspelled token key was not registered as a secret.
    told = [f"{key!r:.40}{_key_hint(key, kind, known)}" for key in unknown]
    what = "stdio" if kind == "stdio" else "remote"
    raise ConfigurationError(
        f"{what} MCP server {name!r}: unknown key{'s' * (len(told) > 1)} {', '.join(told)}; "
        f"a {what} server takes {', '.join(repr(k) for k in sorted(known))}"
    )


def _key_hint(key: Any, kind: str, known: frozenset[str]) -> str:
    if not isinstance(key, str):
        return ""
    other = _url_keys() if kind == "stdio" else _STDIO_KEYS
    lowered = key.lower()
    guess = _ALIASES.get(lowered) if _ALIASES.get(lowered) in known else None
    # "enviroment" is far from "env" by difflib's measure, but starts with it.
    guess = guess or next(
        (k for k in sorted(known, key=len, reverse=True) if len(k) >= 3 and lowered.startswith(k)),
        None,
    )
    if guess is None:
        close = difflib.get_close_matches(lowered, sorted(known), n=1, cutoff=0.6)
        guess = close[0] if close else None
    if guess is not None and guess != key:
        return f" (did you mean {guess!r}?)"
    if key in other:
        if kind == "stdio":
            return " (a remote server's key: set 'type': 'url' for one)"
        return " (a stdio server's key: set 'type': 'stdio' for one)"
    return ""


def _check_stdio(name: str, item: Mapping[str, Any]) -> None:
    """A stdio MCP server config: ``command`` a string, ``args`` strings, ``env`` string pairs."""
    command, args, env = item.get("command"), item.get("args", []), item.get("env") or {}
    timeout, cwd = item.get("timeout", CONNECT_TIMEOUT), item.get("cwd")
    if isinstance(command, list | tuple) and command and isinstance(command[0], str):
        # Only the program is shown: arguments may hold a token.
        raise ConfigurationError(
            f"stdio MCP server {name!r}: 'command' must be a string, got a "
            f"{type(command).__name__}; 'command' is the program, put its arguments in 'args': "
            f"{{'command': {command[0]!r}, 'args': [...]}}"
        )
    if not isinstance(command, str) or not command:
        raise ConfigurationError(f"stdio MCP server {name!r} needs a 'command' (a string)")
    program = _program_of(command, env.get("PATH") if isinstance(env, Mapping) else None)
    if program is not None:
        raise ConfigurationError(
            f"stdio MCP server {name!r}: 'command' holds a program and its arguments; 'command' "
            f"is the program, put its arguments in 'args': {{'command': {program!r}, "
            f"'args': [...]}}"
        )
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
    if cwd is not None and not isinstance(cwd, str | os.PathLike):
        raise ConfigurationError(
            f"stdio MCP server {name!r}: 'cwd' must be a directory path, got {type(cwd).__name__}"
        )


def _program_of(command: str, path: Any) -> str | None:
    """The program of a ``command`` that holds arguments too (``"uvx mcp-server-time"``), else None.

    Only when the whole string is no program and its first word is one: a
    path with a space in it stays a command.
    """
    first = command.split(maxsplit=1)[0] if command.strip() else ""
    if first == command.strip() or os.path.exists(command):
        return None
    search = path if isinstance(path, str) else None
    if shutil.which(command, path=search) is None and shutil.which(first, path=search):
        return first
    return None


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


_CLOSED_STREAM = frozenset({"ClosedResourceError", "BrokenResourceError", "EndOfStream"})


def _connection_lost(exc: BaseException) -> bool:
    """True when a call failed because the connection to the server is gone."""
    from mcp.shared.exceptions import MCPError
    from mcp.types import CONNECTION_CLOSED

    if isinstance(exc, MCPError):
        return bool(exc.error.code == CONNECTION_CLOSED)
    # The streams under the session (anyio's, named so as not to import anyio here).
    return type(exc).__module__.startswith("anyio") and type(exc).__name__ in _CLOSED_STREAM


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
