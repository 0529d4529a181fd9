"""Calls to local MCP servers: their spans' MCP attributes, and trace context sent to the server.

An ``mcp_call`` node's span follows the OpenTelemetry MCP conventions for a
client's ``tools/call``: named ``tools/call {tool}`` (the server's own tool
name), kind CLIENT, with ``mcp.method.name``, ``gen_ai.tool.name`` (the
server's name for the tool; the ``mcp__<server>__<tool>`` name the model used
is ``groundswell.tool.name``), ``network.transport`` (``pipe`` for stdio;
none for an in-process server), ``mcp.protocol.version`` and
``mcp.session.id`` when the transport has one (stdio has none).

`SpanContexts` hands each call its span's context, which the
``otel_mcp`` middleware (`groundswell_otel._propagate`) makes current while
the call runs: the ``mcp`` client then sends it to the server.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any

from opentelemetry.trace import Span, SpanContext, SpanKind

from . import attributes as A

__all__ = ["SpanContexts", "mcp_span"]

# How long a call waits for its span (the sink works on its own thread, polling
# every 20 ms); a sink too busy to make it by then sends no trace context.
SPAN_WAIT_S = 0.5
# network.transport by Groundswell's transport name (an in-process server has none).
_NETWORK = {"stdio": A.NETWORK_PIPE, "http": A.NETWORK_TCP}


def mcp_span(
    name: str, mcp: dict[str, Any], attrs: dict[str, Any]
) -> tuple[str, SpanKind, dict[str, Any]]:
    """The span name, kind and attributes of an MCP call's ``execute_tool`` attributes."""
    tool = str(mcp.get("tool") or name)
    attrs[A.GEN_AI_TOOL_NAME] = tool
    attrs[A.TOOL_NAME] = name
    attrs[A.MCP_METHOD_NAME] = A.MCP_TOOLS_CALL
    if mcp.get("server"):
        attrs[A.MCP_SERVER] = str(mcp["server"])
    network = _NETWORK.get(str(mcp.get("transport")))
    if network is not None:
        attrs[A.NETWORK_TRANSPORT] = network
    if mcp.get("protocol_version"):
        attrs[A.MCP_PROTOCOL_VERSION] = str(mcp["protocol_version"])
    if mcp.get("session_id"):
        attrs[A.MCP_SESSION_ID] = str(mcp["session_id"])
    return f"{A.MCP_TOOLS_CALL} {tool}", SpanKind.CLIENT, attrs


class SpanContexts:
    """The span contexts of the MCP calls in flight, by node id, for the calls to wait on.

    The sink adds one when a call's span starts (on its own thread) and drops it
    when the span ends; a call asks with `wait` on the event loop.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, SpanContext] = {}
        self._waiting: dict[str, list[concurrent.futures.Future[SpanContext | None]]] = {}

    def opened(self, node_type: str, node_id: str, span: Span) -> None:
        if node_type != "mcp_call":
            return
        context = span.get_span_context()
        with self._lock:
            self._open[node_id] = context
            waiters = self._waiting.pop(node_id, [])
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(context)

    def closed(self, node_type: str, node_id: str) -> None:
        if node_type != "mcp_call":
            return
        with self._lock:
            self._open.pop(node_id, None)

    def clear(self) -> None:
        with self._lock:
            self._open.clear()
            waiting, self._waiting = self._waiting, {}
        for waiter in (w for ws in waiting.values() for w in ws):
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self, node_id: str, timeout: float = SPAN_WAIT_S) -> SpanContext | None:
        """The span context of the call ``node_id`` once its span has started (None: too late)."""
        waiter: concurrent.futures.Future[SpanContext | None] = concurrent.futures.Future()
        with self._lock:
            known = self._open.get(node_id)
            if known is not None:
                return known
            self._waiting.setdefault(node_id, []).append(waiter)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(waiter), timeout)
        except TimeoutError:
            return None
        finally:
            with self._lock:
                left = [w for w in self._waiting.get(node_id, []) if w is not waiter]
                if left:
                    self._waiting[node_id] = left
                else:
                    self._waiting.pop(node_id, None)
