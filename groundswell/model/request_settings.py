"""The request settings `Prompt` and `PromptOverrides` share with `Agent`.

Each is a Messages API request field by its API name (checked against the
installed SDK's type when the prompt or override is built), or one of
Groundswell's own request settings. A field of the SDK's request types with
no keyword here (one a newer SDK adds) is taken by name too: it is kept in
``request_fields`` and sent the same way.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, TypeVar

from ..errors import ConfigurationError
from ..scrubbing.scrubber import REDACTED, is_secret_field
from .request_fields import unknown_fields

__all__ = [
    "REQUEST_SETTINGS",
    "RequestKeywords",
    "RequestSettings",
    "set_fields_repr",
    "takes_request_fields",
]

C = TypeVar("C", bound=type)


@dataclass(frozen=True, kw_only=True)
class RequestSettings:
    """Request fields by API name (``None``: not set here, the next level's applies)."""

    model: str | None = None
    max_tokens: int | None = None
    tool_choice: Mapping[str, Any] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop_sequences: Sequence[str] | None = None
    metadata: Mapping[str, Any] | None = None
    thinking: Mapping[str, Any] | None = None
    betas: Sequence[str] | None = None
    container: Any = None
    service_tier: str | None = None
    cache_control: Mapping[str, Any] | None = None
    output_config: Mapping[str, Any] | None = None
    #: ``output_config.effort``: ``"low"``, ``"medium"``, ``"high"``... as the SDK names them.
    effort: str | None = None
    inference_geo: str | None = None
    context_management: Mapping[str, Any] | None = None
    extra_headers: Mapping[str, str] | None = None
    extra_body: Mapping[str, Any] | None = None
    #: ``False``, ``True``/``"5m"``, ``"1h"``, or breakpoint places (docs/caching.md).
    prompt_cache: bool | str | Sequence[str] | None = None
    #: Ask for another turn when the reply is cut off inside a tool call.
    continue_on_max_tokens: bool | None = None
    #: Seconds an API's ``Retry-After`` is honoured at most.
    max_retry_wait: float | None = None
    #: Send the model calls through the Message Batches API (docs/batches.md).
    batch: bool | None = None
    #: Fields of the SDK's request types with no keyword of their own, by API name.
    request_fields: Mapping[str, Any] | None = None

    def request_settings(self) -> dict[str, Any]:
        """The request settings set here, ``request_fields`` spread out."""
        found = {name: value for name in _NAMES if (value := getattr(self, name)) is not None}
        if self.request_fields:
            found.update(self.request_fields)
        return found


#: The request settings by name, as `RequestSettings` declares them (``request_fields`` aside).
REQUEST_SETTINGS = tuple(
    f.name for f in dataclasses.fields(RequestSettings) if f.name != "request_fields"
)
_NAMES = REQUEST_SETTINGS


class RequestKeywords(TypedDict, total=False):
    """The keywords of `RequestSettings`, for typing the constructors that take them."""

    model: str | None
    max_tokens: int | None
    tool_choice: Mapping[str, Any] | None
    temperature: float | None
    top_p: float | None
    top_k: int | None
    stop_sequences: Sequence[str] | None
    metadata: Mapping[str, Any] | None
    thinking: Mapping[str, Any] | None
    betas: Sequence[str] | None
    container: Any
    service_tier: str | None
    cache_control: Mapping[str, Any] | None
    output_config: Mapping[str, Any] | None
    effort: str | None
    inference_geo: str | None
    context_management: Mapping[str, Any] | None
    extra_headers: Mapping[str, str] | None
    extra_body: Mapping[str, Any] | None
    prompt_cache: bool | str | Sequence[str] | None
    continue_on_max_tokens: bool | None
    max_retry_wait: float | None
    batch: bool | None
    request_fields: Mapping[str, Any] | None


def set_fields_repr(obj: Any, first: str | None = None) -> str:
    """``Name(field=value, ...)`` of the fields ``obj`` sets, credentials redacted.

    A prompt or override has some forty fields, nearly all ``None``; a field
    named for a credential (``fallback_credit_token``) shows as ``**********``.
    """
    shown = [f"{first}={getattr(obj, first)!r}"] if first else []
    for item in dataclasses.fields(obj):
        if not item.repr or item.name == first:
            continue
        value = getattr(obj, item.name)
        if value is None:
            continue
        if isinstance(value, Mapping) and item.name == "request_fields":
            value = {k: REDACTED if is_secret_field(k) else v for k, v in value.items()}
        shown.append(f"{item.name}={value!r}")
    return f"{type(obj).__name__}({', '.join(shown)})"


# What other agent frameworks (pydantic-ai among them) call our fields.
_ELSEWHERE = {
    "output_type": "response_format",
    "result_type": "response_format",
    "response_format": "response_format",  # for PromptOverrides, which has none
    "system_prompt": "system",
    "instructions": "system",
}


def takes_request_fields(cls: C) -> C:
    """Let the dataclass ``cls`` take any request field of the SDK's by name.

    A keyword ``cls`` does not declare is refused unless it is a field of the
    installed SDK's request types; such fields go into ``request_fields``.
    """
    init: Callable[..., None] = cls.__init__  # type: ignore[misc]
    own = frozenset(f.name for f in dataclasses.fields(cls) if f.init)
    name = cls.__name__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **given: Any) -> None:
        if args:  # Python's own message would count self and say nothing of the keywords
            example = (
                f"{name}(user={args[0]!r:.40})"
                if "user" in own and "user" not in given
                else f"{name}(model=..., temperature=...)"
            )
            raise ConfigurationError(
                f"{name} takes keyword arguments only, got {len(args)} positional; name "
                f"each one: {example}"
            )
        extra = [key for key in given if key not in own]
        if extra:
            for key in extra:
                meant = _ELSEWHERE.get(key)
                if meant in own:  # another framework's name for one of ours
                    raise ConfigurationError(
                        f"{name}: {key!r} is not a setting; did you mean {meant}=...?"
                    )
                if meant == "response_format":
                    raise ConfigurationError(
                        f"{name}: {key!r} is not a setting; the answer's type is set per "
                        "prompt: Prompt(user=..., response_format=...)"
                    )
            unknown_fields(name, extra, own)
            more = dict(given.get("request_fields") or {})
            for key in extra:
                more[key] = given.pop(key)
            given["request_fields"] = more
        init(self, **given)

    cls.__init__ = __init__  # type: ignore[misc]
    return cls
