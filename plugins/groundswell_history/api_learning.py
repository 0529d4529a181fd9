"""Self-improvement and usage over HTTP: ``/api/retries``, ``/api/failures``, ``/api/usage``.

Each takes ``agent_id`` as a query parameter (agent names may hold ``/``, so
it is not a path segment): an agent's token defaults to, and may only name,
its own agent; an operator token may name any agent or leave it out for all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse

import groundswell

from .api_gate import STORE_ERRORS, Credentials, Gate, refusals
from .api_models import (
    AGENT_ID_PATTERN,
    TEXT_PATTERN,
    FailuresResponse,
    RetriesResponse,
    UsageResponse,
)
from .store import HistoryStore

__all__ = ["add_learning_routes"]

AgentId = Annotated[
    str | None,
    Query(
        min_length=1,
        pattern=AGENT_ID_PATTERN,
        description="whose (default: the token's agent; an operator: every agent)",
    ),
]
TaskId = Annotated[
    str | None, Query(max_length=1_000, pattern=TEXT_PATTERN, description="one task's only")
]
Limit = Annotated[int, Query(ge=1, le=100, description="at most this many")]


def add_learning_routes(app: FastAPI, gate: Gate, store: HistoryStore) -> None:
    """Add the retry history, failure analysis and usage routes to ``app``."""

    def run(
        request: Request,
        credentials: Any,
        agent_id: str | None,
        record: dict[str, Any],
        fetch: Callable[[str | None], dict[str, Any]],
    ) -> Any:
        caller = gate.caller(request, credentials, record)
        if isinstance(caller, JSONResponse):
            return caller
        if agent_id is None and not caller.operator:
            agent_id = caller.name
        if agent_id is not None and (refused := gate.forbidden(request, caller, agent_id, record)):
            return refused
        try:
            body = fetch(agent_id)
        except STORE_ERRORS as exc:
            return gate.unavailable(request, exc, record)
        record.update(status=200, count=body["count"])
        gate.record(request, record)
        return groundswell.redact(body)

    @app.get(
        "/api/retries",
        response_model=RetriesResponse,
        summary="Retry history: each task's attempts (sessions) and their outcomes",
        responses=refusals(401, 403, 422, 503),
    )
    def retries(
        request: Request,
        agent_id: AgentId = None,
        task_id: TaskId = None,
        min_attempts: Annotated[
            int, Query(ge=1, le=100, description="only tasks tried at least this often")
        ] = 1,
        limit: Limit = 20,
        credentials: Credentials = None,
    ) -> Any:
        def fetch(agent: str | None) -> dict[str, Any]:
            found = store.retry_history(
                agent, task_id=task_id, min_attempts=min_attempts, limit=limit
            )
            tasks = [t.to_dict() for t in found]
            return {"agent_id": agent, "count": len(tasks), "tasks": tasks}

        record = {"route": "retries", "agent_id": agent_id, "task_id": task_id}
        return run(request, credentials, agent_id, record, fetch)

    @app.get(
        "/api/failures",
        response_model=FailuresResponse,
        summary="Failure analysis: failures by error type, with the approaches that fixed them",
        responses=refusals(401, 403, 422, 503),
    )
    def failures(
        request: Request,
        agent_id: AgentId = None,
        task_id: TaskId = None,
        limit: Limit = 20,
        credentials: Credentials = None,
    ) -> Any:
        def fetch(agent: str | None) -> dict[str, Any]:
            found = store.failure_analysis(agent, task_id=task_id, limit=limit)
            kinds = [k.to_dict() for k in found]
            return {"agent_id": agent, "count": len(kinds), "failures": kinds}

        record = {"route": "failures", "agent_id": agent_id, "task_id": task_id}
        return run(request, credentials, agent_id, record, fetch)

    @app.get(
        "/api/usage",
        response_model=UsageResponse,
        summary="Usage metrics: queries per agent and the average relevance of what came back",
        responses=refusals(401, 403, 422, 503),
    )
    def usage(request: Request, agent_id: AgentId = None, credentials: Credentials = None) -> Any:
        def fetch(agent: str | None) -> dict[str, Any]:
            found = [u.to_dict() for u in store.usage(agent)]
            return {"count": len(found), "agents": found}

        record = {"route": "usage", "agent_id": agent_id}
        return run(request, credentials, agent_id, record, fetch)
