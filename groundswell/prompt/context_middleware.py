"""``Agent(context=[...])``: context providers' text added to the system prompt."""

from __future__ import annotations

from typing import Any

from ..agent import Middleware, PromptNext, PromptResult, PromptRun
from .context_providers import ContextRequest, gather_context

__all__ = ["ContextProviders"]


class ContextProviders(Middleware):
    """Ask each of the agent's context providers for a section of the system prompt."""

    name = "context"
    order = 240
    per_agent = True  # active() reads the agent's settings only

    def active(self, run: PromptRun) -> bool:
        return bool(run.settings.get("context"))

    async def wrap_prompt(self, run: PromptRun, call_next: PromptNext) -> PromptResult[Any]:
        request = ContextRequest(
            agent=run.agent.name,
            user=str(run.messages[0]["content"]),
            tree=run.tree,
            node=run.node,
            state=run.workflow.state if run.workflow is not None else {},
        )
        for section in await gather_context(run.settings["context"], request):
            run.add_system(section)
        return await call_next()
