"""The introspection HTTP API: an agent reads its own past sessions over HTTP.

``create_app(store)`` returns a FastAPI application with one query,
``GET /api/introspection/{agent_id}``, plus ``GET /api/health``; its OpenAPI
schema is at ``/openapi.json`` and browsable at ``/docs``. Serve it with
``groundswell history serve``.

Each agent has its own bearer token (``groundswell history token AGENT_ID``,
or `issue_token`): an HMAC of the agent id under the server's secret, so
tokens need no table and a token for one agent gets 403 on another agent's
sessions. The secret is ``GROUNDSWELL_HISTORY_SECRET``, else a random one
kept in ``$GROUNDSWELL_HOME/history-api.secret`` (created on first use, mode
0600); replacing it revokes every token.

Every query (answered or refused) is logged on ``groundswell.history.api`` and
emitted to the registered event sinks as an ``introspection.query`` event.
What the API logs and answers goes through `groundswell.scrub`, the scrubber
every output uses: a credential sent by mistake (``?access_token=...``) is
never echoed in a 422 body, a log line or an event, nor in uvicorn's own
request log.
"""

import base64
import binascii
import contextlib
import hashlib
import hmac
import logging
import os
import secrets
import tempfile
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path as FilePath
from typing import Annotated, Any

import sqlalchemy
from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field
from starlette.convertors import Convertor, register_url_convertor

import groundswell
from groundswell import ConfigurationError, NodeStatus, NodeType
from groundswell.run_context import new_run_tree

from .store import (
    SCHEMA_VERSION,
    HistoryStore,
    StoreUnavailable,
    default_url,
    groundswell_home,
)

__all__ = ["SECRET_ENV", "agent_for_token", "create_app", "issue_token", "load_secret"]

logger = logging.getLogger("groundswell.history.api")
SECRET_ENV = "GROUNDSWELL_HISTORY_SECRET"
SECRET_FILE = "history-api.secret"
TOKEN_PREFIX = "gsh"
MAX_LIMIT = 100
REDACTED = "**********"
# Agent ids are names: any text but NUL, which PostgreSQL cannot store or compare.
AGENT_ID_PATTERN = r"^[^\x00]+$"


class _AnyText(Convertor[str]):
    """Starlette's ``path`` convertor, line breaks included.

    Its ``.*`` stops at a line break, so an agent name holding one (``%0A`` in
    the URL) matched no route and got an undocumented 404; with this it reaches
    the route and its documented answers (401, 403, 422).
    """

    regex = "(?s:.*)"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("groundswell_any_text", _AnyText())


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
    path = groundswell_home() / SECRET_FILE
    try:
        if not path.exists():
            if not create:
                raise ConfigurationError(
                    f"no history API secret: set {SECRET_ENV} or create {path} "
                    "(groundswell history token AGENT_ID creates it)"
                )
            _create_secret(path)
        text = path.read_text().strip()
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read the history API secret {str(path)!r}: {exc.strerror or exc}; "
            f"fix the file or set {SECRET_ENV}"
        ) from exc
    if len(text) < 16:
        raise ConfigurationError(
            f"the history API secret in {path} holds {len(text)} characters, fewer than 16; "
            "write a longer one there (tokens issued with the old one stop working)"
        )
    return text.encode()


def _create_secret(path: FilePath) -> None:
    """Write a new random secret to ``path`` unless one is there, atomically.

    The secret is written to a private temporary file and then linked into
    place, so a process racing this one finds either no file or a whole one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".secret-")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32))
        with contextlib.suppress(FileExistsError):  # another process won: keep theirs
            os.link(temporary, path)
    finally:
        os.unlink(temporary)


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


class QueryEvents:
    """Sends ``introspection.query`` events to the event sinks.

    The events go on the root of a ``history-api`` run, and a new run starts
    each ``window`` seconds or ``per_run`` queries. Sinks that keep a file
    or a trace per run then see batches of queries instead of one run per
    query, and no run grows without end in a long-lived server.
    """

    def __init__(self, window: float = 60.0, per_run: int = 100) -> None:
        self.window, self.per_run = window, per_run
        self._lock = threading.Lock()
        self._run: tuple[Any, Any] | None = None
        self._started = 0.0
        self._count = 0

    def emit(self, record: dict[str, Any]) -> None:
        """Send one query's record; a failing sink never fails the query."""
        try:
            with self._lock:
                now = time.monotonic()
                if self._run and (now - self._started > self.window or self._count >= self.per_run):
                    self._end()
                if self._run is None:
                    tree = new_run_tree()
                    if not tree.observed:  # no sinks: nobody would see it
                        return
                    self._run = (tree, tree.start_node(NodeType.WORKFLOW, "history-api"))
                    self._started, self._count = now, 0
                tree, node = self._run
                tree.add_event(node, "introspection.query", **record)
                self._count += 1
        except Exception:
            logger.exception("introspection.query event could not be emitted")

    def close(self) -> None:
        """End the current run (the server is stopping)."""
        with self._lock:
            self._end()

    def _end(self) -> None:
        if self._run is not None:
            tree, node = self._run
            self._run = None
            tree.end_node(node, NodeStatus.COMPLETED)


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
    status: str = Field(description="completed, failed, cancelled or running")
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


class _ScrubbedLog(logging.Filter):
    """Scrubs secrets from the records of the logger it is added to.

    `create_app` adds it to uvicorn's loggers, whose request lines would
    otherwise show a token sent in the query string.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = _scrub_logged(record.msg)
        if isinstance(record.args, tuple):
            # Scrubbed one by one: uvicorn's access formatter unpacks the tuple.
            record.args = tuple(_scrub_logged(a) if isinstance(a, str) else a for a in record.args)
        elif record.args:
            record.args = groundswell.redact(record.args)
        return True


def _scrub_logged(text: str) -> str:
    """``text`` scrubbed, and scrubbed again URL-decoded: a request line shows the
    query string as sent (``?note=Bearer%20...``). When the decoded text held a
    secret, the decoded, scrubbed text is what gets logged."""
    text = groundswell.scrub(text)
    if "%" not in text and "+" not in text:
        return text
    decoded = urllib.parse.unquote_plus(text)
    cleaned = groundswell.scrub(decoded)
    return cleaned if cleaned != decoded else text


def _scrub_server_logs() -> None:
    """Add `_ScrubbedLog` to uvicorn's loggers (once; logging config keeps filters)."""
    for name in ("uvicorn.access", "uvicorn.error"):
        target = logging.getLogger(name)
        if not any(isinstance(f, _ScrubbedLog) for f in target.filters):
            target.addFilter(_ScrubbedLog())


def _hide_secret_inputs(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Validation errors without the values of secret-named parameters, then scrubbed.

    The value of ``?access_token=...`` is a credential however it looks, so
    it is dropped by name; every other value is scrubbed like all output.
    """
    hidden = []
    for error in errors:
        loc = error.get("loc") or ()
        if loc and isinstance(loc[-1], str) and groundswell.is_secret_key(loc[-1]):
            error = {**error, "input": REDACTED}
        hidden.append(error)
    cleaned: list[dict[str, Any]] = groundswell.redact(hidden)
    return cleaned


def _problem(status: int, message: str) -> JSONResponse:
    """A refusal in the shape `Problem` documents."""
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(
        status_code=status, content={"detail": message, "message": message}, headers=headers
    )


def create_app(store: HistoryStore | str | None = None, *, secret: bytes | None = None) -> FastAPI:
    """The introspection API over ``store`` (a store, a SQLAlchemy URL, or the default store)."""
    chosen = store if isinstance(store, HistoryStore) else HistoryStore(store or default_url())
    key = load_secret() if secret is None else secret
    events = QueryEvents()
    _scrub_server_logs()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        events.close()

    app = FastAPI(
        title="Groundswell history introspection API",
        version=str(SCHEMA_VERSION),
        description=(
            "An agent's own past sessions, ranked by relevance to a task. Every request "
            "needs the agent's bearer token (`groundswell history token AGENT_ID`); an "
            "agent can read only its own sessions."
        ),
        lifespan=lifespan,
    )
    app.state.store = chosen
    app.state.events = events
    bearer = HTTPBearer(auto_error=False, description="the agent's token")

    def record_query(record: dict[str, Any]) -> None:
        record = groundswell.redact(record)  # it holds what the caller sent
        status = record.get("status")
        logger.info(
            "introspection query %s: %s", "answered" if status == 200 else "refused", record
        )
        events.emit(record)

    def refusal(status: int, message: str, record: dict[str, Any]) -> JSONResponse:
        record.update(status=status, error=message)
        record_query(record)
        return _problem(status, message)

    def unknown_parameters(request: Request) -> list[dict[str, Any]]:
        # A misspelt parameter (?limt=5) would otherwise be ignored without a word.
        known = app.state.query_parameters
        return [
            {
                "type": "extra_forbidden",
                "loc": ["query", name],
                "msg": f"unknown parameter; use {', '.join(known)}",
                "input": request.query_params.get(name),
            }
            for name in dict.fromkeys(request.query_params)
            if name not in known
        ]

    def invalid(request: Request, errors: list[dict[str, Any]]) -> JSONResponse:
        errors = _hide_secret_inputs(errors)
        parts = []
        for error in errors:
            where = ".".join(str(p) for p in error.get("loc", ())[1:]) or "request"
            given = error.get("input")
            shown = "" if given is None or isinstance(given, dict) else f" (got {given!r})"
            parts.append(f"{where}: {error.get('msg')}{shown}")
        message = "; ".join(parts) or "invalid request"
        record_query(
            {
                "agent_id": request.path_params.get("agent_id"),
                "path": request.url.path,
                "status": 422,
                "error": message,
            }
        )
        return JSONResponse(status_code=422, content={"detail": errors, "message": message})

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = jsonable_encoder(exc.errors(), custom_encoder={Exception: str})
        if request.url.path.startswith("/api/introspection/"):
            errors += unknown_parameters(request)
        return invalid(request, errors)

    @app.get(
        "/api/health",
        summary="Is the API up, and can it read its store?",
        responses={503: {"model": Problem, "description": "the store cannot be reached"}},
    )
    def health() -> Any:
        try:
            chosen.ping()
        except Exception as exc:
            logger.warning(
                "history store error: %s: %s", type(exc).__name__, groundswell.scrub(str(exc))
            )
            return _problem(503, "the history store cannot be reached")
        return {"status": "ok", "schema_version": SCHEMA_VERSION}

    @app.get(
        # Like :path, so agent names with "/" in them work (escaped or not), and
        # line breaks too.
        "/api/introspection/{agent_id:groundswell_any_text}",
        response_model=IntrospectionResponse,
        # Sessions carry "iterations" only when asked for.
        response_model_exclude_unset=True,
        summary="An agent's own past sessions, most relevant first",
        responses={
            401: {"model": Problem, "description": "no token, or not a valid token"},
            403: {"model": Problem, "description": "the token belongs to another agent"},
            422: {"model": Problem, "description": "invalid parameters, explained in message"},
            503: {"model": Problem, "description": "the history store cannot be reached"},
        },
    )
    def introspection(
        request: Request,
        agent_id: Annotated[
            str,
            Path(min_length=1, pattern=AGENT_ID_PATTERN, description="the agent's name"),
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
            float,
            Query(
                ge=0.0, le=1.0, allow_inf_nan=False, description="leave out sessions scoring less"
            ),
        ] = 0.5,
        include_iterations: Annotated[
            bool, Query(description="include each session's model turns and tool calls")
        ] = False,
        include_failures: Annotated[bool, Query(description="include failed sessions")] = True,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)] = None,
    ) -> Any:
        started = time.perf_counter()
        unknown = unknown_parameters(request)
        if unknown:
            return invalid(request, unknown)
        query = {
            "task_signature": task_signature,
            "limit": limit,
            "min_relevance": min_relevance,
            "include_iterations": include_iterations,
            "include_failures": include_failures,
        }
        record: dict[str, Any] = {"agent_id": agent_id, "query": query}
        if credentials is None:
            given = request.headers.get("authorization")
            message = (
                "Authorization must use the Bearer scheme: Authorization: Bearer <token>"
                if given
                else "missing bearer token: send Authorization: Bearer <token>"
            )
            return refusal(401, message, record)
        caller = agent_for_token(credentials.credentials, key)
        if caller is None:
            return refusal(
                401, "invalid token: issue one with `groundswell history token AGENT_ID`", record
            )
        record["caller"] = caller
        if caller != agent_id:
            return refusal(
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
        except (
            StoreUnavailable,
            sqlalchemy.exc.OperationalError,
            sqlalchemy.exc.InterfaceError,
        ) as exc:
            logger.warning(
                "history store error: %s: %s", type(exc).__name__, groundswell.scrub(str(exc))
            )
            return refusal(503, "the history store cannot be reached; try again", record)
        # Scrubbed again: rows stored before a secret was registered (or by an
        # older filter) are answered without it.
        sessions = groundswell.redact(
            [{**s.to_dict(), "relevance": round(score, 6)} for s, score in ranked]
        )
        record.update(
            status=200, count=len(sessions), ms=round((time.perf_counter() - started) * 1000, 2)
        )
        record_query(record)
        return {"agent_id": agent_id, "query": query, "count": len(sessions), "sessions": sessions}

    route = next(r for r in app.routes if getattr(r, "name", "") == "introspection")
    # The parameters the endpoint declares, so the unknown-parameter check cannot drift.
    app.state.query_parameters = tuple(p.alias for p in route.dependant.query_params)  # type: ignore[attr-defined]
    return app
