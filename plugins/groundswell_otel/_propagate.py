"""Trace context for MCP servers: the ``otel_mcp`` agent middleware.

While a local MCP server's tool runs, the middleware makes the call's span the
current OpenTelemetry context, so that the ``mcp`` client puts its
``traceparent`` (and ``tracestate``) in the request's ``params._meta``, as the
OpenTelemetry MCP conventions ask: the server's own spans join the run's
trace. (With a global tracer provider the ``mcp`` client also makes a span of
its own for the request, under the call's.)
"""

from __future__ import annotations

from typing import Any

from groundswell import Middleware, PromptRun, ToolCall, ToolNext

__all__ = ["MCPTraceContext"]


class MCPTraceContext(Middleware):
    """While an MCP tool call runs, its span is the current OpenTelemetry context."""

    name = "otel_mcp"
    order = 330  # innermost of the defaults: right around the call itself

    def active(self, run: PromptRun) -> bool:
        if not run.settings.get("mcps"):  # first: most prompts have no MCP server
            return False
        from . import live_sink

        return live_sink() is not None

    async def wrap_tool_call(self, run: PromptRun, call: ToolCall, call_next: ToolNext) -> Any:
        from . import live_sink

        sink = live_sink()
        if sink is None or call.node.type != "mcp_call":
            return await call_next(call)
        context = await sink.mcp_spans.wait(call.node.id)
        if context is None:
            return await call_next(call)
        # Imported here: every agent makes this middleware, most never export a span.
        from opentelemetry import context as otel_context
        from opentelemetry import trace
        from opentelemetry.trace import NonRecordingSpan

        token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(context)))
        try:
            return await call_next(call)
        finally:
            otel_context.detach(token)
