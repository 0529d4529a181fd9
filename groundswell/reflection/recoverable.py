"""Which failures another attempt can fix, and the mark a retry loop leaves when it gives up.

Every reflection level (workflow, agent, prompt) asks `is_recoverable`
before it tries again, and `mark_given_up` / `gave_up_on` keep
``max_attempts`` a hard cap however levels nest: once one loop gave up on a
failure, no enclosing loop starts over.
"""

from __future__ import annotations

import contextlib

from ..errors import (
    ConfigurationError,
    ExtractionError,
    MaxTurnsExceeded,
    ModelAPIError,
    ModelRefused,
    OutputTruncated,
    PluginError,
    ResponseValidationError,
    WorkflowError,
)

__all__ = ["AGENT_REFLECTABLE", "gave_up_on", "is_recoverable", "mark_given_up"]

# API error types that no second attempt can fix: the account, the key or the
# request's configuration is wrong, or the rate limit outlasted the retries.
_FATAL_API_ERRORS = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "billing_error",
        "rate_limit_error",
        "request_too_large",
    }
)
_FATAL_STATUS = frozenset({400, 401, 402, 403, 404, 413, 422, 429})


def is_recoverable(exc: BaseException) -> bool:
    """False for failures another attempt cannot fix.

    Never recoverable: cancellation and other ``BaseException``\\ s,
    configuration and plugin errors, API errors for authentication,
    permission, billing, a bad or too-large request, a reply that filled the
    context window, an unknown model, or a
    rate limit that outlasted the client's retries, and any exception whose
    ``recoverable`` attribute is ``False`` (a stand-in for one of those).
    """
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if not isinstance(exc, Exception) or getattr(exc, "recoverable", True) is False:
        return False
    if isinstance(exc, WorkflowError) and exc.__cause__ is not None:
        return is_recoverable(exc.__cause__)
    if isinstance(exc, ConfigurationError | PluginError):
        return False
    if isinstance(exc, ModelAPIError):
        if exc.error_type in _FATAL_API_ERRORS:
            return False
        return exc.status_code not in _FATAL_STATUS
    return True


#: What agent- and prompt-level reflection acts on: a reply the model can fix.
AGENT_REFLECTABLE: tuple[type[Exception], ...] = (
    ResponseValidationError,
    MaxTurnsExceeded,
    ExtractionError,
    ModelRefused,
    OutputTruncated,
)


_GAVE_UP = "_groundswell_reflection_gave_up"


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        while isinstance(current, BaseExceptionGroup) and current.exceptions:
            current = current.exceptions[0]
            seen.append(current)
        current = current.__cause__
    return seen


def mark_given_up(exc: BaseException) -> None:
    """Note that a reflection loop has given up on this failure."""
    for item in _chain(exc):
        with contextlib.suppress(AttributeError, TypeError):
            setattr(item, _GAVE_UP, True)


def gave_up_on(exc: BaseException) -> bool:
    """True when some reflection loop (any level) already gave up on this failure.

    An enclosing step or workflow then does not start over: ``max_attempts``
    stays a hard cap however levels nest.
    """
    return any(getattr(item, _GAVE_UP, False) for item in _chain(exc))
