"""Building Messages API requests: `build_request`, and `uses_beta` for the namespace they go to.

Fields pass through by their API names: every field of the installed SDK's
request types (`groundswell.model.request_fields`). ``temperature``, ``top_p`` and
``top_k`` travel in ``extra_body`` (the SDK no longer names them); a
``response_format`` (any type pydantic's ``TypeAdapter`` takes, see
`output_type`) fills ``output_config.format`` with its JSON schema, beside
any ``effort``; requests with ``betas``, remote ``mcp_servers`` or a field
only the beta request type has use the SDK's beta namespace.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .output_types import output_type
from .request_settings import RequestSettings

__all__ = ["build_request", "uses_beta"]

SAMPLING_FIELDS = ("temperature", "top_p", "top_k")


def build_request(
    settings: Mapping[str, Any],
    messages: list[dict[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]],
    system: Any,
    response_format: Any,
    bare: bool = False,
) -> dict[str, Any]:
    """The keyword arguments for ``messages.create`` (see `uses_beta`).

    ``bare=True`` says ``settings`` are known to set nothing beyond the model,
    max_tokens, system and tools (an agent's, checked once when it was made).

    ``settings`` holds the request fields by their API names: every field of
    the installed SDK's request types that is set is sent as it is
    (`groundswell.model.request_fields`), but ``output_config``, which is merged:
    ``effort`` fills its ``effort`` and a ``response_format`` its ``format``,
    keeping whatever else it holds.
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
    if response_format is None:
        if bare:
            return params
        # The usual request sets none of the other fields: an agent's settings hold each
        # `RequestSettings` field (None when unset), so one C call reads them all, and
        # the SDK's fields without a keyword of their own are in it only when set.
        read, others = _reader or _load_reader()
        try:
            values: tuple[Any, ...] = read(settings)
        except KeyError:  # not an agent's settings (each field read below instead)
            values = (True,)
        if values.count(None) == len(values) and settings.keys().isdisjoint(others):
            return params
    # One lookup per field (this runs for every model turn), and no extra_body
    # dict unless something goes in it.
    get = settings.get
    names = _passthrough or _load_passthrough()
    # Read in C (map), and walked in Python only when one of them is set.
    values = tuple(map(get, names))
    if values.count(None) != len(values):
        for name, value in zip(names, values, strict=True):
            if value is not None:
                params[name] = value
    value = get("extra_headers")
    if value is not None:
        params["extra_headers"] = value
    given = get("extra_body")
    extra_body = dict(given) if given else {}
    for name in SAMPLING_FIELDS:
        value = get(name)
        if value is not None:
            extra_body[name] = value
    if extra_body:
        params["extra_body"] = extra_body
    config = get("output_config")
    effort = get("effort")
    if config is not None or effort is not None or response_format is not None:
        merged = dict(config) if config else {}
        if effort is not None:
            merged["effort"] = effort
        if response_format is not None:
            merged["format"] = {
                "type": "json_schema",
                "schema": output_type(response_format).schema,
            }
        params["output_config"] = merged
    value = get("betas")
    if value:
        params["betas"] = list(value)
    value = params.get("mcp_servers")
    if value:
        params["mcp_servers"] = [dict(s) for s in value]
    return params


_passthrough: tuple[str, ...] = ()


# How `build_request` tells, in two C calls, that settings set no other field: a getter
# of every `RequestSettings` field it reads (KeyError: not an agent's settings), and the
# request fields an agent's settings hold only when they are set.
_reader: tuple[Callable[[Mapping[str, Any]], Any], frozenset[str]] | None = None


def _load_reader() -> tuple[Callable[[Mapping[str, Any]], Any], frozenset[str]]:
    global _reader
    keyed = {f.name for f in dataclasses.fields(RequestSettings)}
    # Everything build_request reads beyond model, max_tokens, system and tools.
    read = {*(_passthrough or _load_passthrough()), *SAMPLING_FIELDS}
    read |= {"extra_headers", "extra_body", "output_config", "effort", "betas"}
    _reader = (operator.itemgetter(*sorted(read & keyed)), frozenset(read - keyed))
    return _reader


def _load_passthrough() -> tuple[str, ...]:
    global _passthrough
    from .request_fields import passthrough_fields

    _passthrough = passthrough_fields()
    return _passthrough


def uses_beta(params: Mapping[str, Any]) -> bool:
    """True when a request needs the SDK's beta namespace: ``betas``, remote MCP servers,
    or a field only the beta request type has."""
    # One C call for the usual request, which has none of these keys at all.
    if params.keys().isdisjoint(_beta_keys or _load_beta_keys()):
        return False
    if params.get("betas") or params.get("mcp_servers"):
        return True
    return not _beta_only.isdisjoint(params)


_beta_only: frozenset[str] = frozenset()  # the fields only the beta request type has
_beta_keys: frozenset[str] = frozenset()  # those, and the two that also send a request there


def _load_beta_keys() -> frozenset[str]:
    global _beta_only, _beta_keys
    from .request_fields import beta_only

    _beta_only = beta_only()
    _beta_keys = _beta_only | {"betas", "mcp_servers"}
    return _beta_keys
