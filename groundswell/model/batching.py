"""Message Batches: model requests that wait at the same time go to the API as one batch.

Two steps, apart on purpose:

- `submit` puts one request (its Messages API body) into the batch being
  collected for its client: every request that arrives within
  `BatchTiming.window` of the first goes into one ``messages.batches.create``
  (the beta namespace's for beta requests; requests with other headers go in a
  batch of their own). It returns the request's `BatchTicket` once the batch
  exists.
- `wait_result` waits for a ticket's result. One poller per batch retrieves it,
  the first time after `BatchTiming.first_poll`, then at growing intervals up to
  `BatchTiming.max_poll`, until the batch has ended; then it reads the
  batch's results and hands each waiting request its own.

A ticket is all `wait_result` needs (with a client for the same account): a
durable execution engine can record the ticket `submit` returned and, after a
restart, wait for the result again without sending the request twice. On the
local engine both steps run in this process.

The timing comes from `configure`, else from ``GROUNDSWELL_BATCH_WINDOW``,
``GROUNDSWELL_BATCH_FIRST_POLL`` and ``GROUNDSWELL_BATCH_MAX_POLL`` (seconds).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import BatchUnanswered, ConfigurationError

__all__ = [
    "MAX_REQUESTS",
    "BatchTicket",
    "BatchTiming",
    "configure",
    "message_of",
    "split_request",
    "submit",
    "timing",
    "wait_result",
]

logger = logging.getLogger("groundswell.model")

#: The API's limit on the requests in one batch.
MAX_REQUESTS = 100_000
_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
# Request fields the SDK sends as headers: a batch's requests share its headers.
_HEADER_FIELDS = {
    "user_profile_id": "anthropic-user-profile-id",
    "workspace_id": "anthropic-workspace-id",
}
# The HTTP status the API answers each error type with (errored results carry the type only).
_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
# A poll that fails this many times in a row (connection errors, 429, 5xx) fails the wait.
_POLL_FAILURES = 5
_GROWTH = 1.5


@dataclass(frozen=True)
class BatchTiming:
    """How batched requests are collected and their batches polled, in seconds.

    ``window``: how long a batch collects requests after its first one;
    ``first_poll``: the wait before a batch is first retrieved; ``max_poll``:
    the longest wait between retrieves (each wait is 1.5 times the last).
    """

    window: float = 0.05
    first_poll: float = 2.0
    max_poll: float = 60.0

    def __post_init__(self) -> None:
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ConfigurationError(
                    f"batch timing: {item.name} must be a number of seconds >= 0, "
                    f"got {value!r:.40}; e.g. {item.name}={getattr(BatchTiming, item.name)}"
                )


_ENV = {
    "window": "GROUNDSWELL_BATCH_WINDOW",
    "first_poll": "GROUNDSWELL_BATCH_FIRST_POLL",
    "max_poll": "GROUNDSWELL_BATCH_MAX_POLL",
}
_timing: BatchTiming | None = None


def timing() -> BatchTiming:
    """The timing in force: `configure`'s, else the environment's, else the defaults."""
    global _timing
    if _timing is None:
        given: dict[str, float] = {}
        for name, variable in _ENV.items():
            raw = os.environ.get(variable)
            if raw is None or not raw.strip():
                continue
            try:
                given[name] = float(raw)
            except ValueError:
                raise ConfigurationError(
                    f"{variable} must be a number of seconds, got {raw!r:.40}"
                ) from None
        _timing = BatchTiming(**given)
    return _timing


def configure(
    *,
    window: float | None = None,
    first_poll: float | None = None,
    max_poll: float | None = None,
) -> BatchTiming:
    """Change the batch timing for this process; returns the timing in force before.

    Values left ``None`` stay as they are; ``configure(**vars(old))`` restores it.
    """
    global _timing
    before = timing()
    changes = {"window": window, "first_poll": first_poll, "max_poll": max_poll}
    _timing = dataclasses.replace(before, **{k: v for k, v in changes.items() if v is not None})
    return before


@dataclass(frozen=True)
class BatchTicket:
    """One request in a Message Batch: the batch, the request's ``custom_id``, and how to
    reach it (the beta namespace or not, the headers every call about the batch sends).

    ``headers`` may hold an agent's ``extra_headers``: do not record them where
    secrets must not go.
    """

    batch_id: str
    custom_id: str
    beta: bool = False
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)


def split_request(params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """A request's ``messages.create`` keywords as a batch request's ``params``, and the
    headers its batch must send.

    ``extra_body`` is merged into the params, as the SDK merges it into the
    body it sends; ``betas``, ``extra_headers`` and the fields the SDK sends as
    headers become headers.
    """
    body = {
        k: v
        for k, v in params.items()
        if k not in _HEADER_FIELDS and k not in ("betas", "extra_headers", "extra_body")
    }
    extra = params.get("extra_body")
    if extra:
        body.update(extra)
    headers: dict[str, str] = {}
    betas = params.get("betas")
    if betas:
        headers["anthropic-beta"] = ",".join(str(b) for b in betas)
    for name, header in _HEADER_FIELDS.items():
        if params.get(name) is not None:
            headers[header] = str(params[name])
    headers.update(params.get("extra_headers") or {})
    return body, headers


# -- collecting requests into batches ----------------------------------------------


class _Collecting:
    """The batch being collected for one client, namespace and set of headers."""

    def __init__(
        self, key: tuple[Any, ...], client: Any, beta: bool, headers: dict[str, str]
    ) -> None:
        self.key, self.client, self.beta, self.headers = key, client, beta, headers
        self.items: list[tuple[str, dict[str, Any], asyncio.Future[str]]] = []
        self.full = asyncio.Event()

    def unique(self, wanted: str | None) -> str:
        """``wanted`` when it fits the API's pattern and is free in this batch, else one made."""
        taken = {cid for cid, _, _ in self.items}
        if wanted is not None and _CUSTOM_ID.match(wanted) and wanted not in taken:
            return wanted
        n = len(self.items)
        while f"request-{n}" in taken:
            n += 1
        return f"request-{n}"

    async def send_after(self, window: float) -> None:
        """Wait out the window (or until the batch is full), then create the batch.

        Whatever goes wrong on the way (a client without ``messages.batches``, an
        API error), every request still waiting gets the error: none waits forever.
        """
        try:
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.full.wait(), window)
            finally:
                if _collecting.get(self.key) is self:
                    del _collecting[self.key]
            items = [item for item in self.items if not item[2].done()]  # cancelled: out
            if not items:
                return
            api = _batches_api(self.client, self.beta)
            requests = [{"custom_id": cid, "params": body} for cid, body, _ in items]
            batch = await api.create(requests=requests, extra_headers=self.headers or None)
            # A request cancelled while the batch was created has nobody to wait for it.
            live = [(cid, submitted) for cid, _, submitted in items if not submitted.done()]
            if not live:
                logger.debug("Message Batch %s: every request in it was cancelled", batch.id)
                return
            poller = _poller(self.client, str(batch.id), self.beta, self.headers)
            for cid, submitted in live:
                poller.future(cid)  # registered before anyone waits: no result is missed
                submitted.set_result(str(batch.id))
        except BaseException as exc:
            _settle([submitted for _, _, submitted in self.items], exc)
            raise


_collecting: dict[tuple[Any, ...], _Collecting] = {}
# The tasks that send batches and poll them, held until they end.
_tasks: set[asyncio.Task[Any]] = set()


def _start(coroutine: Any) -> asyncio.Task[Any]:
    task = asyncio.get_running_loop().create_task(coroutine)
    _tasks.add(task)
    task.add_done_callback(_finished)
    return task


def _finished(task: asyncio.Task[Any]) -> None:
    _tasks.discard(task)
    if not task.cancelled() and task.exception() is not None:
        # The waiters got the error already; this only keeps asyncio from warning.
        logger.debug("a Message Batch could not be sent: %r", task.exception())


async def submit(
    client: Any,
    body: dict[str, Any],
    *,
    beta: bool = False,
    headers: Mapping[str, str] | None = None,
    custom_id: str | None = None,
) -> BatchTicket:
    """Send ``body`` (a batch request's ``params``) in the batch collecting for ``client``.

    ``custom_id`` is used when it fits the API's pattern and is not taken in
    that batch (else one is made). Returns once the batch is created; an error
    creating it is raised as the SDK raised it.
    """
    loop = asyncio.get_running_loop()
    sent = dict(headers or {})
    key = (loop, id(client), beta, tuple(sorted(sent.items())))
    group = _collecting.get(key)
    if group is None:
        group = _collecting[key] = _Collecting(key, client, beta, sent)
        _start(group.send_after(timing().window))
    cid = group.unique(custom_id)
    submitted: asyncio.Future[str] = loop.create_future()
    group.items.append((cid, body, submitted))
    if len(group.items) >= MAX_REQUESTS:
        del _collecting[key]  # full: the next request starts a batch of its own
        group.full.set()
    try:
        batch_id = await submitted
    except asyncio.CancelledError:
        # Cancelled just as the batch was created: nobody will wait for this result.
        if submitted.done() and not submitted.cancelled():
            _release(client, submitted.result(), cid)
        raise
    return BatchTicket(batch_id, cid, beta, sent)


# -- waiting for results ---------------------------------------------------------------


class _Poller:
    """Polls one batch until it ends, then hands each waiting request its result."""

    def __init__(
        self, key: tuple[Any, ...], client: Any, batch_id: str, beta: bool, headers: Any
    ) -> None:
        self.key, self.client, self.batch_id, self.beta = key, client, batch_id, beta
        self.headers = dict(headers) or None
        self.futures: dict[str, asyncio.Future[Any]] = {}
        self.task: asyncio.Task[Any] | None = None

    def future(self, custom_id: str) -> asyncio.Future[Any]:
        """The future ``custom_id``'s result is handed to (a new one if the last was cancelled)."""
        found = self.futures.get(custom_id)
        if found is None or found.cancelled():
            found = self.futures[custom_id] = asyncio.get_running_loop().create_future()
            found.add_done_callback(self._left)
        return found

    def _left(self, done: asyncio.Future[Any]) -> None:
        """Stop polling once every waiter has been cancelled; the batch itself goes on."""
        if not done.cancelled() or not all(f.cancelled() for f in self.futures.values()):
            return
        # Out of `_polling` now, so a later waiter starts a poller of its own rather than
        # joining this one as it stops.
        if _polling.get(self.key) is self:
            del _polling[self.key]
        if self.task is not None:
            self.task.cancel()

    async def run(self) -> None:
        try:
            ended = await self._until_ended()
            if ended:
                await self._hand_out()
        except BaseException as exc:
            self._fail(exc)
            raise
        finally:
            if _polling.get(self.key) is self:
                del _polling[self.key]

    async def _until_ended(self) -> bool:
        api = _batches_api(self.client, self.beta)
        delay, failures = timing().first_poll, 0
        while True:
            await asyncio.sleep(delay)
            delay = min(max(delay, 0.001) * _GROWTH, timing().max_poll)
            if all(f.cancelled() for f in self.futures.values()):
                return False  # every waiter left; the batch itself goes on
            try:
                batch = await api.retrieve(self.batch_id, extra_headers=self.headers)
            except Exception as exc:
                failures += 1
                if failures >= _POLL_FAILURES or not _transient(exc):
                    raise
                logger.info(
                    "polling Message Batch %s failed (%r); trying again", self.batch_id, exc
                )
                continue
            failures = 0
            if batch.processing_status == "ended":
                return True

    async def _hand_out(self) -> None:
        api = _batches_api(self.client, self.beta)
        lines = await api.results(self.batch_id, extra_headers=self.headers)
        async for line in lines:
            waiting = self.futures.get(line.custom_id)
            if waiting is not None and not waiting.done():
                waiting.set_result(line.result)
        missing = LookupError(f"Message Batch {self.batch_id} has no result for this request")
        self._fail(missing)

    def _fail(self, exc: BaseException) -> None:
        _settle(list(self.futures.values()), exc)


def _settle(futures: list[asyncio.Future[Any]], exc: BaseException) -> None:
    """Fail the futures not done yet with ``exc`` (cancel them when it is a cancellation)."""
    for waiting in futures:
        if waiting.done():
            continue
        if isinstance(exc, asyncio.CancelledError):
            waiting.cancel()
        else:
            waiting.set_exception(exc)
            waiting.exception()  # seen: a future nobody awaits any more raises no warning


_polling: dict[tuple[Any, ...], _Poller] = {}


def _poller(client: Any, batch_id: str, beta: bool, headers: Mapping[str, str]) -> _Poller:
    key = (asyncio.get_running_loop(), id(client), batch_id)
    poller = _polling.get(key)
    if poller is None:
        poller = _polling[key] = _Poller(key, client, batch_id, beta, headers)
        poller.task = _start(poller.run())
    return poller


def _release(client: Any, batch_id: str, custom_id: str) -> None:
    """Cancel the result ``custom_id`` was registered for, as nobody will wait for it."""
    poller = _polling.get((asyncio.get_running_loop(), id(client), batch_id))
    waiting = poller.futures.get(custom_id) if poller is not None else None
    if waiting is not None:
        waiting.cancel()


async def wait_result(client: Any, ticket: BatchTicket) -> Any:
    """The result of ``ticket``'s request once its batch has ended (the SDK's result object:
    ``.type`` is ``succeeded``, ``errored``, ``canceled`` or ``expired``).

    Joins the batch's poller in this process, or starts one (a ticket from
    before a restart). A poll that keeps failing raises the SDK's error.
    """
    waiting = _poller(client, ticket.batch_id, ticket.beta, ticket.headers).future(ticket.custom_id)
    return await waiting


def message_of(result: Any, client: Any, ticket: BatchTicket) -> Any:
    """The SDK ``Message`` of a ``succeeded`` result; else raises what a direct call would.

    ``errored``: the SDK's status error for the result's error type (the agent
    loop turns it into a `ModelAPIError`); ``canceled`` or ``expired``:
    `BatchUnanswered`.
    """
    kind = result.type
    if kind == "succeeded":
        return result.message
    if kind == "errored":
        raise _status_error(result.error, client, ticket)
    why = (
        "its batch expired before the API processed it (the API gives a batch 24 hours); "
        "send it again, or without batch=True when it cannot wait that long"
        if kind == "expired"
        else "its batch was canceled first"
    )
    raise BatchUnanswered(
        f"the model call in Message Batch {ticket.batch_id} (custom_id {ticket.custom_id}) "
        f"got no answer: {why}",
        outcome=str(kind),
        batch_id=ticket.batch_id,
        custom_id=ticket.custom_id,
    )


def _status_error(error: Any, client: Any, ticket: BatchTicket) -> Exception:
    import anthropic
    import httpx2

    body: dict[str, Any] = error.model_dump(mode="json", exclude_none=True)
    inner = body.get("error")
    status = _STATUS.get(str(inner.get("type") if isinstance(inner, dict) else ""), 500)
    base = str(getattr(client, "base_url", "https://api.anthropic.com/")).rstrip("/")
    url = f"{base}/v1/messages/batches/{ticket.batch_id}/results"
    response = httpx2.Response(status, request=httpx2.Request("GET", url), json=body)
    message = f"Error code: {status} - {body}"
    make = getattr(client, "_make_status_error", None)  # the SDK's class for the status
    if callable(make):
        made: Exception = make(message, body=body, response=response)
        return made
    return anthropic.APIStatusError(message, response=response, body=body)


def _transient(exc: Exception) -> bool:
    import anthropic

    if isinstance(exc, anthropic.APIStatusError):
        return exc.status_code in (408, 409, 429) or exc.status_code >= 500
    return isinstance(exc, anthropic.APIConnectionError)


def _batches_api(client: Any, beta: bool) -> Any:
    path = "beta.messages.batches" if beta else "messages.batches"
    api = client
    for name in path.split("."):
        api = getattr(api, name, None)
        if api is None:
            raise ConfigurationError(
                f"batch=True sends model calls as Message Batches, but the agent's client "
                f"({type(client).__name__}) has no {path}; give it an anthropic.AsyncAnthropic "
                "client (or one that passes messages.batches through), or turn batch off"
            )
    return api
