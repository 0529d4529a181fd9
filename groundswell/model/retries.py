"""Retrying a failed Messages API request the SDK's way, with ``Retry-After`` capped.

The SDK alone waits whatever a ``retry-after`` header asks, an hour if the API
says so, without a word. So `groundswell.model.calls.call_model` sends through a
copy of the client with the SDK's retries off (`without_sdk_retries`, made once
per client) and retries itself with the policy the SDK documents:

- up to the client's ``max_retries`` retries;
- of a connection error or timeout, or an answer with status 408, 409, 429 or
  500 and above, unless an ``x-should-retry`` header says otherwise;
- after the wait the API asks for (``retry-after-ms``, else ``retry-after`` in
  seconds or as an HTTP date), or else 0.5 s doubling up to 8 s, less up to a
  quarter of it at random.

A wait the API asks for beyond ``max_retry_wait`` fails at once with a
`ModelAPIError` saying so (waiting less would only earn another refusal); a
wait of Groundswell's own choosing is cut to ``max_retry_wait``.
"""

from __future__ import annotations

import email.utils
import logging
import random
import time
import weakref
from collections.abc import Mapping
from typing import Any

from ..errors import ModelAPIError

__all__ = [
    "DEFAULT_MAX_RETRY_WAIT",
    "error_body",
    "retry_after",
    "retry_delay",
    "without_sdk_retries",
]

logger = logging.getLogger("groundswell.model")

#: Seconds a ``Retry-After`` is honoured at most when ``max_retry_wait`` is not set.
DEFAULT_MAX_RETRY_WAIT = 60.0
_FIRST_DELAY = 0.5
_LONGEST_DELAY = 8.0

# By id, dropped when the client is collected (before its id can be reused): a
# lookup costs less than a WeakKeyDictionary's, which makes a weak reference each time.
_copies: dict[int, Any] = {}


def without_sdk_retries(client: Any) -> Any:
    """``client`` with the SDK's own retries off, made on first use and then kept.

    ``None`` for a client that cannot be copied so (its own retries then stay on).
    """
    key = id(client)
    try:
        return _copies[key]
    except KeyError:
        pass
    try:
        weakref.finalize(client, _copies.pop, key, None)
    except TypeError:  # not weakly referenceable: no copy per call, its own retries stay on
        return None
    # The copy shares the client's connection pool and holds no reference back to it.
    bare = _copies[key] = _copy(client)
    return bare


def _copy(client: Any) -> Any:
    try:
        return client.with_options(max_retries=0)
    except Exception:  # a client of another make: leave its retries to it
        return None


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """The seconds an answer's headers ask to wait before a retry, if they ask."""
    if not headers:
        return None
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return float(millis) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    when = email.utils.parsedate_tz(value)  # an HTTP date
    if when is None:
        return None
    return float(email.utils.mktime_tz(when) - time.time())


def retry_delay(
    exc: Exception, retries_taken: int, *, max_wait: float, model: str
) -> tuple[float, int | None] | None:
    """How long to wait before retrying after ``exc``, and its status; ``None``: do not.

    Raises `ModelAPIError` when the API asks for a longer wait than ``max_wait``.
    """
    import anthropic

    status: int | None = None
    asked: float | None = None
    if isinstance(exc, anthropic.APIStatusError):
        response = exc.response
        status = response.status_code
        if status == 200:  # an error event inside a stream: the agent loop's to retry
            return None
        should = response.headers.get("x-should-retry")
        if should == "false" or (
            should != "true" and status not in (408, 409, 429) and status < 500
        ):
            return None
        asked = retry_after(response.headers)
    elif not isinstance(exc, anthropic.APIConnectionError):  # timeouts are connection errors
        return None
    if asked is not None and asked > 0:
        if asked > max_wait:
            raise _too_long(exc, asked, max_wait, model) from exc
        wait = asked
    else:
        backoff = min(_FIRST_DELAY * 2.0 ** min(retries_taken, 32), _LONGEST_DELAY)
        wait = min(backoff * (1 - 0.25 * random.random()), max_wait)
    logger.info(
        "retry %d of a Messages API request in %.3g s, after %s",
        retries_taken + 1,
        wait,
        f"status {status}" if status is not None else type(exc).__name__,
    )
    return wait, status


def error_body(exc: Any) -> tuple[str, str]:
    """The API's error type (``""`` when it sent none) and message of an ``APIStatusError``."""
    body = exc.body if isinstance(exc.body, Mapping) else {}
    err = body.get("error")
    if not isinstance(err, Mapping):
        return "", str(exc.message)
    return str(err.get("type", "")), str(err.get("message", exc.message))


def _too_long(exc: Any, asked: float, max_wait: float, model: str) -> ModelAPIError:
    kind, message = error_body(exc)
    return ModelAPIError(
        f"Anthropic API error {exc.status_code} {kind}: {message}; the API asked to wait "
        f"{asked:g} s before a retry, longer than max_retry_wait={max_wait:g} s, so the "
        f"request to {model!r} failed at once: raise max_retry_wait (on the Agent, Prompt or "
        "PromptOverrides) to wait that long, or try again later",
        status_code=exc.status_code,
        error_type=kind or None,
        retry_after=asked,
    )
