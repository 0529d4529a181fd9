"""The middleware that marks the sessions of ``Agent(history=True)`` agents for the sink."""

from __future__ import annotations

from typing import Any

from groundswell import Middleware, PromptResult, PromptRun
from groundswell.agent import PromptNext

__all__ = ["MarkSessions"]


class MarkSessions(Middleware):
    """Marks the prompt node of an ``Agent(history=True)`` agent, so the sink records it.

    Order 150, below the prompt node (200): the mark must be in the node's payload
    when the node starts, which is when the sink opens a session.
    """

    def active(self, run: PromptRun) -> bool:
        return bool(run.agent.options.get("history"))

    async def wrap_prompt(self, run: PromptRun, call_next: PromptNext) -> PromptResult[Any]:
        run.payload["history"] = True
        return await call_next()
