"""The middleware that marks the sessions of ``Agent(history=True)`` agents for the sink."""

from __future__ import annotations

from typing import Any

from groundswell import Middleware, PromptNext, PromptResult, PromptRun, observe_run

__all__ = ["MarkSessions"]


class MarkSessions(Middleware):
    """Marks the prompt node of an ``Agent(history=True)`` agent, so the sink records it.

    Order 150, below the prompt node (200): the mark must be in the node's payload
    when the node starts, which is when the sink opens a session; and the run must
    reach the history sinks by then (`groundswell.observe_run`), since they take
    only the runs that ask for them.
    """

    per_agent = True  # active() reads the agent's options only

    def active(self, run: PromptRun) -> bool:
        return bool(run.agent.options.get("history"))

    async def wrap_prompt(self, run: PromptRun, call_next: PromptNext) -> PromptResult[Any]:
        run.payload["history"] = True
        # Imported here: the marker is a default middleware, and the sink pulls in the
        # store; a process whose agents keep no history never pays for that import.
        from .sink import HistorySink

        # The sinks record only the runs that ask (unless they record every agent): this
        # run asks now, before its prompt node starts, so they see the session whole.
        observe_run(HistorySink, run.tree)
        return await call_next()
