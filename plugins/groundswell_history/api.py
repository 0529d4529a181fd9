"""The history HTTP API: sessions, introspection, self-improvement and usage over HTTP.

``create_app(store)`` returns a FastAPI application serving
``GET /api/introspection/{agent_id}`` (an agent's past sessions ranked by
relevance to a task), the sessions API (``/api/sessions``: list, get, get
iterations, create, update, terminate), ``GET /api/retries``,
``GET /api/failures``, ``GET /api/usage`` and ``GET /api/health``; its
OpenAPI schema is at ``/openapi.json`` and browsable at ``/docs``. Serve it
with ``groundswell history serve``.

Every route but ``/api/health`` needs a bearer token (`groundswell_history.auth`):
an agent's token (``groundswell history token AGENT_ID``) sees and changes
only that agent's sessions; an operator token (``groundswell history token
--operator``) sees every agent's.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import FastAPI, Path, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException as StarletteHTTPException

import groundswell

from .api_gate import (
    STORE_ERRORS,
    Credentials,
    Gate,
    QueryEvents,
    logger,
    problem,
    refusals,
    scrub_server_logs,
)
from .api_models import AGENT_ID_PATTERN, TEXT_PATTERN, IntrospectionResponse
from .auth import (
    SECRET_ENV,
    agent_for_token,
    caller_for_token,
    issue_operator_token,
    issue_token,
    load_secret,
)
from .relevance import task_signature as make_signature
from .store import SCHEMA_VERSION, HistoryStore, default_url

__all__ = [
    "SECRET_ENV",
    "add_history_routes",
    "agent_for_token",
    "caller_for_token",
    "create_app",
    "issue_operator_token",
    "issue_token",
    "load_secret",
    "make_app",
]

MAX_LIMIT = 100


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


#: Query parameters that may be given more than once (a list).
LIST_PARAMETERS = frozenset({"file_patterns"})


def create_app(store: HistoryStore | str | None = None, *, secret: bytes | None = None) -> FastAPI:
    """The history API over ``store`` (a store, a SQLAlchemy URL, or the default store).

    A store it opens from a URL (or the default) it closes when the app shuts down;
    a store given is left open for its owner.
    """
    chosen = store if isinstance(store, HistoryStore) else HistoryStore(store or default_url())
    app, gate = make_app(
        chosen,
        secret,
        close_store=chosen is not store,
        title="Groundswell history API",
        description=(
            "Agents' past sessions: ranked by relevance to a task (introspection), listed, "
            "created, updated and terminated (sessions), with retry history, failure analysis "
            "and usage metrics. Every request but /api/health needs a bearer token "
            "(`groundswell history token AGENT_ID`): an agent's token opens only its own "
            "sessions; an operator token (`--operator`) opens every agent's."
        ),
    )
    add_history_routes(app, gate, chosen)
    return app


def make_app(
    store: HistoryStore | None,
    secret: bytes | None,
    *,
    close_store: bool,
    title: str,
    description: str,
) -> tuple[FastAPI, Gate]:
    """An app with no routes yet, and the `Gate` its routes go through.

    It answers every refusal in one shape (401s, 422s naming each problem,
    unknown or repeated parameters), scrubs the server's logs, and at shutdown
    ends the query-event run and closes ``store`` when ``close_store``.
    """
    gate = Gate(store, load_secret() if secret is None else secret, QueryEvents())
    scrub_server_logs()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        for start in app.state.starters:  # what routes added later need while serving
            start()
        yield
        for close in app.state.closers:  # what routes added later must release
            close()
        gate.events.close()
        if close_store and store is not None:  # opened here, so released here
            store.close()

    app = FastAPI(
        title=title, version=str(SCHEMA_VERSION), description=description, lifespan=lifespan
    )
    app.state.store = store
    app.state.events = gate.events
    app.state.gate = gate
    app.state.starters = []
    app.state.closers = []

    @app.middleware("http")
    async def one_value_each(request: Request, call_next: Any) -> Any:
        # FastAPI keeps the last of a repeated single-value parameter: a request that
        # says `task_id` twice is refused instead of being read as the second one.
        keys = [key for key, _ in request.query_params.multi_items()]
        twice = sorted({k for k in keys if keys.count(k) > 1 and k not in LIST_PARAMETERS})
        if twice:
            errors = [
                {
                    "type": "value_error",
                    "loc": ["query", key],
                    "msg": f"{key!r} was given {keys.count(key)} times: give it once",
                }
                for key in twice
            ]
            return gate.invalid(request, errors)
        return await call_next(request)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = jsonable_encoder(exc.errors(), custom_encoder={Exception: str})
        return gate.invalid(request, errors)

    @app.exception_handler(StarletteHTTPException)
    async def refused(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:  # FastAPI could not read the body (not UTF-8 JSON, say)
            error = {
                "type": "json_invalid",
                "loc": ["body"],
                "msg": "the body could not be read: send JSON text (UTF-8) with "
                "Content-Type: application/json",
            }
            return gate.invalid(request, [error])
        answer = problem(exc.status_code, str(exc.detail))
        answer.headers.update(exc.headers or {})
        return answer

    return app, gate


def add_history_routes(app: FastAPI, gate: Gate, chosen: HistoryStore) -> None:
    """Add the history API's routes over ``chosen`` to ``app`` (made by `make_app`)."""
    from .api_learning import add_learning_routes
    from .api_sessions import add_session_routes

    @app.get(
        "/api/health",
        summary="Is the API up, and can it read its store?",
        responses=refusals(503),
    )
    def health() -> Any:
        try:
            chosen.ping()
        except Exception as exc:
            logger.warning(
                "history store error: %s: %s", type(exc).__name__, groundswell.scrub(str(exc))
            )
            return problem(503, "the history store cannot be reached")
        return {"status": "ok", "schema_version": SCHEMA_VERSION}

    @app.get(
        # Like :path, so agent names with "/" in them work (escaped or not), and
        # line breaks too.
        "/api/introspection/{agent_id:groundswell_any_text}",
        response_model=IntrospectionResponse,
        # Sessions carry "iterations" only when asked for.
        response_model_exclude_unset=True,
        summary="An agent's own past sessions, most relevant first",
        responses=refusals(401, 403, 422, 503),
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
                description="task_signature() of the task at hand (64 lowercase hex digits); "
                "matches exactly or not at all (give title etc. for partial matches)",
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
        include_failures: Annotated[
            bool, Query(description="include failed and terminated sessions")
        ] = False,
        include_running: Annotated[
            bool, Query(description="include sessions that are still running")
        ] = False,
        title: Annotated[
            str | None,
            Query(
                min_length=1,
                max_length=1_000,
                pattern=TEXT_PATTERN,
                description="the task's title: with category and file_patterns, its signature "
                "is computed here and partial matches count (same title, category or a "
                "shared file pattern)",
            ),
        ] = None,
        category: Annotated[
            str | None,
            Query(max_length=1_000, pattern=TEXT_PATTERN, description="the task's category"),
        ] = None,
        file_patterns: Annotated[
            list[str] | None,
            Query(max_length=100, description="the task's file patterns (repeat the parameter)"),
        ] = None,
        credentials: Credentials = None,
    ) -> Any:
        started = time.perf_counter()
        query: dict[str, Any] = {
            "task_signature": task_signature,
            "title": title,
            "category": category,
            "file_patterns": list(file_patterns or ()),
            "limit": limit,
            "min_relevance": min_relevance,
            "include_iterations": include_iterations,
            "include_failures": include_failures,
            "include_running": include_running,
        }
        record: dict[str, Any] = {"agent_id": agent_id, "query": query}
        caller = gate.caller(request, credentials, record)
        if isinstance(caller, JSONResponse):
            return caller
        refused = gate.forbidden(request, caller, agent_id, record)
        if refused is not None:
            return refused
        signature: str | None = task_signature
        if title is not None:
            try:
                signature = make_signature(title, category, query["file_patterns"])
            except ValueError as exc:  # a title of spaces only
                return gate.invalid(
                    request,
                    [{"type": "value_error", "loc": ["query", "title"], "msg": str(exc)}],
                )
            if task_signature is not None and task_signature != signature:
                return gate.invalid(
                    request,
                    [
                        {
                            "type": "value_error",
                            "loc": ["query", "task_signature"],
                            "msg": "is not the signature of title, category and file_patterns; "
                            "give one or the other",
                            "input": task_signature,
                        }
                    ],
                )
            query["task_signature"] = str(signature)
        elif category is not None or file_patterns:
            return gate.invalid(
                request,
                [
                    {
                        "type": "missing",
                        "loc": ["query", "title"],
                        "msg": "category and file_patterns describe a task: give its title too",
                        "input": None,
                    }
                ],
            )
        try:
            ranked = chosen.relevant_sessions(
                agent_id,
                task_signature=signature,
                limit=limit,
                min_relevance=min_relevance,
                include_iterations=include_iterations,
                include_failures=include_failures,
                include_running=include_running,
            )
        except STORE_ERRORS as exc:
            return gate.unavailable(request, exc, record)
        scores = [score for _, score in ranked]
        if not caller.operator:  # usage metrics count an agent's own queries
            try:
                chosen.record_query(agent_id, "api", scores)
            except Exception as exc:  # metrics must never cost the query
                logger.warning(
                    "usage not recorded: %s: %s", type(exc).__name__, groundswell.scrub(str(exc))
                )
        # Scrubbed again: rows stored before a secret was registered (or by an
        # older filter) are answered without it.
        sessions = groundswell.redact([s.to_dict(score) for s, score in ranked])
        record.update(
            status=200,
            count=len(sessions),
            average_relevance=round(sum(scores) / len(scores), 6) if scores else None,
            ms=round((time.perf_counter() - started) * 1000, 2),
        )
        gate.record(request, record)
        return {"agent_id": agent_id, "query": query, "count": len(sessions), "sessions": sessions}

    add_session_routes(app, gate, chosen)
    add_learning_routes(app, gate, chosen)
