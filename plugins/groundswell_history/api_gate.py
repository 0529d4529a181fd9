"""What every route of the history API shares: who is calling, refusals, logs, events.

Every request (answered or refused) is logged on ``groundswell.history.api``;
introspection queries are also emitted to the event sinks as
``introspection.query`` events. What the API logs and answers goes through
`groundswell.scrub`, the scrubber every output uses: a credential sent by
mistake (``?access_token=...``) is never echoed in a 422 body, a log line or
an event, nor in uvicorn's own request log.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Annotated, Any

import sqlalchemy
from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

import groundswell
from groundswell import NodeStatus, NodeType, new_run_tree

from .api_models import Problem
from .auth import SECRET_ENV, Caller, caller_for_token
from .store import HistoryStore, StoreUnavailable

__all__ = ["STORE_ERRORS", "Credentials", "Gate", "QueryEvents", "refusals", "scrub_server_logs"]

logger = logging.getLogger("groundswell.history.api")
REDACTED = "**********"
STORE_ERRORS = (StoreUnavailable, sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)
_BEARER = HTTPBearer(auto_error=False, description="an agent's token, or an operator's")
#: The ``Authorization: Bearer`` credentials of a request, if any.
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)]
_REFUSALS = {
    401: "no token, or not a valid token",
    403: "the token belongs to another agent",
    404: "no such session among the token's sessions",
    409: "the session's state does not allow it",
    422: "invalid parameters or body, explained in message",
    503: "the history store cannot be reached",
}


def refusals(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` entries of the given refusals."""
    return {code: {"model": Problem, "description": _REFUSALS[code]} for code in statuses}


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


class _ScrubbedLog(logging.Filter):
    """Scrubs secrets from the records of the logger it is added to.

    `scrub_server_logs` adds it to uvicorn's loggers, whose request lines would
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


def scrub_server_logs() -> None:
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


def problem(status: int, message: str) -> JSONResponse:
    """A refusal in the shape `Problem` documents."""
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(
        status_code=status, content={"detail": message, "message": message}, headers=headers
    )


def _kind(path: str) -> str:
    if path.startswith("/api/introspection/"):
        return "introspection query"
    if path.startswith("/api/sessions"):
        return "sessions request"
    if path.startswith("/api/waits"):
        return "waits request"
    return "history request"


@dataclass
class Gate:
    """The checks and records every route goes through (``store``: the history store,
    when the app serves history)."""

    store: HistoryStore | None
    secret: bytes
    events: QueryEvents = field(default_factory=QueryEvents)

    def record(self, request: Request, record: dict[str, Any]) -> None:
        """Log one request's record (and emit it, for an introspection query)."""
        record = groundswell.redact(record)  # it holds what the caller sent
        # Without the prefix the app is mounted under, if it is.
        kind = _kind(request.url.path.removeprefix(request.scope.get("root_path", "")))
        outcome = "answered" if record.get("status") in (200, 201) else "refused"
        logger.info("%s %s: %s", kind, outcome, record)
        if kind == "introspection query":
            self.events.emit(record)

    def refuse(
        self, request: Request, status: int, message: str, record: dict[str, Any]
    ) -> JSONResponse:
        """Record a refusal and answer it."""
        record.update(status=status, error=message)
        self.record(request, record)
        return problem(status, message)

    def caller(
        self,
        request: Request,
        credentials: HTTPAuthorizationCredentials | None,
        record: dict[str, Any],
    ) -> Caller | JSONResponse:
        """Who sent the request, or the 401 refusal; checks unknown parameters first."""
        unknown = self.unknown_parameters(request)
        if unknown:
            raise RequestValidationError(unknown)
        if credentials is None:
            given = request.headers.get("authorization")
            message = (
                "Authorization must use the Bearer scheme: Authorization: Bearer <token>"
                if given
                else "missing bearer token: send Authorization: Bearer <token>"
            )
            return self.refuse(request, 401, message, record)
        caller = caller_for_token(credentials.credentials, self.secret)
        if caller is None:
            return self.refuse(
                request,
                401,
                "invalid token: it was not signed with this server's secret. Issue one with "
                "`groundswell history token AGENT_ID` where the server runs; if you did, the "
                "server and the `token` command see different secrets: give both the same "
                f"{SECRET_ENV} (or the same GROUNDSWELL_HOME, where the secret file is)",
                record,
            )
        record["caller"] = caller.label
        return caller

    def forbidden(
        self, request: Request, caller: Caller, agent_id: str, record: dict[str, Any]
    ) -> JSONResponse | None:
        """The 403 refusal when ``caller`` may not see ``agent_id``'s sessions, else ``None``."""
        if caller.may_see(agent_id):
            return None
        return self.refuse(
            request,
            403,
            f"this token belongs to agent {caller.name!r}; an agent can read only its own "
            "sessions (to see every agent's, use an operator token: "
            "`groundswell history token --operator`)",
            record,
        )

    def unavailable(
        self, request: Request, exc: BaseException, record: dict[str, Any]
    ) -> JSONResponse:
        """The 503 refusal for a store error."""
        logger.warning(
            "history store error: %s: %s", type(exc).__name__, groundswell.scrub(str(exc))
        )
        return self.refuse(request, 503, "the history store cannot be reached; try again", record)

    def unknown_parameters(self, request: Request) -> list[dict[str, Any]]:
        """A 422 error for each query parameter the route does not declare.

        A misspelt parameter (``?limt=5``) would otherwise be ignored without a word.
        """
        route = request.scope.get("route")
        dependant = getattr(route, "dependant", None)
        if dependant is None:
            return []
        known = [p.alias for p in dependant.query_params]
        return [
            {
                "type": "extra_forbidden",
                "loc": ["query", name],
                "msg": f"unknown parameter; use {', '.join(known)}"
                if known
                else "unknown parameter; this route takes none",
                "input": request.query_params.get(name),
            }
            for name in dict.fromkeys(request.query_params)
            if name not in known
        ]

    def invalid(self, request: Request, errors: list[dict[str, Any]]) -> JSONResponse:
        """The 422 answer naming every problem at once (and its record)."""
        # Unknown parameters are named too, unless these errors are them already.
        if not any(
            e.get("type") == "extra_forbidden" and (e.get("loc") or [""])[0] == "query"
            for e in errors
        ):
            errors = errors + self.unknown_parameters(request)
        errors = _hide_secret_inputs(errors)
        parts = []
        for error in errors:
            where = ".".join(str(p) for p in error.get("loc", ())[1:]) or "request"
            given = error.get("input")
            shown = "" if given is None or isinstance(given, dict) else f" (got {given!r})"
            parts.append(f"{where}: {error.get('msg')}{shown}")
        message = "; ".join(parts) or "invalid request"
        record = {"path": request.url.path, "status": 422, "error": message}
        if "agent_id" in request.path_params:
            record = {"agent_id": request.path_params["agent_id"], **record}
        self.record(request, record)
        return JSONResponse(status_code=422, content={"detail": errors, "message": message})
