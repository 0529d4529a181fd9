"""MCP sessions: an agent's local MCP servers kept running across prompts.

``async with agent:`` opens a session for ``agent``: every prompt of that
agent inside the block (and in tasks the block starts) takes its local MCP
servers from the session, which starts each server (one per config) on the
first prompt that needs it and stops them all when the block ends. Prompts
outside the block start and stop their servers themselves, as always. The
session lives on a context variable, so only code inside the block sees it.

A prompt that is still running when the block ends (a task the block
started) keeps the servers it took: leaving the block stops taking prompts
and stops the servers at once if no prompt holds them, else the last prompt
to finish stops them. Leaving never waits for those prompts, so a block that
awaits such a task only after it ends cannot deadlock.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError
from .bridge import LocalServer, MCPConnection

__all__ = ["MCPSession", "enter_session", "exit_session", "session_for"]


class MCPSession:
    """Local MCP servers shared by the prompts of one ``async with agent:`` block.

    A prompt counts itself in with `acquire`, takes each server with
    `connection` (started on first use; a server that failed to start or has
    stopped is started again by the next prompt that needs it) and counts
    itself out with `release`. Prompts running at once share a server (their
    tool calls are separate requests on one MCP connection). `aclose` (the
    block's end) refuses new prompts and stops the servers once no prompt
    holds them.
    """

    def __init__(self, label: str) -> None:
        #: Who the session is for (the agent's name), recorded on ``mcp_connect`` nodes.
        self.label = label
        #: True once the block has ended: prompts that start now do not use the session.
        self.closed = False
        self._live: dict[tuple[Any, ...], MCPConnection] = {}
        self._users = 0

    def acquire(self) -> bool:
        """Count a prompt as using the session's servers; False (not counted) once closed."""
        if self.closed:
            return False
        self._users += 1
        return True

    async def release(self) -> None:
        """A prompt is done with the servers; the last one after the block's end stops them."""
        self._users -= 1
        if self.closed and self._users == 0:
            await self._stop()

    def connection(self, server: LocalServer) -> tuple[MCPConnection, bool]:
        """The session's connection to ``server`` and whether it starts now (for a prompt holding it)."""
        if self._users == 0:
            raise ConfigurationError(
                f"the MCP session of {self.label!r} is not held by a prompt: call acquire() first"
                + (" (it is closed: its block has ended)" if self.closed else "")
            )
        known = self._live.get(server.key)
        if known is not None and known.alive:
            return known, False
        made = self._live[server.key] = MCPConnection(server)
        return made, True

    def forget(self, connection: MCPConnection) -> None:
        """Drop a connection that failed, so that the next prompt starts its server again."""
        if self._live.get(connection.server.key) is connection:
            del self._live[connection.server.key]

    @property
    def servers(self) -> int:
        """How many servers the session holds (started or starting)."""
        return len(self._live)

    @property
    def users(self) -> int:
        """How many prompts are using the session's servers now."""
        return self._users

    async def aclose(self) -> None:
        """Take no more prompts; stop the servers now if no prompt holds them.

        Never waits for the prompts still running: the last of them stops the
        servers (`release`). Waiting here would deadlock a block whose prompt
        task is awaited only after the block.
        """
        self.closed = True
        if self._users == 0:
            await self._stop()

    async def _stop(self) -> None:
        """Stop every server (side by side) and wait until they have."""
        live, self._live = list(self._live.values()), {}
        if live:
            await asyncio.gather(*(c.close() for c in live))

    def __repr__(self) -> str:
        state = f"{len(self._live)} server(s), {self._users} prompt(s)"
        state = f"closed, {state}" if self.closed else state
        return f"MCPSession({self.label!r}, {state})"


@dataclass(frozen=True, slots=True)
class _Scope:
    """One ``async with agent:`` block: the agent, its session, and the block it is nested in."""

    agent: Any
    session: MCPSession
    owned: bool
    outer: _Scope | None


_scopes: contextvars.ContextVar[Mapping[int, _Scope] | None] = contextvars.ContextVar(
    "groundswell_mcp_sessions", default=None
)
# Sessions opened and not yet closed, by agent: a block exited in another context
# than it was entered in still closes its servers.
_unclosed: dict[int, list[MCPSession]] = {}


def session_for(agent: Any) -> MCPSession | None:
    """The open session of ``agent`` where this code runs, if it is inside ``async with agent:``."""
    scope = (_scopes.get() or {}).get(id(agent))
    if scope is None or scope.agent is not agent or scope.session.closed:
        return None
    return scope.session


def enter_session(agent: Any) -> MCPSession:
    """Open (or, nested in one for the same agent, join) ``agent``'s session here."""
    scopes = _scopes.get() or {}
    outer = scopes.get(id(agent))
    if outer is not None and (outer.agent is not agent or outer.session.closed):
        outer = None
    if outer is not None:
        scope = _Scope(agent, outer.session, False, outer)
    else:
        session = MCPSession(str(getattr(agent, "name", agent)))
        _unclosed.setdefault(id(agent), []).append(session)
        scope = _Scope(agent, session, True, None)
    _scopes.set({**scopes, id(agent): scope})
    return scope.session


async def exit_session(agent: Any) -> None:
    """Leave ``agent``'s innermost block here; the block that opened the session closes it."""
    scopes = dict(_scopes.get() or {})
    scope = scopes.get(id(agent))
    if scope is not None and scope.agent is agent:
        if scope.outer is not None:
            scopes[id(agent)] = scope.outer
        else:
            del scopes[id(agent)]
        _scopes.set(scopes)
        if not scope.owned:
            return
        session = scope.session
    else:  # exited in another context than it was entered in: close its newest session
        opened = _unclosed.get(id(agent))
        if not opened:
            return
        session = opened[-1]
    sessions = _unclosed.get(id(agent), [])
    if session in sessions:
        sessions.remove(session)
    if not sessions:
        _unclosed.pop(id(agent), None)
    await session.aclose()
