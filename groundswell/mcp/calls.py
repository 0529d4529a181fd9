"""Deadlines on local MCP servers: a call that never answers, a server that never exits.

Every tool call of a local server runs under its server's ``call_timeout``
(`groundswell.mcp.config.CALL_TIMEOUT`, 60 s, unless the config or
``GROUNDSWELL_MCP_CALL_TIMEOUT`` says otherwise), and ``tool_timeout`` too:
the smaller wins. A call over it is cancelled (`within`): the ``mcp`` client
sends the server ``notifications/cancelled`` from the call's own task, so the
caller returns at the deadline, not when that write is done.

A server left with a call unanswered may never exit on its own, and the
``mcp`` client waits 2 s after closing its stdin, then 2 s after SIGTERM,
before it kills it. So a connection that gave up on a call (or on the start)
stops its server at once (`stop`: SIGTERM to its process group, SIGKILL a
second later if it is still there), waits `STOP_WAIT` for it, and leaves
whatever is left of its shutdown to the background (`finish_in_background`).
The SIGKILL comes from a daemon timer, which dies with the interpreter: a
program that ends within that second kills the servers still pending it at
exit (an ``atexit`` hook), so none is left running.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Awaitable
from typing import Any, TypeVar

__all__ = [
    "STOP_WAIT",
    "CallTimedOut",
    "finish_in_background",
    "process_of",
    "reap",
    "stop",
    "terminate",
    "timeout_message",
    "within",
]

T = TypeVar("T")

logger = logging.getLogger("groundswell.mcp")

# Tasks finishing in the background: the loop holds tasks weakly, so they are kept here.
_background: set[asyncio.Task[Any]] = set()
#: Seconds `close` waits for a server it sent SIGTERM (a call left unanswered) before
#: leaving the rest of its shutdown to the background.
STOP_WAIT = 0.25
#: Seconds a server sent SIGTERM (`stop`) gets before SIGKILL.
KILL_AFTER = 1.0
# Servers sent SIGTERM and not yet SIGKILL, by pid: killed at exit if the program ends first.
_pending_kill: dict[int, Any] = {}
_pending_lock = threading.Lock()


class CallTimedOut(TimeoutError):
    """A call passed its deadline; it was cancelled (and the server told so)."""


async def within(call: Awaitable[T], seconds: float | None) -> T:
    """Await ``call`` for at most ``seconds``; past them, or when the caller is cancelled,
    cancel it without waiting and raise `CallTimedOut` (or the cancellation)."""
    task = asyncio.ensure_future(call)
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    except asyncio.CancelledError:
        _abandon(task)
        raise
    if not done:
        _abandon(task)
        raise CallTimedOut(seconds)
    return task.result()


def _abandon(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` and let it finish on its own (the ``mcp`` client tells the server)."""
    task.cancel()
    if isinstance(task, asyncio.Task) and not task.done():
        _keep(task)
    else:
        _retrieve(task)


def _keep(task: asyncio.Task[Any]) -> None:
    _background.add(task)
    task.add_done_callback(_background.discard)
    task.add_done_callback(_retrieve)


def _retrieve(task: asyncio.Future[Any]) -> None:
    # Read, so that asyncio never logs "exception was never retrieved" for an abandoned call.
    if not task.cancelled():
        task.exception()


def finish_in_background(task: asyncio.Task[Any]) -> None:
    """Keep ``task`` (a connection's) alive until it ends, nobody waiting for it."""
    if not task.done():
        _keep(task)


def timeout_message(server: str, tool: str, seconds: float, transport: str) -> str:
    """What the model (and the ``mcp_call`` node) is told when a call passed its deadline."""
    how = (
        f"raise 'call_timeout' (seconds) in the config of MCP server {server!r}"
        if transport == "stdio"
        else "set GROUNDSWELL_MCP_CALL_TIMEOUT (seconds) for in-process servers"
    )
    return (
        f"MCP server {server!r} did not answer {tool!r} within {seconds:g} s (its call_timeout); "
        f"the call was cancelled on the server. If the tool needs longer, {how}"
    )


def process_of(transport: Any) -> Any:
    """The subprocess of an entered ``mcp.client.stdio.stdio_client`` (``None`` if not found).

    The ``mcp`` client keeps it to itself, in the frame of its context
    manager's generator; it is read there, and only to stop it sooner.
    """
    frame = getattr(getattr(transport, "gen", None), "ag_frame", None)
    process = frame.f_locals.get("process") if frame is not None else None
    if isinstance(getattr(process, "pid", None), int):
        return process
    # A newer mcp may keep it elsewhere: servers then stop the mcp client's own (slower) way.
    logger.debug("no subprocess found in the mcp stdio client; it stops its server itself")
    return None


def terminate(process: Any, sig: int = signal.SIGTERM) -> None:
    """Signal a server and its whole process group (its own children too), if still running."""
    if process is None or process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        if sys.platform == "win32":  # pragma: no cover - no process groups there
            process.kill()
        else:  # the mcp client starts each server in a session (group) of its own
            os.killpg(process.pid, sig)


def stop(process: Any) -> None:
    """Stop a server now: SIGTERM to its process group, and SIGKILL `KILL_AFTER` seconds
    later if it still runs (from a thread: a shutdown stuck on its pipes cannot hold it)."""
    if process is None or process.returncode is not None:
        return
    terminate(process)
    if sys.platform != "win32":
        with _pending_lock:
            _pending_kill[process.pid] = process
        timer = threading.Timer(KILL_AFTER, _kill, (process,))
        timer.daemon = True
        timer.start()


def _kill(process: Any) -> None:
    with _pending_lock:
        _pending_kill.pop(process.pid, None)
    terminate(process, signal.SIGKILL)


@atexit.register
def _kill_pending() -> None:
    """At exit, SIGKILL the servers still waiting for theirs: the timers die with the program."""
    with _pending_lock:
        pending = list(_pending_kill.values())
        _pending_kill.clear()
    for process in pending:
        terminate(process, signal.SIGKILL)


def reap(process: Any) -> None:
    """The last word on a server whose connection has ended: `stop` it if it still runs
    (its shutdown was cut short)."""
    if process is not None and process.returncode is None and _running(process.pid):
        stop(process)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True
