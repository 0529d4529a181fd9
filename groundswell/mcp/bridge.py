"""Local MCP servers (stdio or in-process) as tools, and remote ones for the API's MCP connector.

`MCPBridge` connects an agent's local servers for one prompt (or takes them
from an `groundswell.mcp.session.MCPSession`, which keeps them running across
prompts) and exposes each of their tools as a `groundswell.tools.tool.ToolHandler`
named ``mcp__<server>__<tool>`` (`groundswell.mcp.tools`). Every server start
is an ``mcp_connect`` node; a stdio server's stderr goes to that node and to
the ``groundswell.mcp`` logger at DEBUG, never to the terminal. Start-ups and
calls have deadlines (`groundswell.mcp.calls`). Remote servers (``{"type": "url", ...}``) are
kept aside for the API's MCP connector (their request fields, and the
config checks, are `groundswell.mcp.config`'s, re-exported here).
`check_mcps` validates ``mcps=`` when an agent or prompt is built.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import logging
import os
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from ..errors import ConfigurationError, ToolError
from ..model.settings_check import check_api_item
from ..runtime.context import current_frame
from ..scrubbing.scrubber import scrub_argv
from ..scrubbing.serialize import scrub
from ..tools.tool import ToolFailed
from ..tree.tree import EventNode, EventTree, NodeStatus, NodeType
from .calls import (
    STOP_WAIT,
    CallTimedOut,
    finish_in_background,
    process_of,
    reap,
    stop,
    within,
)
from .client import ClientOptions, client_options
from .config import (
    CALL_TIMEOUT,
    CONNECT_TIMEOUT,
    LEGACY_MCP_CLIENT_BETA,
    MCP_CLIENT_BETA,
    check_config_keys,
    check_stdio,
    check_toolsets,
    default_call_timeout,
    register_mcp_secrets,
    remote_request,
)
from .tools import MCPTool, call_mcp_tool, call_record, mcp_tool_name

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

# Lines of a server's stderr kept for its mcp_connect node and its start-up errors.
_STDERR_LINES = 20


@dataclass(frozen=True)
class LocalServer:
    """A local MCP server of a prompt: its name, what to connect to, and its start-up time limit.

    ``key`` tells configs apart: a session runs one server per key, whatever
    name a prompt gives it.
    """

    name: str
    # An MCPServer, or mcp's StdioServerParameters; kept out of repr: its args may hold a token.
    target: Any = field(repr=False)
    timeout: float
    key: tuple[Any, ...] = field(repr=False)
    #: What the client offers the server (elicitation, sampling, roots): `groundswell.mcp.client`.
    client: ClientOptions = field(default_factory=ClientOptions, repr=False, compare=False)
    #: Seconds one tool call may take (config key ``call_timeout``).
    call_timeout: float = field(default=CALL_TIMEOUT, compare=False)

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
                    # DEBUG: a server's chatter is never shown unless asked for.
                    logger.debug("MCP server %r: %s", self.server, line)

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
        self._deadline = loop.time() + server.timeout  # `wait` keeps it, whatever the start does
        # The stdio client, and its subprocess: a server that leaves a call unanswered
        # (`_abandoned`) is stopped by signal rather than waited for (`groundswell.mcp.calls`).
        self._transport: Any = None
        self._process: Any = None
        self._abandoned = False
        self._task = loop.create_task(self._serve(), context=contextvars.Context())
        self._task.add_done_callback(lambda _: reap(self._process))

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
        from .capabilities import client_for
        from .resources import list_tools

        server, errlog = self.server, self._stderr
        try:
            async with contextlib.AsyncExitStack() as stack:
                try:
                    # A server that never answers must not hang the prompt forever.
                    async with asyncio.timeout(server.timeout):
                        if errlog is not None:
                            from mcp.client.stdio import stdio_client

                            target: Any = stdio_client(server.target, errlog=errlog.file)
                            self._transport = target
                        else:
                            target = server.target
                        client = await stack.enter_async_context(
                            client_for(target, server.name, server.client)
                        )
                        if errlog is not None:
                            errlog.release()
                        listed = await list_tools(client)  # its resources and prompts too
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
            fix = (
                f"raise 'timeout' (seconds) in the config of MCP server {server.name!r}"
                if server.transport == "stdio"
                else "make the server's start (its lifespan) quicker"
            )
            message = (
                f"MCP server {server.name!r} did not answer within {server.timeout}s; "
                f"if it needs longer to start, {fix}"
            )
        else:
            message = f"MCP server {server.name!r} failed to start: {type(cause).__name__}: {cause}"
        if self.stderr:
            message += "; its stderr ended with:\n" + "\n".join(self.stderr[-5:])
        error = ToolError(message)
        error.__cause__ = exc
        return error

    async def call_tool(
        self, name: str, arguments: dict[str, Any], timeout: float | None = None
    ) -> Any:
        """Call a tool of the server within ``timeout`` seconds (`CallTimedOut` past them);
        a server found stopped is closed, for a later start."""
        client, _ = self._ready.result()
        try:
            return await within(client.call_tool(name, arguments), timeout)
        except (CallTimedOut, asyncio.CancelledError):
            self._abandoned = True  # the server may still be at it: stopped at once on close
            raise
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
        """The connected client and its tool listing (raises `ToolError` if it did not start
        within the server's ``timeout``)."""
        # Not cancelled by its waiters: a prompt that stops waiting does not stop a start
        # others may share. At the deadline the start fails at once (`_give_up`).
        left = self._deadline - asyncio.get_running_loop().time()
        done, _ = await asyncio.wait({self._ready}, timeout=max(left, 0.0))
        if not done:
            self._give_up()
            await asyncio.wait({self._task}, timeout=STOP_WAIT)  # its server exits (SIGTERM)
        ready = await asyncio.shield(self._ready)
        self._grab_process()
        return ready

    def _give_up(self) -> None:
        """The start passed its deadline: it fails now, and its server is stopped behind it
        (the ``mcp`` client would first wait seconds for it to exit)."""
        if self._ready.done():
            return
        self._abandoned = True
        self._ready.set_exception(self._start_error(TimeoutError()))
        self._grab_process()
        stop(self._process)
        self._task.cancel()

    def _grab_process(self) -> None:
        if self._process is None and self._transport is not None:
            self._process = process_of(self._transport)

    async def close(self) -> None:
        """Stop the server (a stdio one exits) and wait until it has.

        A server left with a call unanswered, or still starting, gets SIGTERM at
        once and `STOP_WAIT` seconds to go; the rest of its shutdown goes on in
        the background.
        """
        self._grab_process()
        self._closing.set()
        if not self._ready.done():
            self._abandoned = True  # cut short while starting: not worth waiting for either
            self._task.cancel()
        try:
            if self._abandoned:
                stop(self._process)
                await asyncio.wait({self._task}, timeout=STOP_WAIT)
                if not self._task.done():
                    finish_in_background(self._task)
                    return
            await asyncio.shield(self._task)
        except asyncio.CancelledError:
            # The caller itself was cancelled (the task may have ended meanwhile, which must
            # not swallow that), or the server's task was: that one is ours to absorb.
            current = asyncio.current_task()
            if not self._task.done() or (current is not None and current.cancelling() > 0):
                raise
        except Exception as exc:
            logger.warning("MCP server %r did not close cleanly: %s", self.server.name, exc)


class MCPBridge:
    """Connects a prompt's local MCP servers and exposes their tools; keeps remote ones aside.

    With a ``session`` (an `groundswell.mcp.session.MCPSession`), servers come
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
        self.tools: list[MCPTool] = []
        self.session = session
        self._owned: list[MCPConnection] = []
        self._held: Any = None  # the session while this bridge uses its servers

    def _add(self, item: Any, env: Mapping[str, str]) -> None:
        from mcp import StdioServerParameters
        from mcp.server.mcpserver import MCPServer

        if isinstance(item, MCPServer):
            self.local.append(
                LocalServer(
                    _server_name(item.name),
                    item,
                    CONNECT_TIMEOUT,
                    ("in_process", item),
                    call_timeout=default_call_timeout(),
                )
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
            check_config_keys(name, kind, item)
        if kind == "stdio":
            check_stdio(name, item)
            options = client_options(name, item)
            params = StdioServerParameters(
                command=item["command"],
                args=list(item.get("args", [])),
                # The agent's env and the server's own env reach the subprocess;
                # os.environ is never modified.
                env={**env, **(item.get("env") or {})} or None,
                cwd=os.fspath(item["cwd"]) if item.get("cwd") is not None else None,
            )
            timeout = float(item.get("timeout", CONNECT_TIMEOUT))
            calls = float(item.get("call_timeout") or default_call_timeout())
            key = ("stdio", params.model_dump_json(), options.key)
            self.local.append(LocalServer(_server_name(name), params, timeout, key, options, calls))
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
                    # The recorded copy: the server runs with its real arguments.
                    args = scrub_argv(server.target.args)
                    payload["command"] = [scrub(server.target.command), *args]
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
            client, listed = outcome
            if tree is not None and node is not None:  # where what no one call owns is recorded
                client.link.connect = (tree, node)
            names = [mcp_tool_name(server.name, tool.name) for tool in listed.tools]
            output: dict[str, Any] = {"tools": names}
            if connection.stderr:
                output["stderr"] = connection.stderr
            _end_connect(tree, node, output)
            for tool, name in zip(listed.tools, names, strict=True):
                self.tools.append(
                    MCPTool(
                        name=name,
                        server=server.name,
                        remote_name=tool.name,
                        description=tool.description or tool.name,
                        input_schema=dict(tool.input_schema),
                        call=connection.call_tool,
                        call_timeout=server.call_timeout,
                        mcp=call_record(
                            server.name, tool.name, server.transport, server.call_timeout, client
                        ),
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


def _server_name(name: str) -> str:
    cleaned = re.sub(r"[^a-zA-Z0-9_-]", "_", name)
    return cleaned or "server"
