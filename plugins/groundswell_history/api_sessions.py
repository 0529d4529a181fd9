"""The sessions API: list, get, create, update and terminate sessions over HTTP.

The routes and fields are the session-history harness's. An agent's token
sees and changes only its own sessions (another agent's session is a 404,
as if it did not exist; naming another agent in a filter or a new session
is a 403); an operator token sees and changes every agent's.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Body, FastAPI, Path, Query, Request
from fastapi.responses import JSONResponse

import groundswell

from .api_gate import STORE_ERRORS, Credentials, Gate, refusals
from .api_models import (
    AGENT_ID_PATTERN,
    SESSION_ID_PATTERN,
    TEXT_PATTERN,
    IterationsResponse,
    SessionCreate,
    SessionOut,
    SessionPage,
    SessionUpdate,
    TerminateRequest,
    unix_time,
)
from .relevance import task_signature
from .serialize import iteration_record
from .store import HistoryStore, Session, SessionConflict

__all__ = ["MAX_PAGE", "add_session_routes"]

#: The most sessions one page lists.
MAX_PAGE = 500
SessionId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=64,
        pattern=SESSION_ID_PATTERN,
        description="the session's id (its prompt node's id for recorded sessions)",
    ),
]


def add_session_routes(app: FastAPI, gate: Gate, store: HistoryStore) -> None:
    """Add the ``/api/sessions`` routes to ``app``."""

    def answer(request: Request, record: dict[str, Any], body: Any, status: int = 200) -> Any:
        record["status"] = status
        gate.record(request, record)
        cleaned = groundswell.redact(body)
        return JSONResponse(cleaned, status_code=status) if status != 200 else cleaned

    def owned(
        request: Request, credentials: Any, session_id: str, record: dict[str, Any], *, full: bool
    ) -> Session | JSONResponse:
        """The session when the request's caller may see it; else the refusal to answer
        (401/403 for the token, 404, or 503 when the store cannot be read)."""
        caller = gate.caller(request, credentials, record)
        if isinstance(caller, JSONResponse):
            return caller
        try:
            found = store.session(session_id, include_iterations=full)
        except STORE_ERRORS as exc:
            return gate.unavailable(request, exc, record)
        if found is None or not caller.may_see(found.agent_id):
            whose = "" if caller.operator else f" among agent {caller.name!r}'s sessions"
            return gate.refuse(request, 404, f"no session {session_id!r}{whose}", record)
        record["agent_id"] = found.agent_id
        return found

    def conflict(request: Request, exc: Exception, record: dict[str, Any]) -> JSONResponse:
        return gate.refuse(request, 409, str(exc), record)

    def unprocessable(request: Request, exc: ValueError) -> JSONResponse:
        error = {"type": "value_error", "loc": ["body"], "msg": str(exc), "input": None}
        return gate.invalid(request, [error])

    @app.get(
        "/api/sessions",
        response_model=SessionPage,
        response_model_exclude_unset=True,
        summary="List sessions, newest first",
        responses=refusals(401, 403, 422, 503),
    )
    def list_sessions(
        request: Request,
        agent_id: Annotated[
            str | None,
            Query(
                min_length=1,
                pattern=AGENT_ID_PATTERN,
                description="whose sessions (default: the token's agent; an operator: all)",
            ),
        ] = None,
        task_id: Annotated[
            str | None, Query(max_length=1_000, pattern=TEXT_PATTERN, description="one task's")
        ] = None,
        status: Annotated[
            Literal["running", "completed", "failed", "terminated"] | None,
            Query(description="only sessions with this status"),
        ] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="sessions per page")] = 50,
        offset: Annotated[int, Query(ge=0, le=1_000_000_000, description="sessions to skip")] = 0,
        credentials: Credentials = None,
    ) -> Any:
        query = {"agent_id": agent_id, "task_id": task_id, "status": status}
        record: dict[str, Any] = {"route": "list", "query": {**query, "limit": limit}}
        caller = gate.caller(request, credentials, record)
        if isinstance(caller, JSONResponse):
            return caller
        if agent_id is None and not caller.operator:
            agent_id = caller.name
        if agent_id is not None and (refused := gate.forbidden(request, caller, agent_id, record)):
            return refused
        try:
            found = store.list_sessions(
                agent_id=agent_id, task_id=task_id, status=status, limit=limit, offset=offset
            )
            total = store.count_sessions(agent_id=agent_id, task_id=task_id, status=status)
        except STORE_ERRORS as exc:
            return gate.unavailable(request, exc, record)
        record["count"] = len(found)
        page = [s.to_dict() for s in found]
        body = {"count": len(page), "total": total, "limit": limit, "offset": offset}
        return answer(request, record, {**body, "sessions": page})

    @app.get(
        "/api/sessions/{session_id}",
        response_model=SessionOut,
        summary="One session, with its iterations",
        responses=refusals(401, 404, 422, 503),
    )
    def get_session(
        request: Request, session_id: SessionId, credentials: Credentials = None
    ) -> Any:
        record: dict[str, Any] = {"route": "get", "session_id": session_id}
        found = owned(request, credentials, session_id, record, full=True)
        if isinstance(found, JSONResponse):
            return found
        return answer(request, record, found.to_dict())

    @app.get(
        "/api/sessions/{session_id}/iterations",
        response_model=IterationsResponse,
        summary="A session's iterations (model turns and tool calls), in order",
        responses=refusals(401, 404, 422, 503),
    )
    def get_iterations(
        request: Request, session_id: SessionId, credentials: Credentials = None
    ) -> Any:
        record: dict[str, Any] = {"route": "iterations", "session_id": session_id}
        found = owned(request, credentials, session_id, record, full=True)
        if isinstance(found, JSONResponse):
            return found
        items = [iteration_record(i) for i in found.iterations or ()]
        body = {"session_id": session_id, "count": len(items), "iterations": items}
        return answer(request, record, body)

    @app.post(
        "/api/sessions",
        response_model=SessionOut,
        response_model_exclude_unset=True,
        status_code=201,
        summary="Create a session",
        responses=refusals(401, 403, 409, 422, 503),
    )
    def create_session(
        request: Request, body: SessionCreate, credentials: Credentials = None
    ) -> Any:
        record: dict[str, Any] = {"route": "create", "agent_id": body.agent_id}
        caller = gate.caller(request, credentials, record)
        if isinstance(caller, JSONResponse):
            return caller
        agent_id = body.agent_id or (None if caller.operator else caller.name)
        if agent_id is None:
            error = {
                "type": "missing",
                "loc": ["body", "agent_id"],
                "msg": "an operator token must say whose session it is: give agent_id",
                "input": None,
            }
            return gate.invalid(request, [error])
        record["agent_id"] = agent_id
        if refused := gate.forbidden(request, caller, agent_id, record):
            return refused
        signature = (
            task_signature(body.title, body.category, body.file_patterns)
            if body.title and body.title.strip()
            else None
        )
        try:
            made = store.create_session(
                agent_id,
                session_id=body.session_id,
                status=body.status,
                started_at=unix_time(body.started_at),
                ended_at=unix_time(body.completed_at),
                task_id=body.task_id,
                task_signature=signature,
                title=body.title,
                category=body.category,
                file_patterns=body.file_patterns,
                metadata=body.metadata,
                summary=body.summary,
                error=body.error,
            )
        except SessionConflict as exc:
            return conflict(request, exc, record)
        except ValueError as exc:
            return unprocessable(request, exc)
        except STORE_ERRORS as exc:
            return gate.unavailable(request, exc, record)
        record["session_id"] = made.id
        return answer(request, record, made.to_dict(), 201)

    @app.patch(
        "/api/sessions/{session_id}",
        response_model=SessionOut,
        response_model_exclude_unset=True,
        summary="Update a session: end it, or change its summary, error, task id or metadata",
        responses=refusals(401, 404, 409, 422, 503),
    )
    def update_session(
        request: Request,
        session_id: SessionId,
        body: SessionUpdate,
        credentials: Credentials = None,
    ) -> Any:
        record: dict[str, Any] = {"route": "update", "session_id": session_id}
        found = owned(request, credentials, session_id, record, full=False)
        if isinstance(found, JSONResponse):
            return found
        given = body.model_fields_set
        changes: dict[str, Any] = {
            name: getattr(body, name) for name in ("summary", "error", "task_id") if name in given
        }
        try:
            updated = store.update_session(
                session_id,
                status=body.status,
                ended_at=unix_time(body.completed_at),
                metadata=body.metadata,
                **changes,
            )
        except SessionConflict as exc:
            return conflict(request, exc, record)
        except ValueError as exc:
            return unprocessable(request, exc)
        except STORE_ERRORS as exc:
            return gate.unavailable(request, exc, record)
        if updated is None:  # deleted meanwhile
            return gate.refuse(request, 404, f"no session {session_id!r}", record)
        return answer(request, record, updated.to_dict())

    @app.post(
        "/api/sessions/{session_id}/terminate",
        response_model=SessionOut,
        response_model_exclude_unset=True,
        summary="Terminate a running session (status terminated)",
        responses=refusals(401, 404, 409, 422, 503),
    )
    def terminate_session(
        request: Request,
        session_id: SessionId,
        body: Annotated[TerminateRequest | None, Body()] = None,
        credentials: Credentials = None,
    ) -> Any:
        record: dict[str, Any] = {"route": "terminate", "session_id": session_id}
        found = owned(request, credentials, session_id, record, full=False)
        if isinstance(found, JSONResponse):
            return found
        try:
            ended = store.terminate_session(session_id, reason=body.reason if body else None)
        except SessionConflict as exc:
            return conflict(request, exc, record)
        except STORE_ERRORS as exc:
            return gate.unavailable(request, exc, record)
        if ended is None:
            return gate.refuse(request, 404, f"no session {session_id!r}", record)
        return answer(request, record, ended.to_dict())
