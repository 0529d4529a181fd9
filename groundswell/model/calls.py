"""Calling ``anthropic.AsyncAnthropic``: one model round trip, its retries and its errors.

The request comes from `groundswell.model.requests.build_request`. SDK errors
become `ModelAPIError` with the SDK's exception as ``__cause__``. Failed
requests are retried as the SDK would, with a cap on the wait a
``Retry-After`` asks for (`groundswell.model.retries`); a stream that ends
before its ``message_stop`` is an error, never a complete answer.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import ModelAPIError
from ..scrubbing import sdk_logs as _sdk_logs
from .requests import uses_beta
from .retries import (
    DEFAULT_MAX_RETRY_WAIT,
    error_body,
    retry_after,
    retry_delay,
    without_sdk_retries,
)

if TYPE_CHECKING:
    import anthropic

# anthropic (and httpx2 under it) take about a second to import: they are imported
# where a model is called or an error classified, so that importing the agent's
# building blocks (e.g. to define a Middleware in a plugin) stays cheap.

__all__ = ["api_error", "call_model", "is_retryable_stream_error"]

# Error types that mean "try that turn again" when they arrive mid-stream.
_RETRYABLE_STREAM_ERRORS = {"overloaded_error": 529, "api_error": 500, "timeout_error": 504}


def api_error(exc: Exception, model: str) -> ModelAPIError:
    """A `ModelAPIError` describing an SDK exception (raise it ``from exc``).

    A `ModelAPIError` already (a wait too long, say) is returned as it is.
    """
    import anthropic
    import httpx2

    if isinstance(exc, ModelAPIError):
        return exc
    if isinstance(exc, anthropic.APIStatusError):
        kind, message = error_body(exc)
        status = exc.status_code
        if status == 200 and kind:  # an error event in the middle of a stream
            status = _RETRYABLE_STREAM_ERRORS.get(kind, 500)
        hint = {
            401: " (check ANTHROPIC_API_KEY or the client's api_key)",
            403: " (the key lacks permission for this model or feature)",
            404: f" (is {model!r} a model name your key can use?)",
            402: " (billing: check the account's credit balance)",
            429: " (rate limited; the retries are used up)",
        }.get(status, "")
        return ModelAPIError(
            f"Anthropic API error {status} {kind}: {message}{hint}",
            status_code=status,
            error_type=kind or None,
            retry_after=retry_after(exc.response.headers),
        )
    if isinstance(exc, anthropic.APITimeoutError):
        return ModelAPIError("request to the Anthropic API timed out", status_code=None)
    if isinstance(exc, anthropic.APIConnectionError):
        return ModelAPIError(f"could not reach the Anthropic API: {exc}", status_code=None)
    if isinstance(exc, httpx2.TransportError):
        return ModelAPIError(
            f"the connection to the Anthropic API broke: {type(exc).__name__}: {exc}",
            status_code=None,
        )
    if isinstance(exc, _IncompleteStream):
        return ModelAPIError(
            f"the connection to the Anthropic API broke: {exc}, so the answer is incomplete",
            status_code=None,
        )
    if isinstance(exc, json.JSONDecodeError):  # the SDK reads a 200 body that is not JSON
        return ModelAPIError(
            f"the Anthropic API answered with a body that is not JSON ({exc}): a proxy or a "
            "broken connection cut it off; try again",
            status_code=200,
        )
    return ModelAPIError(f"model call failed: {type(exc).__name__}: {exc}", status_code=None)


def is_retryable_stream_error(exc: Exception) -> bool:
    """True for an overload/server error event or a dropped connection in mid-stream."""
    import anthropic
    import httpx2

    if isinstance(exc, anthropic.APIStatusError) and exc.status_code == 200:
        return error_body(exc)[0] in _RETRYABLE_STREAM_ERRORS
    # Failed connections are retried by `call_model`, but not a body that breaks off.
    return isinstance(exc, httpx2.TransportError | _IncompleteStream)


# The logging module's registry of loggers (one dict for the process).
_LOGGERS = logging.Logger.manager.loggerDict


async def call_model(
    client: anthropic.AsyncAnthropic,
    params: dict[str, Any],
    on_delta: Callable[[str, str], None] | None = None,
    max_wait: float | None = None,
    on_wait: Callable[[float, int | None, int], None] | None = None,
    beta: bool | None = None,
) -> Any:
    """One model round trip; streams when ``on_delta(kind, text)`` is given.

    Retries as the SDK would, the client's ``max_retries`` times, but waits at
    most ``max_wait`` seconds (None: `DEFAULT_MAX_RETRY_WAIT`) for a ``Retry-After``
    (`groundswell.model.retries`);
    ``on_wait(seconds, status, retry)`` hears of each wait before it starts.
    ``beta`` says whether ``params`` go to the SDK's beta namespace (None: `uses_beta`).
    """
    if len(_LOGGERS) != _sdk_logs.known:  # loggers made since (the transport's): filtered too
        _sdk_logs.install()
    sender: Any = client
    retries = getattr(client, "max_retries", 0)
    if retries:
        sender = without_sdk_retries(client)
        if sender is None:  # a client that runs its own retries
            sender, retries = client, 0
    if beta is None:
        beta = uses_beta(params)
    api: Any = sender.beta.messages if beta else sender.messages
    taken = 0
    while True:
        try:
            if on_delta is None:
                try:
                    return await api.create(**params)
                except ValueError as exc:
                    # The SDK refuses non-streaming requests that may run past ten
                    # minutes (a large max_tokens); stream those, keep the final message.
                    if "streaming" not in str(exc).lower():
                        raise
            event: Any = None
            async with api.stream(**params) as stream:
                async for event in stream:
                    if on_delta is None:
                        continue
                    if event.type == "text":
                        on_delta("text", event.text)
                    elif event.type == "input_json":
                        on_delta("tool_input", event.partial_json)
                if event is None or event.type != "message_stop":
                    raise _IncompleteStream(stream)
                return await stream.get_final_message()
        except Exception as exc:
            if taken >= retries:
                raise
            if max_wait is None:
                max_wait = DEFAULT_MAX_RETRY_WAIT
            delay = retry_delay(exc, taken, max_wait=max_wait, model=str(params["model"]))
            if delay is None:
                raise
            taken += 1
            if on_wait is not None:
                on_wait(delay[0], delay[1], taken)
            await asyncio.sleep(delay[0])


class _IncompleteStream(Exception):
    """The answer's stream ended, cleanly, before its ``message_stop``: the answer is partial."""

    def __init__(self, stream: Any) -> None:
        try:
            blocks = stream.current_message_snapshot.content
        except AssertionError:  # not even a message_start
            blocks = ()
        got = sum(len(getattr(b, "text", "") or "") for b in blocks)
        super().__init__(f"the answer's stream ended before message_stop, after {got} characters")
