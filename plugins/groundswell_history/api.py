"""The introspection HTTP API: an agent reads its own past sessions over HTTP.

``create_app(store)`` returns a FastAPI application with one query,
``GET /api/introspection/{agent_id}``, plus ``GET /api/health``; its OpenAPI
schema is at ``/openapi.json`` and browsable at ``/docs``. Serve it with
``groundswell history serve``.

Each agent has its own bearer token (``groundswell history token AGENT_ID``,
or :func:`issue_token`): an HMAC of the agent id under the server's secret, so
tokens need no table and a token for one agent gets 403 on another agent's
sessions. The secret is ``GROUNDSWELL_HISTORY_SECRET``, else a random one
kept in ``$GROUNDSWELL_HOME/history-api.secret`` (created on first use, mode
0600); replacing it revokes every token.

Every query (answered or refused) is logged on ``groundswell.history.api`` and
emitted to the registered event sinks as an ``introspection.query`` event.
"""

import base64
import binascii
import hashlib
import hmac
import logging
import os
import secrets
import time
from pathlib import Path as FilePath
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field

from groundswell import ConfigurationError, NodeStatus, NodeType
from groundswell.context import new_run_tree

from .store import SCHEMA_VERSION, HistoryStore, _safe_url, default_url

__all__ = ["SECRET_ENV", "agent_for_token", "create_app", "issue_token", "load_secret"]

logger = logging.getLogger("groundswell.history.api")
SECRET_ENV = "GROUNDSWELL_HISTORY_SECRET"
SECRET_FILE = "history-api.secret"
TOKEN_PREFIX = "gsh"
MAX_LIMIT = 100
QUERY_PARAMETERS = (
    "task_signature",
    "limit",
    "min_relevance",
    "include_iterations",
    "include_failures",
)
# Agent ids are names: any printable text, no control characters (which some
# databases refuse to store or compare).
AGENT_ID_PATTERN = r"^[^\x00-\x1f\x7f]+$"


def _home() -> FilePath:
    return FilePath(os.environ.get("GROUNDSWELL_HOME") or FilePath.home() / ".groundswell")


def load_secret(*, create: bool = True) -> bytes:
    """The key tokens are signed with: ``GROUNDSWELL_HISTORY_SECRET``, else the secret file."""
    from_env = os.environ.get(SECRET_ENV)
    if from_env:
        if len(from_env) < 16:
            raise ConfigurationError(
                f"{SECRET_ENV} is too short ({len(from_env)} characters); use at least 16, "
                'e.g. python -c "import secrets; print(secrets.token_hex(32))"'
            )
        return from_env.encode()
    path = _home() / SECRET_FILE
    if not path.exists():
        if not create:
            raise ConfigurationError(
                f"no history API secret: set {SECRET_ENV} or create {path} "
                "(groundswell history token AGENT_ID creates it)"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        # O_EXCL: two processes creating it at once must not end up with two secrets.
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_hex(32))
    text = path.read_text().strip()
    if len(text) < 16:
        raise ConfigurationError(f"the history API secret in {path} is too short; delete it")
    return text.encode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _mac(secret: bytes, agent_id: str) -> bytes:
    return hmac.new(secret, f"groundswell-history:{agent_id}".encode(), hashlib.sha256).digest()


def issue_token(agent_id: str, secret: bytes | None = None) -> str:
    """The bearer token that lets ``agent_id`` (and only it) read its sessions."""
    if not isinstance(agent_id, str) or not agent_id.strip():
        raise ValueError(f"agent_id must be a non-empty string, got {agent_id!r}")
    key = load_secret() if secret is None else secret
    return f"{TOKEN_PREFIX}.{_b64(agent_id.encode())}.{_b64(_mac(key, agent_id))}"


def agent_for_token(token: str, secret: bytes) -> str | None:
    """The agent a token was issued for, or ``None`` when it is not a valid token."""
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX:
        return None
    try:
        agent_id = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)).decode()
        mac = base64.urlsafe_b64decode(parts[2] + "=" * (-len(parts[2]) % 4))
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return agent_id if hmac.compare_digest(mac, _mac(secret, agent_id)) else None


def _emit(record: dict[str, Any]) -> None:
    """Send one ``introspection.query`` event to the event sinks, as a one-node run."""
    try:
        tree = new_run_tree()
        if tree._dispatch is None:  # no sinks: nothing would see it
            return
        node = tree.start_node(NodeType.WORKFLOW, "history-api")
        tree.add_event(node, "introspection.query", **record)
        tree.end_node(node, NodeStatus.COMPLETED)
    except Exception:  # a broken sink never breaks a query
        logger.exception("introspection.query event could not be emitted")


class Iteration(BaseModel):
    """One model turn or tool call of a session."""

    seq: int
    kind: str = Field(description="model_turn or tool_call")
    name: str
    status: str
    input_summary: str | None = None
    output_summary: str | None = None
    error: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    usage: dict[str, Any] = Field(default_factory=dict)


class SessionOut(BaseModel):
    """A past session and how relevant it is to the query's task."""

    id: str
    relevance: float = Field(ge=0, le=1)
    status: str = Field(description="completed, failed or running")
    started_at: float = Field(description="Unix time")
    ended_at: float | None = None
    task_id: str | None = None
    task_signature: str | None = None
    title: str | None = None
    category: str | None = None
    file_patterns: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    output_summary: str | None = None
    error: str | None = None
    run_id: str | None = None
    iterations: list[Iteration] | None = None


class QueryEcho(BaseModel):
    """The query as the server understood it."""

    task_signature: str | None
    limit: int
    min_relevance: float
    include_iterations: bool
    include_failures: bool


class IntrospectionResponse(BaseModel):
    """An agent's past sessions, most relevant first."""

    agent_id: str
    query: QueryEcho
    count: int
    sessions: list[SessionOut]


class Problem(BaseModel):
    """Why a request was refused."""

    detail: Any
    message: str | None = None


def create_app(store: HistoryStore | str | None = None, *, secret: bytes | None = None) -> FastAPI:
    """The introspection API over ``store`` (a store, a SQLAlchemy URL, or the default store)."""
    chosen = store if isinstance(store, HistoryStore) else HistoryStore(store or default_url())
    key = load_secret() if secret is None else secret

    app = FastAPI(
        title="Groundswell history introspection API",
        version=str(SCHEMA_VERSION),
        description=(
            "An agent's own past sessions, ranked by relevance to a task. Every request "
            "needs the agent's bearer token (`groundswell history token AGENT_ID`); an "
            "agent can read only its own sessions."
        ),
    )
    app.state.store = chosen
    bearer = HTTPBearer(auto_error=False, description="the agent's token")

    def known_parameters(request: Request) -> None:
        # A misspelt parameter (?limt=5) would otherwise be ignored without a word.
        unknown = [name for name in request.query_params if name not in QUERY_PARAMETERS]
        if unknown:
            raise RequestValidationError(
                [
                    {
                        "type": "extra_forbidden",
                        "loc": ("query", name),
                        "msg": f"unknown parameter; use {', '.join(QUERY_PARAMETERS)}",
                        "input": request.query_params.get(name),
                    }
                    for name in unknown
                ]
            )

    def refuse(status: int, message: str, record: dict[str, Any]) -> HTTPException:
        record.update(status=status, error=message)
        logger.info("introspection query refused: %s", record)
        _emit(record)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return HTTPException(status_code=status, detail=message, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = jsonable_encoder(exc.errors(), custom_encoder={Exception: str})
        parts = []
        for error in errors:
            where = ".".join(str(p) for p in error.get("loc", ())[1:]) or "request"
            given = error.get("input")
            shown = "" if given is None or isinstance(given, dict) else f" (got {given!r})"
            parts.append(f"{where}: {error.get('msg')}{shown}")
        message = "; ".join(parts) or "invalid request"
        record = {"path": request.url.path, "status": 422, "error": message}
        logger.info("introspection query refused: %s", record)
        _emit(record)
        return JSONResponse(status_code=422, content={"detail": errors, "message": message})

    @app.get("/api/health", summary="Is the API up, and which store does it read?")
    def health() -> dict[str, Any]:
        return {"status": "ok", "schema_version": SCHEMA_VERSION, "store": _safe_url(chosen.url)}

    @app.get(
        "/api/introspection/{agent_id}",
        response_model=IntrospectionResponse,
        # Sessions carry "iterations" only when asked for.
        response_model_exclude_unset=True,
        dependencies=[Depends(known_parameters)],
        summary="An agent's own past sessions, most relevant first",
        responses={
            401: {"model": Problem, "description": "no token, or not a valid token"},
            403: {"model": Problem, "description": "the token belongs to another agent"},
            422: {"model": Problem, "description": "invalid parameters, explained in message"},
            503: {"model": Problem, "description": "the history store cannot be reached"},
        },
    )
    def introspection(
        agent_id: Annotated[
            str,
            Path(
                min_length=1,
                max_length=200,
                pattern=AGENT_ID_PATTERN,
                description="the agent's name",
            ),
        ],
        task_signature: Annotated[
            str | None,
            Query(
                pattern=r"^[0-9a-f]{64}$",
                description="task_signature() of the task at hand (64 lowercase hex digits)",
            ),
        ] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="most sessions")] = 10,
        min_relevance: Annotated[
            float, Query(ge=0.0, le=1.0, description="leave out sessions scoring less")
        ] = 0.5,
        include_iterations: Annotated[
            bool, Query(description="include each session's model turns and tool calls")
        ] = False,
        include_failures: Annotated[bool, Query(description="include failed sessions")] = True,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)] = None,
    ) -> dict[str, Any]:
        started = time.perf_counter()
        query = {
            "task_signature": task_signature,
            "limit": limit,
            "min_relevance": min_relevance,
            "include_iterations": include_iterations,
            "include_failures": include_failures,
        }
        record: dict[str, Any] = {"agent_id": agent_id, "query": query}
        if credentials is None:
            raise refuse(401, "missing bearer token: send Authorization: Bearer <token>", record)
        caller = agent_for_token(credentials.credentials, key)
        if caller is None:
            raise refuse(
                401, "invalid token: issue one with `groundswell history token AGENT_ID`", record
            )
        record["caller"] = caller
        if caller != agent_id:
            raise refuse(
                403,
                f"this token belongs to agent {caller!r}; an agent can read only its own sessions",
                record,
            )
        try:
            ranked = chosen.relevant_sessions(
                agent_id,
                task_signature=task_signature,
                limit=limit,
                min_relevance=min_relevance,
                include_iterations=include_iterations,
                include_failures=include_failures,
            )
        except Exception as exc:  # the database is down or unreachable
            logger.warning("history store error: %s: %s", type(exc).__name__, exc)
            raise refuse(503, "the history store cannot be reached; try again", record) from None
        sessions = [{**s.to_dict(), "relevance": round(score, 6)} for s, score in ranked]
        record.update(
            status=200, count=len(sessions), ms=round((time.perf_counter() - started) * 1000, 2)
        )
        logger.info("introspection query: %s", record)
        _emit(record)
        return {"agent_id": agent_id, "query": query, "count": len(sessions), "sessions": sessions}

    return app
