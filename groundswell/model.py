"""Building Messages API requests and calling ``anthropic.AsyncAnthropic``.

Fields pass through by their API names. ``temperature``, ``top_p`` and
``top_k`` travel in ``extra_body`` (the SDK no longer names them); a
``response_format`` becomes ``output_config.format`` with the model's JSON
schema; requests with ``betas`` or remote ``mcp_servers`` use the SDK's beta
namespace. SDK errors become `ModelAPIError` with the SDK's exception
as ``__cause__``; the SDK's own transport retries are left to the SDK.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from .errors import ModelAPIError, ResponseValidationError

if TYPE_CHECKING:
    import anthropic

# anthropic (and httpx2 under it) take about a second to import: they are imported
# where a model is called or an error classified, so that importing the agent's
# building blocks (e.g. to define a Middleware in a plugin) stays cheap.

__all__ = [
    "api_error",
    "build_request",
    "call_model",
    "is_retryable_stream_error",
    "parse_output",
    "uses_beta",
]

SAMPLING_FIELDS = ("temperature", "top_p", "top_k")
PASSTHROUGH_FIELDS = (
    "tool_choice",
    "stop_sequences",
    "metadata",
    "thinking",
    "service_tier",
    "extra_headers",
)
# Error types that mean "try that turn again" when they arrive mid-stream.
_RETRYABLE_STREAM_ERRORS = {"overloaded_error": 529, "api_error": 500, "timeout_error": 504}


def build_request(
    settings: Mapping[str, Any],
    messages: list[dict[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]],
    system: Any,
    response_format: type[BaseModel] | None,
) -> dict[str, Any]:
    """The keyword arguments for ``messages.create`` (see `uses_beta`).

    ``settings`` holds the request fields by their API names; ``mcp_servers``
    (remote MCP servers) and ``container`` are sent as they are there.
    """
    params: dict[str, Any] = {
        "model": settings["model"],
        "max_tokens": settings["max_tokens"],
        "messages": messages,
    }
    if system:
        params["system"] = system
    if tools:
        params["tools"] = list(tools)
    for name in PASSTHROUGH_FIELDS:
        if settings.get(name) is not None:
            params[name] = settings[name]
    extra_body = dict(settings.get("extra_body") or {})
    for name in SAMPLING_FIELDS:
        if settings.get(name) is not None:
            extra_body[name] = settings[name]
    if extra_body:
        params["extra_body"] = extra_body
    if settings.get("container") is not None:
        params["container"] = settings["container"]
    if response_format is not None:
        params["output_config"] = {
            "format": {"type": "json_schema", "schema": _schema(response_format)}
        }
    if settings.get("betas"):
        params["betas"] = list(settings["betas"])
    if settings.get("mcp_servers"):
        params["mcp_servers"] = [dict(s) for s in settings["mcp_servers"]]
    return params


def uses_beta(params: Mapping[str, Any]) -> bool:
    """True when a request needs the SDK's beta namespace (betas or remote MCP servers)."""
    return bool(params.get("betas") or params.get("mcp_servers"))


@functools.lru_cache(maxsize=256)
def _schema(response_format: type[BaseModel]) -> dict[str, Any]:
    # Building a model's JSON schema costs ~200 us; a model class does not change.
    import anthropic

    schema: dict[str, Any] = anthropic.transform_schema(response_format)
    return schema


def api_error(exc: Exception, model: str) -> ModelAPIError:
    """A `ModelAPIError` describing an SDK exception (raise it ``from exc``)."""
    import anthropic
    import httpx2

    if isinstance(exc, anthropic.APIStatusError):
        kind, message = _error_body(exc)
        status = exc.status_code
        if status == 200 and kind:  # an error event in the middle of a stream
            status = _RETRYABLE_STREAM_ERRORS.get(kind, 500)
        hint = {
            401: " (check ANTHROPIC_API_KEY or the client's api_key)",
            403: " (the key lacks permission for this model or feature)",
            404: f" (is {model!r} a model name your key can use?)",
            402: " (billing: check the account's credit balance)",
            429: " (rate limited; the SDK's retries are used up)",
        }.get(status, "")
        return ModelAPIError(
            f"Anthropic API error {status} {kind}: {message}{hint}",
            status_code=status,
            error_type=kind or None,
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
    return ModelAPIError(f"model call failed: {type(exc).__name__}: {exc}", status_code=None)


def _error_body(exc: anthropic.APIStatusError) -> tuple[str, str]:
    body = exc.body if isinstance(exc.body, Mapping) else {}
    err = body.get("error")
    if not isinstance(err, Mapping):
        return "", str(exc.message)
    return str(err.get("type", "")), str(err.get("message", exc.message))


def is_retryable_stream_error(exc: Exception) -> bool:
    """True for an overload/server error event or a dropped connection in mid-stream."""
    import anthropic
    import httpx2

    if isinstance(exc, anthropic.APIStatusError) and exc.status_code == 200:
        return _error_body(exc)[0] in _RETRYABLE_STREAM_ERRORS
    # The SDK retries failed connections itself, but not a body that breaks off.
    return isinstance(exc, httpx2.TransportError)


async def call_model(
    client: anthropic.AsyncAnthropic,
    params: dict[str, Any],
    on_delta: Callable[[str, str], None] | None = None,
) -> Any:
    """One model round trip; streams when ``on_delta(kind, text)`` is given."""
    api: Any = client.beta.messages if uses_beta(params) else client.messages
    if on_delta is None:
        try:
            return await api.create(**params)
        except ValueError as exc:
            # The SDK refuses non-streaming requests that may run past ten minutes
            # (a large max_tokens); stream those and collect the final message.
            if "streaming" not in str(exc).lower():
                raise
    async with api.stream(**params) as stream:
        async for event in stream:
            if on_delta is None:
                continue
            if event.type == "text":
                on_delta("text", event.text)
            elif event.type == "input_json":
                on_delta("tool_input", event.partial_json)
        return await stream.get_final_message()


_FENCE = re.compile(r"^```(?:json)?\s*\n(.*)\n```\s*$", re.S)


def parse_output(text: str, response_format: type[BaseModel] | None) -> Any:
    """The final answer: the text itself, or a validated ``response_format`` instance."""
    if response_format is None:
        return text
    candidate = text.strip()
    fenced = _FENCE.match(candidate)
    if fenced:  # without structured outputs some models wrap JSON in a code fence
        candidate = fenced.group(1)
    try:
        return response_format.model_validate_json(candidate)
    except ValidationError as exc:
        errors = json.loads(exc.json(include_url=False))
        summary = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in errors[:5]
        )
        raise ResponseValidationError(
            f"the reply does not fit {response_format.__name__}: {summary}",
            raw=text,
            errors=errors,
        ) from exc
