"""Answering waits from another process: the ``groundswell serve`` waits API, as Python.

``connect(url, token=...)`` returns a `WaitsClient` for the URL's scheme:
``http://`` and ``https://`` talk to an app serving ``/api/waits`` (``groundswell
serve``, or ``groundswell_history.serving()`` in the process that runs the
workflows); any other scheme needs a backend a plugin registers with
`register_scheme` (a durable engine answering through its database, say). Its
``pending``, ``approve``, ``reject`` and ``answer`` mirror `groundswell.waits`
and raise the same errors: `UnknownWait` (404), `WaitClosed` (409),
`InvalidAnswer` (422); `WaitsServerError` when the server cannot be reached or
refuses the token (401, 403). ``groundswell pending`` and its sibling commands
are built on it.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

import httpx2

from ..errors import ConfigurationError, GroundswellError, InvalidAnswer, UnknownWait, WaitClosed
from ..plugins.manager import get_plugin_manager
from ..scrubbing.scrubber import REDACTED, scrub
from .approval import check_approval_input
from .core import Answered, Decision, Wait

__all__ = [
    "DEFAULT_URL",
    "TOKEN_ENV",
    "URL_ENV",
    "HTTPWaits",
    "WaitsClient",
    "WaitsServerError",
    "connect",
    "register_scheme",
]

#: Where ``groundswell serve`` and ``groundswell_history.serving()`` listen by default.
DEFAULT_URL = "http://127.0.0.1:8765"
#: The environment variables `connect` reads when no URL or token is given.
URL_ENV = "GROUNDSWELL_SERVE_URL"
TOKEN_ENV = "GROUNDSWELL_TOKEN"
TIMEOUT_S = 30.0


class WaitsServerError(GroundswellError):
    """The waits server cannot be reached, or refused the request (a token it does not
    accept: ``status`` 401, or one that may not see what was asked: 403).

    ``url`` is the server's URL with any credentials in it masked, as in the message.
    """

    def __init__(self, message: str, *, url: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.status = status


@runtime_checkable
class WaitsClient(Protocol):
    """The open waits of another process: list them, and decide one.

    ``with contextlib.closing(connect(...)) as client:`` closes it at the end.
    """

    url: str

    def pending(
        self, *, kind: str | None = None, agent: str | None = None, run_id: str | None = None
    ) -> list[Wait]:
        """The open waits the token may see, oldest first; filtered when asked."""
        ...

    def approve(
        self, wait_id: str, *, input: dict[str, Any] | None = None, by: str | None = None
    ) -> Answered:
        """Approve the approval wait ``wait_id``; ``input`` replaces the tool's input."""
        ...

    def reject(self, wait_id: str, reason: str, *, by: str | None = None) -> Answered:
        """Reject the approval wait ``wait_id``, saying why."""
        ...

    def answer(self, wait_id: str, value: Any, *, by: str | None = None) -> Answered:
        """Answer the question wait ``wait_id`` with ``value`` (JSON)."""
        ...

    def close(self) -> None:
        """Release the connection."""
        ...


#: Makes the client for a URL of its scheme: ``factory(url, token)``.
Backend = Callable[[str, str | None], WaitsClient]


class HTTPWaits:
    """A `WaitsClient` over HTTP(S): the ``/api/waits`` routes of a ``groundswell serve``
    app at ``url`` (its base: ``http://HOST:PORT``, or the prefix it is mounted under),
    with ``token`` as the bearer token."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url.rstrip("/")
        # What messages and errors show: a password or key in the URL never reaches them.
        self._shown = scrub(self.url)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx2.Client(base_url=self.url, headers=headers, timeout=TIMEOUT_S)
        self._token_given = bool(token)

    def pending(
        self, *, kind: str | None = None, agent: str | None = None, run_id: str | None = None
    ) -> list[Wait]:
        query = {k: v for k, v in (("kind", kind), ("agent", agent), ("run_id", run_id)) if v}
        body = self._send("GET", "/api/waits", params=query)
        return [_wait(item) for item in body.get("waits", [])]

    def approve(
        self, wait_id: str, *, input: dict[str, Any] | None = None, by: str | None = None
    ) -> Answered:
        check_approval_input(wait_id, input)
        return self._decide(wait_id, "approve", {"input": input, "by": by})

    def reject(self, wait_id: str, reason: str, *, by: str | None = None) -> Answered:
        return self._decide(wait_id, "reject", {"reason": reason, "by": by})

    def answer(self, wait_id: str, value: Any, *, by: str | None = None) -> Answered:
        return self._decide(wait_id, "answer", {"value": value, "by": by})

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> HTTPWaits:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _decide(self, wait_id: str, verb: str, body: dict[str, Any]) -> Answered:
        if not isinstance(wait_id, str) or not wait_id:
            raise UnknownWait(f"a wait id is a non-empty string, got {wait_id!r}")
        path = f"/api/waits/{urllib.parse.quote(wait_id, safe='')}/{verb}"
        sent = {k: v for k, v in body.items() if v is not None or k == "value"}
        answered = self._send("POST", path, json=sent, wait_id=wait_id)
        decision = answered.get("decision") or {}
        return Answered(
            _wait(answered.get("wait") or {}),
            Decision(
                kind=decision.get("kind", verb),
                input=decision.get("input"),
                reason=decision.get("reason"),
                value=decision.get("value"),
                by=decision.get("by"),
                at=decision.get("at"),
            ),
        )

    def _send(self, method: str, path: str, *, wait_id: str = "", **kw: Any) -> dict[str, Any]:
        try:
            response = self._client.request(method, path, **kw)
        except httpx2.TransportError as exc:
            raise WaitsServerError(
                f"cannot reach a waits server at {self._shown} ({type(exc).__name__}: "
                f"{scrub(str(exc)) or 'no answer'}). Waits are served by the process that "
                "runs the workflows: start groundswell_history.serving() there (or "
                f"`groundswell serve`), and point at it with --url or {URL_ENV}",
                url=self._shown,
            ) from None
        try:
            body = response.json()
        except ValueError:
            body = None
        status = response.status_code
        if status == 200 and isinstance(body, dict):
            return body
        message = body.get("message") if isinstance(body, dict) else None
        said = scrub(str(message)) if message else ""
        if status == 401:
            hint = (
                ""
                if self._token_given
                else f"; give a token with --token or {TOKEN_ENV} "
                "(`groundswell history token --operator` prints one where the server runs)"
            )
            raise WaitsServerError(
                f"{self._shown} refused the request (401): {said or 'no valid token'}{hint}",
                url=self._shown,
                status=401,
            )
        if status == 403:
            raise WaitsServerError(
                f"{self._shown} refused the request (403): {said}", url=self._shown, status=403
            )
        if status == 404 and said:
            raise UnknownWait(said, wait_id=wait_id)
        if status == 404:
            raise WaitsServerError(
                f"{self._shown} serves no waits API ({method} {path} is not there): point --url "
                f"or {URL_ENV} at a `groundswell serve` app (`groundswell history serve` has "
                "no waits)",
                url=self._shown,
                status=404,
            )
        if status == 409:
            closed = body.get("closed", "") if isinstance(body, dict) else ""
            raise WaitClosed(said or "the wait is closed already", wait_id=wait_id, closed=closed)
        if status == 422:
            detail = body.get("detail") if isinstance(body, dict) else None
            errors = [e for e in detail if isinstance(e, dict)] if isinstance(detail, list) else []
            raise InvalidAnswer(said or "the request was invalid", wait_id=wait_id, errors=errors)
        raise WaitsServerError(
            f"unexpected answer from {self._shown} to {method} {path}: status {status}"
            + (f": {said}" if said else f" ({scrub(response.text[:200])!r})"),
            url=self._shown,
            status=status,
        )


def _schemeless(url: str) -> str:
    """A URL given without its scheme, for a message: scrubbed, and a ``user:password@``
    before the host masked too (scrubbing finds those only after a scheme)."""
    authority, slash, rest = scrub(url).partition("/")
    if "@" in authority:
        authority = f"{REDACTED}@{authority.rpartition('@')[2]}"
    return authority + slash + rest


def _wait(data: dict[str, Any]) -> Wait:
    return Wait(
        id=str(data.get("id", "")),
        kind=str(data.get("kind", "")),
        run_id=str(data.get("run_id", "")),
        node_id=str(data.get("node_id", "")),
        request=dict(data.get("request") or {}),
        opened_at=float(data.get("opened_at") or 0.0),
        deadline=data.get("deadline"),
    )


_schemes: dict[str, Backend] = {"http": HTTPWaits, "https": HTTPWaits}
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")  # RFC 3986


def register_scheme(scheme: str, factory: Backend) -> None:
    """Answer waits at ``scheme://...`` URLs with ``factory(url, token)``'s client.

    For plugins whose waits outlive a process (a durable engine's database, say),
    so the commands and `connect` reach them without a server. A plugin calls it
    from its ``register_cli_commands`` hook: `connect` asks the plugins for their
    commands before it gives up on a scheme it does not know.
    """
    if not isinstance(scheme, str) or not _SCHEME.fullmatch(scheme):
        raise ConfigurationError(
            f"a URL scheme is a word such as 'postgresql' (no '://'), got {scheme!r}"
        )
    if not callable(factory):
        raise ConfigurationError(f"register_scheme({scheme!r}, factory): factory must be callable")
    _schemes[scheme.lower()] = factory


def connect(url: str | None = None, *, token: str | None = None) -> WaitsClient:
    """The client for the waits at ``url`` (default: ``GROUNDSWELL_SERVE_URL``, else
    `DEFAULT_URL`), sending ``token`` (default: ``GROUNDSWELL_TOKEN``)."""
    url = url or os.environ.get(URL_ENV) or DEFAULT_URL
    token = token or os.environ.get(TOKEN_ENV) or None
    scheme, sep, _ = url.partition("://")
    if not sep or not scheme:
        raise ConfigurationError(
            f"give the waits server's URL with its scheme, e.g. {DEFAULT_URL} "
            f"(got {_schemeless(url)!r})"
        )
    factory = _schemes.get(scheme.lower())
    if factory is None:
        # Plugins register their schemes as they register their commands: ask them.
        get_plugin_manager().cli_commands()
        factory = _schemes.get(scheme.lower())
    if factory is None:
        known = ", ".join(f"{s}://" for s in sorted(_schemes))
        raise ConfigurationError(
            f"no waits backend answers {scheme}:// URLs (known: {known}); a plugin may register "
            "one (groundswell.waits.client.register_scheme). To answer the waits of a running "
            f"process, give the http:// URL of its server, e.g. {DEFAULT_URL}"
        )
    return factory(url, token)
