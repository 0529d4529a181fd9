"""``Tool(timeout=...)`` and ``Agent(tool_timeout=...)``: a deadline on each tool call.

Innermost of the defaults (order 320), so a cached result or a hook's answer
never waits on it. A call over its time is an ``is_error`` result for the
model, and its node records ``timeout_s`` and a ``tool_timeout`` event. A
sync tool runs in a worker thread, which cannot be stopped: it finishes in the
background and its result is dropped.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..agent import Middleware, PromptRun, ToolCall, ToolNext
from .tool import ToolFailed

__all__ = ["ToolTimeout"]


class ToolTimeout(Middleware):
    """Stop waiting for a tool call after its timeout."""

    name = "tool_timeout"
    order = 320
    per_agent = True  # active() reads the agent's settings only

    def active(self, run: PromptRun) -> bool:
        settings = run.settings
        if settings.get("tool_timeout") is not None:
            return True
        tools = settings.get("tools")
        if not tools:  # no generator at all for a prompt without tools
            return False
        # Toolsets (names) may hold tools with a timeout; plain tools say so themselves.
        return any(
            isinstance(item, str) or getattr(item, "timeout", None) is not None for item in tools
        )

    async def wrap_tool_call(self, run: PromptRun, call: ToolCall, call_next: ToolNext) -> Any:
        seconds = getattr(call.tool, "timeout", None) or run.settings.get("tool_timeout")
        if seconds is None:
            return await call_next(call)
        call.node.payload["timeout_s"] = seconds
        timer = asyncio.timeout(seconds)
        try:
            async with timer:
                return await call_next(call)
        except TimeoutError:
            if not timer.expired():
                raise  # the tool's own TimeoutError: an error like any other
            run.tree.add_event(call.node, "tool_timeout", seconds=seconds)
            raise ToolFailed(
                f"Tool {call.name!r} did not finish within {seconds:g} s; it was stopped "
                "(try again with less work, or answer without it)"
            ) from None
