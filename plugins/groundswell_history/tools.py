"""The ``history`` toolset: ``query_past_sessions``, an agent's look at its own past.

``Agent(tools=["history"])`` adds the tool. The agent id is always the calling
agent's own name, so an agent can never read another agent's sessions.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Annotated, Any

from pydantic import Field

from groundswell import NodeType, Tool, ToolContext, current_tree

from .relevance import task_signature
from .store import HistoryStore, default_url

__all__ = ["MAX_SESSIONS", "shared_store", "toolset"]

MAX_SESSIONS = 20
_ITERATION_TEXT = 300
_stores: dict[str, HistoryStore] = {}
_lock = threading.Lock()


def shared_store(url: str | None = None) -> HistoryStore:
    """One store per URL per process (``None``: `default_url`)."""
    url = url or default_url()
    with _lock:
        if url not in _stores:
            _stores[url] = HistoryStore(url)
        return _stores[url]


def toolset(store: HistoryStore | None = None) -> list[Tool]:
    """The history tools, reading ``store`` (default: the store sessions are recorded in)."""

    async def query_past_sessions(
        context: ToolContext,
        title: str | None = None,
        category: str | None = None,
        file_patterns: list[str] | None = None,
        limit: Annotated[int, Field(ge=1, le=MAX_SESSIONS)] = 5,
        min_relevance: Annotated[float, Field(ge=0.0, le=1.0)] = 0.3,
        include_failures: bool = True,
        include_iterations: bool = False,
    ) -> dict[str, Any]:
        """Your own past sessions, most relevant first, to learn from what you did before.

        Args:
            title: The task you are working on now; with it, sessions of the same task rank first.
            category: The task's category (e.g. "review").
            file_patterns: File patterns the task touches (e.g. ["src/*.py"]).
            limit: How many sessions to return (1-20).
            min_relevance: Leave out sessions scoring below this (0-1).
            include_failures: Include sessions that failed (their errors are worth knowing).
            include_iterations: Include each session's model turns and tool calls.
        """
        signature = task_signature(title, category, file_patterns or ()) if title else None
        chosen = store or shared_store()
        ranked = await asyncio.to_thread(
            chosen.relevant_sessions,
            context.agent,
            exclude=_running_sessions(context),
            task_signature=signature,
            limit=limit,
            min_relevance=min_relevance,
            include_failures=include_failures,
            include_iterations=include_iterations,
        )
        sessions = []
        for session, score in ranked:
            item: dict[str, Any] = {
                "id": session.id,
                "relevance": round(score, 3),
                "status": session.status,
                "started_at": session.started_at,
                "task_id": session.task_id,
                "title": session.title,
                "category": session.category,
                "output": session.output_summary,
                "error": session.error,
            }
            if session.iterations is not None:
                item["iterations"] = [
                    {
                        "kind": i["kind"],
                        "name": i["name"],
                        "status": i["status"],
                        "input": _short(i["input_summary"]),
                        "output": _short(i["output_summary"] or i["error"]),
                    }
                    for i in session.iterations
                ]
            sessions.append(item)
        return {"agent_id": context.agent, "count": len(sessions), "sessions": sessions}

    return [Tool(query_past_sessions, toolset="history")]


def _running_sessions(context: ToolContext) -> list[str]:
    """The prompts this tool call runs inside: the session asking is not its own past."""
    tree = current_tree()
    if tree is None or context.node_id is None:
        return []
    return [n.id for n in tree.get_ancestors(context.node_id) if n.type == NodeType.PROMPT]


def _short(text: str | None) -> str | None:
    if text is None or len(text) <= _ITERATION_TEXT:
        return text
    return f"{text[:_ITERATION_TEXT]}…"
