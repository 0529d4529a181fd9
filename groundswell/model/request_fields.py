"""Which Messages API request fields Groundswell passes: those of the installed SDK.

The set comes from ``anthropic.types.MessageCreateParams`` and its beta twin,
read once, so a field a newer SDK adds is accepted (as a keyword of `Agent`,
`Prompt` and `PromptOverrides`), checked against the SDK's type and sent,
with no change here. A field only the beta type has sends the request
through the SDK's beta namespace.

Groundswell builds ``messages`` (the conversation) and ``stream`` itself.
It adds its own request settings beside the SDK's: ``temperature``,
``top_p`` and ``top_k`` (which this SDK no longer names; they travel in
``extra_body``), ``effort`` (shorthand for ``output_config.effort``),
``extra_headers`` and ``extra_body``. A key of ``extra_body`` that is
neither gets a warning naming it, once: nothing checks it before the API.
"""

from __future__ import annotations

import difflib
import functools
import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import ConfigurationError

__all__ = [
    "COMPOSED",
    "GROUNDSWELL_REQUEST",
    "beta_only",
    "check_extra_body",
    "is_request_field",
    "passthrough_fields",
    "sdk_fields",
    "unknown_fields",
]

logger = logging.getLogger("groundswell.agent")

#: Fields Groundswell builds itself for each model turn.
COMPOSED = frozenset({"messages", "stream"})
#: Request settings Groundswell maps itself (see the module docstring).
GROUNDSWELL_REQUEST = frozenset(
    {"temperature", "top_p", "top_k", "effort", "extra_headers", "extra_body"}
)
# Fields build_request places itself rather than copying them.
_PLACED = frozenset({"model", "max_tokens", "system", "tools", "output_config", "betas"})


@functools.cache
def _declared() -> tuple[frozenset[str], frozenset[str]]:
    """The field names of the SDK's standard and beta ``MessageCreateParams``."""
    from anthropic.types import message_create_params as standard
    from anthropic.types.beta import message_create_params as beta

    def names(params: Any) -> frozenset[str]:
        # The TypedDict's own annotations (typing hints would resolve every type).
        found: set[str] = set()
        for klass in reversed(params.__mro__):
            found.update(getattr(klass, "__annotations__", {}))
        return frozenset(found)

    return names(standard.MessageCreateParamsBase), names(beta.MessageCreateParamsBase)


def sdk_fields() -> frozenset[str]:
    """Every request field either of the SDK's namespaces takes, but those Groundswell builds."""
    return _all_fields()


@functools.cache
def _all_fields() -> frozenset[str]:
    standard, beta = _declared()
    return (standard | beta) - COMPOSED


@functools.cache
def beta_only() -> frozenset[str]:
    """The fields only the beta namespace takes (a request with one of them goes there)."""
    standard, beta = _declared()
    return beta - standard


@functools.cache
def passthrough_fields() -> tuple[str, ...]:
    """The fields `build_request` copies as they are set (sorted, for a stable request)."""
    return tuple(sorted(_all_fields() - _PLACED))


def is_request_field(name: str) -> bool:
    """True for a field of the SDK's request types, or one of Groundswell's own request settings."""
    return name in GROUNDSWELL_REQUEST or name in _all_fields()


def unknown_fields(owner: str, names: Iterable[str], known: Iterable[str] = ()) -> None:
    """Refuse keywords that are neither ``known`` nor request fields, suggesting close names."""
    choices = sorted({*known, *_all_fields(), *GROUNDSWELL_REQUEST})
    for name in names:
        if name in choices:
            continue
        close = difflib.get_close_matches(name, choices, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ConfigurationError(
            f"{owner}: {name!r} is not a setting, nor a request field of the installed "
            f"anthropic SDK's MessageCreateParams{hint} (a field of a newer SDK needs that "
            "SDK; until then pass it in extra_body)"
        )


_warned: set[str] = set()
_warned_lock = threading.Lock()


def check_extra_body(body: Mapping[str, Any] | None) -> None:
    """Warn once per key of ``extra_body`` that no check sees before the API."""
    if not body:
        return
    fields = _all_fields()
    for key in body:
        if not isinstance(key, str) or key in _warned or key in GROUNDSWELL_REQUEST:
            continue
        with _warned_lock:
            if key in _warned:
                continue
            _warned.add(key)
        if key in fields:
            logger.warning(
                "extra_body[%r] is a request field of the installed SDK: pass it as %s=... "
                "instead, where it is checked against the SDK's type (and merged with what "
                "Groundswell sets); in extra_body it overrides the request unchecked",
                key,
                key,
            )
        else:
            logger.warning(
                "extra_body[%r] is not a request field of the installed anthropic SDK: it is "
                "sent as it is, unchecked (warned once)",
                key,
            )
